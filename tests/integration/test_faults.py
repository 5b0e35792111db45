"""Faults under a writer process: kill -9 at a random moment, and a disk that fills up."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from fencing import DirectoryEpochSource, PartitionLog, open_storage
from talos import RecordData, encode_batch, read_header
from tests.conftest import Storage
from tests.integration.test_split_brain import Worker


def stored_batches(plog: PartitionLog) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    offset = plog.start_offset
    while offset < plog.durable_offset:
        data = plog.read(offset, 1 << 20)
        position = 0
        while position < len(data):
            header = read_header(data, position)
            out[header.base_offset] = data[position : position + header.length]
            position += header.length
            offset = header.next_offset
    return out


def check_heir(storage: Storage, acks: list[dict[str, object]]) -> None:
    """A new owner has every acknowledged batch byte for byte, contiguous offsets, and goes on from there."""
    directory = storage.path("p")
    heir = PartitionLog.open(storage.fs, directory, DirectoryEpochSource(storage.fs, directory))
    stored = stored_batches(heir)
    for ack in acks:
        assert stored.get(int(str(ack["base"]))) == bytes.fromhex(str(ack["hex"]))
    expected = 0
    for base in sorted(stored):
        assert base == expected
        expected = read_header(stored[base]).next_offset
    assert heir.next_offset == expected
    assert heir.append(encode_batch([RecordData(b"after")]))[0] == expected
    heir.flush()
    heir.close()


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(5))
def test_kill_minus_9_loses_no_acknowledged_write(storage: Storage, round_: int) -> None:
    rng = random.Random(round_)
    writer = Worker(
        [
            "writer",
            "--url",
            storage.url,
            "--dir",
            "p",
            "--seed",
            str(round_),
            "--segment-bytes",
            str(rng.choice([8000, 1 << 20])),
        ]
    )
    try:
        writer.wait_for("ack", timeout=60)
        time.sleep(rng.uniform(0.0, 0.5))
    finally:
        writer.stop()  # SIGKILL
    writer.finish(timeout=10)
    acks = [e for e in writer.events if e["event"] == "ack"]
    assert acks, "the writer acknowledged nothing before it was killed"
    check_heir(storage, acks)


@pytest.mark.parametrize("limit", [20_000, 150_000])
def test_full_disk_fails_the_writer_and_loses_no_acknowledged_write(tmp_path: Path, limit: int) -> None:
    url = f"file://{tmp_path}/store"
    fs, root = open_storage(url)
    storage = Storage("local", fs, root, url)
    writer = Worker(["writer", "--url", url, "--dir", "p", "--file-size-limit", str(limit), "--deadline", "30"])
    writer.finish(timeout=60)
    ends = [e for e in writer.events if e["event"] in ("fenced", "error", "timeout")]
    assert [(e["event"], e.get("kind")) for e in ends] == [("error", "StorageError")]
    assert "File too large" in str(ends[0]["message"])
    acks = [e for e in writer.events if e["event"] == "ack"]
    assert acks
    check_heir(storage, acks)
