"""Split brain between two OS processes, on the local disk and on the real HDFS.

Writer A appends and acknowledges in a loop; at a random moment B takes the partition over (new epoch,
lease recovery / seal, new segment) while A keeps going. Every acknowledged write of A must be in what
B reads, byte for byte; A must report it was fenced and acknowledge nothing that started after B's
takeover; nothing of A follows B's first batch; offsets stay contiguous.

Rounds cycle through five kinds: A held right after it sealed its old segment in a roll, held right
after it created the new one, held right after a sync (before its fencing check) — B takes over while
A is held there —, and two kinds of random timing (small segments with pauses inside every roll, and
large segments with small random pauses).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from server.devservices import HdfsCluster
from talos import decode_records, read_header
from tests.conftest import Storage

ROUNDS = int(os.environ.get("TALOS_SPLIT_BRAIN_ROUNDS", "50"))
WORKER = [sys.executable, str(Path(__file__).with_name("race_worker.py"))]
ROOT = str(Path(__file__).parents[2])
HOLD_STEPS = ["roll:sealed-old", "roll:created-new", "flush:synced", "random-rolling", "random-large"]


class Worker:
    """A worker process whose JSON lines are collected by a thread."""

    def __init__(self, args: list[str]) -> None:
        env = {**os.environ, "PYTHONPATH": ROOT}
        self.process = subprocess.Popen([*WORKER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.events.append(json.loads(line))

    def wait_for(self, kind: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # Whether it ended, asked before looking: its last line may come in between.
            ended = self.process.poll() is not None and not self._reader.is_alive()
            for event in self.events:
                if event["event"] == kind:
                    return event
            if ended:
                break
            time.sleep(0.005)
        raise AssertionError(f"no {kind!r} from worker: {self.events[-3:]}\n{self.stderr()}")

    def finish(self, timeout: float) -> None:
        try:
            self.process.wait(timeout)
        finally:
            self.stop()
        self._reader.join(5)

    def stderr(self) -> str:
        if self.process.poll() is None or self.process.stderr is None:
            return ""
        return self.process.stderr.read().decode(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def datanode_log(storage: Storage, request: pytest.FixtureRequest) -> Path | None:
    """The DataNode's log on HDFS (:func:`race` looks in it), None on the local disk."""
    if storage.backend != "hdfs":
        return None
    cluster: HdfsCluster = request.getfixturevalue("hdfs")
    assert cluster.datanode is not None, "the session's HDFS is running"
    return cluster.datanode.log_path


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(ROUNDS))
def test_split_brain_round(storage: Storage, round_: int, tmp_path: Path, datanode_log: Path | None) -> None:
    rng = random.Random(round_)
    kind = HOLD_STEPS[round_ % 5]
    rolling = kind != "random-large"
    release = tmp_path / "release"
    writer_args = [
        "writer", "--url", storage.url, "--dir", "p", "--seed", str(round_),
        "--segment-bytes", str(rng.randint(3000, 12000) if rolling else 1 << 20),
        "--pause-ms", str(rng.choice([0, 2, 10]) if not rolling else rng.choice([30, 80])),
        "--pause-chance", "0.1", "--roll-pause-chance", "0.8" if rolling else "0.1",
    ]  # fmt: skip
    if kind.startswith(("roll:", "flush:")):
        writer_args += ["--hold-at", kind, "--hold-after", str(rng.randint(1, 4)), "--release-file", str(release)]

    def before(a: Worker) -> None:
        if kind.startswith(("roll:", "flush:")):
            a.wait_for("holding", timeout=60)
        else:
            time.sleep(rng.uniform(0.0, 0.4))

    def during(a: Worker, b: Worker) -> dict[str, Any]:
        # A takeover recovers the HDFS lease of the open segment (up to a minute), then writes and reads the whole
        # log: once over 120 s on a loaded 2-core CI machine. The round checks its safety, not its speed.
        took = b.wait_for("took-over", timeout=300)
        b.finish(timeout=60)
        release.touch()
        return took

    taker_args = ["taker", "--url", storage.url, "--dir", "p"]
    a, took = race(writer_args, taker_args, before, during, release=release, datanode_log=datanode_log)
    check_takeover(a, took)


