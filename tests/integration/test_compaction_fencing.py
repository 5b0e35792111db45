"""The compaction swap under the fencing protocol, on the local disk and on HDFS: a crash at every step of a
swap leaves the partition readable as before or after it (never both, never neither, no offset moved), and a
zombie compactor (its owner paused past a takeover) cannot put its output in place of what the new owner
serves."""

from __future__ import annotations

import threading

import pytest

from fencing import DirectoryEpochSource, FencedError, LogConfig, PartitionLog
from fencing.compaction import CompactionSettings, compact
from fencing.key_index import KeyIndex
from talos import RecordData, decode_batches, encode_batch
from tests.conftest import Storage

STEPS = ["compact:written", "compact:renamed", "compact:deleting"]


class Crash(Exception):
    """Stands for the process dying at a step: nothing after it runs."""


def open_log(storage: Storage, hook: object = None) -> PartitionLog:
    directory = storage.path("p")
    return PartitionLog.open(
        storage.fs,
        directory,
        DirectoryEpochSource(storage.fs, directory),
        config=LogConfig(segment_bytes=300),
        hook=hook,  # type: ignore[arg-type]
    )


def fill(plog: PartitionLog, rounds: int, keys: int = 4, start: int = 0) -> None:
    for i in range(start, start + rounds):
        plog.append(encode_batch([RecordData(b"%d" % i, b"k%d" % (i % keys))]))
        plog.flush()
    plog.wait_for_seal()


def view(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    offset = plog.start_offset
    while offset < plog.durable_offset:
        for decoded in decode_batches(plog.read(offset, 1 << 20)):
            out.extend((r.offset, r.key, r.value) for r in decoded.records if r.offset >= offset)
            offset = decoded.header.next_offset
    return out


def latest(records: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes | None, tuple[int, bytes | None]]:
    return {key: (offset, value) for offset, key, value in records}


def settings() -> CompactionSettings:
    return CompactionSettings(segment_bytes=10_000)


@pytest.mark.parametrize("step", STEPS)
def test_a_crash_at_any_step_of_the_swap_leaves_the_log_as_before_or_after(storage: Storage, step: str) -> None:
    plog = open_log(storage)
    fill(plog, 60)
    before = view(plog)
    plog.close(seal=False)

    def crash_at(name: str) -> None:
        if name == step:
            raise Crash(name)

    crashing = open_log(storage, hook=crash_at)
    with pytest.raises(Crash):
        compact(crashing, settings(), KeyIndex(1 << 16), force=True)
    # The process is gone: no close. The next owner takes the partition over.
    after = open_log(storage)
    try:
        seen = view(after)
        assert set(seen) <= set(before), "no record changed or appeared, no offset moved"
        assert latest(seen) == latest(before), "the last value of every key is there, at its offset"
        assert seen == sorted(seen) and len({o for o, _, _ in seen}) == len(seen)
        if step == "compact:written":  # not committed: exactly as before
            assert seen == before
        else:  # committed by the rename: exactly as after, whatever was left to delete
            assert len(seen) < len(before)
        assert after.durable_offset == 60
        fill(after, 5, start=60)  # and it goes on
        assert view(after)[-1][0] == 64
    finally:
        after.close()


def test_a_zombie_compactor_cannot_replace_what_a_newer_owner_serves(storage: Storage) -> None:
    plog = open_log(storage)
    fill(plog, 60)
    paused = threading.Event()
    resume = threading.Event()

    def pause_before_commit(name: str) -> None:
        if name == "compact:written":
            paused.set()
            assert resume.wait(60)

    zombie = open_log(storage, hook=pause_before_commit)  # took over from plog (which is now fenced)
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            compact(zombie, settings(), KeyIndex(1 << 16), force=True)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    assert paused.wait(30)
    # The zombie's owner is paused past its session: a new owner takes over, writes, deletes a key, compacts.
    owner = open_log(storage)
    try:
        owner.append(encode_batch([RecordData(None, b"k1"), RecordData(b"new", b"k2")]))
        owner.flush()
        fill(owner, 10, keys=1, start=100)  # key k0 only
        compact(owner, settings(), KeyIndex(1 << 16), force=True)
        served = view(owner)
        resume.set()
        thread.join(30)
        assert isinstance(outcome[0], FencedError), outcome
        assert view(owner) == served  # the zombie changed nothing the new owner serves
        assert latest(served)[b"k1"][1] is None and latest(served)[b"k2"][1] == b"new"
    finally:
        resume.set()
        owner.close(seal=False)
    again = open_log(storage)  # and the next takeover reads the same
    try:
        assert view(again) == served
    finally:
        again.close()
