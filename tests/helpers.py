"""Small helpers shared by the tests."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Mapping
from pathlib import Path

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