def race(
    writer_args: list[str],
    taker_args: list[str],
    before: Callable[[Worker], None],
    during: Callable[[Worker, Worker], dict[str, Any]],
    *,
    release: Path,
    datanode_log: Path | None,
) -> tuple[Worker, dict[str, Any]]:
    """Start A, ``before`` once it is ready, start B, ``during`` until B took over and ended (B's event);
    then A ends too.

    On HDFS 2.7.3 a takeover can fail for a reason outside Talos: when block recovery stops an old writer whose
    DataNode thread is inside a sync, the block file is left longer than the replica's recorded length, and every
    later recovery of that block fails ("File length mismatched" in the DataNode's log) until the DataNode
    restarts. The round is then run again in a fresh directory, at most twice; any other failure fails the test.
    """
    for attempt in range(3):
        directory = f"p{attempt}"
        seen = datanode_log.stat().st_size if datanode_log is not None else 0
        release.unlink(missing_ok=True)
        try:
            return _race_once(_in(writer_args, directory), _in(taker_args, directory), before, during)
        except AssertionError:
            if datanode_log is None or attempt == 2 or not _recovery_stuck_since(datanode_log, seen):
                raise
            print(f"attempt {attempt}: the DataNode's block recovery is stuck (HDFS 2.7.3), again in a fresh directory")
    raise AssertionError("unreachable")


def _in(args: list[str], directory: str) -> list[str]:
    at = args.index("--dir") + 1
    return [*args[:at], directory, *args[at + 1 :]]


def _recovery_stuck_since(datanode_log: Path, offset: int) -> bool:
    with datanode_log.open("rb") as log:
        log.seek(offset)
        return b"File length mismatched" in log.read()


def _race_once(
    writer_args: list[str],
    taker_args: list[str],
    before: Callable[[Worker], None],
    during: Callable[[Worker, Worker], dict[str, Any]],
) -> tuple[Worker, dict[str, Any]]:
    a = Worker(writer_args)
    try:
        a.wait_for("ready", timeout=60)
        before(a)
        b = Worker(taker_args)
        try:
            took = during(a, b)
        finally:
            b.stop()
        a.finish(timeout=60)
    finally:
        a.stop()
    return a, took


def check_takeover(a: Worker, took: dict[str, Any]) -> None:
    """A was fenced, and everything it acknowledged is in what B read, before B's own batches."""
    ends = [e for e in a.events if e["event"] in ("fenced", "error", "timeout")]
    assert [e["event"] for e in ends] == ["fenced"], f"A did not report being fenced: {ends}"
    acks = [e for e in a.events if e["event"] == "ack"]

    stored = {base: bytes.fromhex(raw) for base, raw in took["batches"]}
    # Contiguous offsets from 0 across everything B can read.
    expected = 0
    for base in sorted(stored):
        assert base == expected, f"gap or overlap at offset {base} (expected {expected})"
        expected = read_header(stored[base]).next_offset

    # Every acknowledged batch of A is there, byte for byte, and before B's first batch.
    for ack in acks:
        assert stored.get(ack["base"]) == bytes.fromhex(ack["hex"]), f"acknowledged batch at {ack['base']} lost"
        assert ack["next"] <= took["first"]
    assert [a["base"] for a in acks] == sorted(a["base"] for a in acks)

    # A acknowledged nothing it started after B's takeover was complete.
    late = [ack["base"] for ack in acks if ack["t0"] > took["t_done"]]
    assert not late, f"A acknowledged writes started after the takeover: {late}"

    # Nothing of A follows B's first batch; everything from there on is B's.
    for base, data in stored.items():
        first_value = decode_records(data)[0].value or b""
        owner = "B" if base >= took["first"] else "A"
        assert first_value.startswith(owner.encode()), f"offset {base}: {first_value[:10]!r} in {owner}'s range"
    assert sum(base >= took["first"] for base in stored) == 3


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(3))
def test_writes_synced_after_the_takeover_read_the_segment_are_never_acknowledged(
    storage: Storage, round_: int, tmp_path: Path, datanode_log: Path | None
) -> None:
    """B holds between reading A's open segment and renaming it to its sealed length while A keeps writing:
    A must be fenced at the flush after B's move (POSIX) or lease recovery (HDFS), or its acknowledged
    writes past the length B read would be lost."""
    release = tmp_path / "release"

    def before(a: Worker) -> None:
        a.wait_for("ack", timeout=60)

    def during(a: Worker, b: Worker) -> dict[str, Any]:
        b.wait_for("holding", timeout=150)  # past the taker's lease timeout (90 s): its error, not ours
        a.wait_for("fenced", timeout=60)
        release.touch()
        took = b.wait_for("took-over", timeout=60)
        b.finish(timeout=60)
        return took

    a, took = race(
        ["writer", "--url", storage.url, "--dir", "p", "--seed", str(round_), "--pause-ms", "0"],
        ["taker", "--url", storage.url, "--dir", "p", "--hold-at", "takeover:scanned", "--release-file", str(release)],
        before,
        during,
        release=release,
        datanode_log=datanode_log,
    )
    check_takeover(a, took)
    assert took["sealed"], "B sealed A's open segment"
