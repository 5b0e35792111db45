"""Small helpers shared by the tests."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from fencing import PartitionLog
from talos import decode_records, iter_batches
from talos.devservices import StandaloneServer


def decoded(data: bytes) -> list[tuple[int, bytes | None]]:
    """``(offset, value)`` of every record in a buffer of batches."""
    return [(r.offset, r.value) for pos, _ in iter_batches(data) for r in decode_records(data, pos)]


def read_all(plog: PartitionLog) -> list[tuple[int, bytes | None]]:
    """Every durable record from the start of the log (a read stays inside one segment: loop)."""
    out: list[tuple[int, bytes | None]] = []
    offset = plog.start_offset
    while offset < plog.durable_offset:
        chunk = [item for item in decoded(plog.read(offset, 1 << 20)) if item[0] >= offset]
        out.extend(chunk)
        offset = chunk[-1][0] + 1
    return out


def least_moves(n: int, members: list[str], current: Mapping[tuple[str, int], str], topic: str) -> int:
    """The fewest of a topic's ``n`` partitions any balanced assignment to ``members`` must move from
    ``current``, by brute force over which members get the extra partitions (independent of the assigner)."""
    held = {m: sum(1 for p in range(n) if current.get((topic, p)) == m) for m in members}
    base, extra = divmod(n, len(members))
    best_kept = 0
    for lucky in itertools.combinations(members, extra):
        best_kept = max(best_kept, sum(min(held[m], base + (1 if m in lucky else 0)) for m in members))
    return n - best_kept


@contextlib.contextmanager
def running_standalone(data_dir: Path, env: dict[str, str] | None = None) -> Iterator[StandaloneServer]:
    """A real ``talos standalone`` process, stopped by PID when the block ends (also on failure)."""
    instance = StandaloneServer(data_dir, env=env)
    try:
        yield instance.start()
    finally:
        instance.stop()


REPO = Path(__file__).resolve().parents[1]


def kustomize_command() -> list[str]:
    """How to render a kustomization: TALOS_KUSTOMIZE, the kustomize scripts/install puts in .venv/bin, one on
    PATH, or ``kubectl kustomize``. None of them is a failure, not a skip: CI installs one."""
    explicit = os.environ.get("TALOS_KUSTOMIZE")
    beside_python = Path(sys.executable).parent / "kustomize"
    for found in (explicit, str(beside_python) if beside_python.exists() else None, shutil.which("kustomize")):
        if found:
            return [found, "build"]
    kubectl = shutil.which("kubectl")
    if kubectl:
        return [kubectl, "kustomize"]
    pytest.fail("no kustomize to render k8s/: run scripts/install --dev (or set TALOS_KUSTOMIZE)")


def render_overlay(name: str) -> list[dict[str, Any]]:
    """The objects ``kustomize build k8s/overlays/NAME`` prints."""
    done = subprocess.run(
        [*kustomize_command(), str(REPO / "k8s" / "overlays" / name)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"kustomize build k8s/overlays/{name} failed:\n{done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]
