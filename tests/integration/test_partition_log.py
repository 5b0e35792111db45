"""Contract of the segment log, on the local disk and on the real HDFS."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fencing import (
    DirectoryEpochSource,
    FencedError,
    FileSystem,
    LogConfig,
    LogError,
    OffsetOutOfRangeError,
    PartitionLog,
    SegmentName,
    StorageError,
    WritableFile,
    highest_epoch,
    open_storage,
)
from fencing.filesystem import Buffer
from talos import CorruptBatchError, RecordData, TruncatedBatchError, encode_batch
from tests.conftest import Storage
from tests.helpers import decoded, read_all


def batch(*values: bytes) -> bytes:
    return encode_batch([RecordData(v) for v in values])


def open_log(storage: Storage, name: str = "p", **config: int | None) -> PartitionLog:
    directory = storage.path(name)
    return PartitionLog.open(
        storage.fs, directory, DirectoryEpochSource(storage.fs, directory), config=LogConfig(**config)
    )  # type: ignore[arg-type]


def segment_names(storage: Storage, name: str = "p") -> list[SegmentName]:
    names = (SegmentName.parse(i.name) for i in storage.fs.list(storage.path(name)))
    return sorted((n for n in names if n is not None), key=lambda n: (n.base, n.epoch))


def test_append_assigns_contiguous_offsets_and_flush_makes_them_readable(storage: Storage) -> None:
    plog = open_log(storage)
    assert (plog.start_offset, plog.durable_offset, plog.next_offset) == (0, 0, 0)
    assert plog.append(batch(b"a", b"b")) == (0, 2)
    assert plog.append(batch(b"c")) == (2, 3)
    assert plog.durable_offset == 0
    assert plog.read(0) == b""  # nothing durable yet: reads stop at the durable offset
    assert plog.flush() == 3
    assert read_all(plog) == [(0, b"a"), (1, b"b"), (2, b"c")]
    plog.close()


def test_damaged_batches_are_refused_and_change_nothing(storage: Storage) -> None:
    plog = open_log(storage)
    good = batch(b"a")
    damaged = bytearray(good)
    damaged[-1] ^= 1
    with pytest.raises(CorruptBatchError):
        plog.append(damaged)
    with pytest.raises(CorruptBatchError):
        plog.append(good + b"extra")
    with pytest.raises(TruncatedBatchError):
        plog.append(good[:-1])
    assert plog.next_offset == 0
    assert plog.append(good) == (0, 1)
    plog.flush()
    assert read_all(plog) == [(0, b"a")]
    plog.close()


def test_one_flush_covers_many_appends_in_one_write(storage: Storage) -> None:
    plog = open_log(storage)
    for i in range(100):
        plog.append(batch(str(i).encode()))
    assert plog.flush() == 100
    assert [v for _, v in read_all(plog)] == [str(i).encode() for i in range(100)]
    # All one flush: a single segment, one contiguous run of batches
    assert len(segment_names(storage)) == 1
    plog.close()


def test_read_from_any_offset_returns_the_batch_holding_it(storage: Storage) -> None:
    plog = open_log(storage, segment_bytes=600, index_interval_bytes=200)
    for i in range(0, 60, 3):
        plog.append(batch(*(str(j).encode() * 20 for j in range(i, i + 3))))
        plog.flush()
    assert len(segment_names(storage)) > 3
    for offset in range(60):
        got = decoded(plog.read(offset, 300))
        assert got[0][0] <= offset < got[0][0] + 3
        assert [o for o, _ in got] == list(range(got[0][0], got[0][0] + len(got)))
    plog.close()


def test_max_bytes_limits_a_read_but_always_returns_one_batch(storage: Storage) -> None:
    plog = open_log(storage)
    big = batch(b"x" * 5000)
    for _ in range(10):
        plog.append(big)
    plog.flush()
    assert len(plog.read(0, 10)) == len(big)
    assert len(plog.read(0, 3 * len(big))) == 3 * len(big)
    assert len(plog.read(0, 3 * len(big) - 1)) == 2 * len(big)
    plog.close()


def test_reads_step_over_and_complete_batches_larger_than_a_read_chunk(storage: Storage) -> None:
    """Batches of ~200 KiB with a sparse index, read back from storage after a reopen: every read starts
    at an indexed position several large batches before the offset and must step over them."""
    plog = open_log(storage, index_interval_bytes=4 * 1024 * 1024)
    big = [bytearray(batch(bytes([i]) * 100_000, bytes([i]) * 100_000)) for i in range(6)]
    for data in big:
        plog.append(data)  # patches each batch's base offset in place: ``big`` holds them as stored
    plog.flush()
    plog.close()
    plog = open_log(storage, index_interval_bytes=4 * 1024 * 1024)
    for offset in range(12):
        one = plog.read(offset, 10)
        assert one == bytes(big[offset // 2])  # the batch holding the offset, whole, though over max_bytes
        three = plog.read(offset, 3 * len(big[0]))
        assert three == b"".join(big[offset // 2 : offset // 2 + 3])
    plog.close()


def test_out_of_range_reads(storage: Storage) -> None:
    plog = open_log(storage)
    plog.append(batch(b"a"))
    plog.flush()
    with pytest.raises(OffsetOutOfRangeError) as info:
        plog.read(5)
    assert (info.value.earliest, info.value.latest) == (0, 1)
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(-1)
    assert plog.read(1) == b""
    plog.close()


@pytest.mark.slow
def test_roll_by_size_and_reopen_keeps_everything(storage: Storage) -> None:
    plog = open_log(storage, segment_bytes=500)
    expected = []
    for i in range(40):
        plog.append(batch(f"m{i}".encode() * 5))
        plog.flush()
        expected.append((i, f"m{i}".encode() * 5))
    plog.wait_for_seal()  # rolled segments are sealed in the background
    names = segment_names(storage)
    assert sum(n.sealed for n in names) >= 4
    assert sum(not n.sealed for n in names) == 1
    plog.close()
    reopened = open_log(storage, segment_bytes=500)
    assert reopened.epoch == 2
    assert read_all(reopened) == expected
    assert reopened.append(batch(b"next")) == (40, 41)
    reopened.flush()
    reopened.close()


def test_roll_by_age(storage: Storage) -> None:
    plog = open_log(storage, segment_ms=50)
    plog.append(batch(b"a"))
    plog.flush()
    time.sleep(0.1)
    plog.maybe_roll()
    plog.wait_for_seal()  # the old segment is sealed in the background
    names = segment_names(storage)
    assert [n.sealed for n in names] == [True, False]
    assert names[0].end == 1
    plog.close()


@pytest.mark.slow
def test_takeover_after_a_crash_without_close(storage: Storage) -> None:
    crashed = open_log(storage)
    for i in range(5):
        crashed.append(batch(f"{i}".encode()))
        crashed.flush()
    crashed.append(batch(b"never flushed"))
    # the process dies here: no close, no seal; on HDFS its lease is still held
    heir = open_log(storage)
    assert heir.recovery is not None
    assert heir.recovery.sealed
    assert read_all(heir) == [(i, str(i).encode()) for i in range(5)]
    assert heir.append(batch(b"5")) == (5, 6)
    heir.flush()
    with pytest.raises(FencedError):
        crashed.flush()
    heir.close()


def test_old_owner_is_fenced_after_takeover(storage: Storage) -> None:
    old = open_log(storage)
    old.append(batch(b"acked"))
    old.flush()
    new = open_log(storage)
    old.append(batch(b"late"))
    with pytest.raises(FencedError):
        old.flush()
    assert isinstance(old.failed, FencedError)
    with pytest.raises(FencedError):
        old.append(batch(b"later"))
    new.append(batch(b"new"))
    new.flush()
    assert read_all(new) == [(0, b"acked"), (1, b"new")]
    new.close()


@pytest.mark.slow
@pytest.mark.parametrize("step", ["roll:sealed-old", "roll:created-new"])
def test_takeover_while_the_old_owner_rolls(storage: Storage, step: str) -> None:
    """The new owner takes over at the worst moment of the old owner's roll; the old one must notice."""
    directory = storage.path("p")
    heirs: list[PartitionLog] = []

    def take_over_now(name: str) -> None:
        if name == step and not heirs:
            heirs.append(PartitionLog.open(storage.fs, directory, DirectoryEpochSource(storage.fs, directory)))

    old = PartitionLog.open(storage.fs, directory, DirectoryEpochSource(storage.fs, directory),
                            config=LogConfig(segment_bytes=1), hook=take_over_now)  # fmt: skip
    old.append(batch(b"first"))
    with pytest.raises(FencedError):
        # roll:created-new: the data was synced; the roll that follows finds the newer epoch.
        old.flush()
        # roll:sealed-old comes in the background seal, after the flush returned (acknowledged "first"):
        # once it is done, the next write of the old owner finds the newer one.
        old.wait_for_seal()
        old.append(batch(b"late"))
        old.flush()
    heir = heirs[0]
    assert read_all(heir) == [(0, b"first")]
    heir.append(batch(b"second"))
    heir.flush()
    assert read_all(heir) == [(0, b"first"), (1, b"second")]
    open_segments = [n for n in segment_names(storage) if not n.sealed]
    assert [n.epoch for n in open_segments] == [heir.epoch]
    heir.close()


def test_stale_epoch_cannot_take_over(storage: Storage) -> None:
    directory = storage.path("p")
    first = open_log(storage)

    class Stale:
        def next_epoch(self) -> int:
            return 1

    with pytest.raises(FencedError):
        PartitionLog.open(storage.fs, directory, Stale())
    assert highest_epoch(storage.fs, directory) == 1
    first.close()


def test_graceful_close_seals_so_the_next_owner_recovers_nothing(storage: Storage) -> None:
    plog = open_log(storage)
    plog.append(batch(b"a"))
    plog.close()
    assert all(n.sealed for n in segment_names(storage))
    with pytest.raises(LogError):
        plog.append(batch(b"b"))
    heir = open_log(storage)
    assert heir.recovery is not None
    assert heir.recovery.sealed == []
    assert read_all(heir) == [(0, b"a")]
    heir.close()


@pytest.mark.slow
def test_retention_by_bytes_deletes_only_whole_sealed_segments(storage: Storage) -> None:
    plog = open_log(storage, segment_bytes=400, retention_bytes=1000)
    for i in range(30):
        plog.append(batch(f"{i:03d}".encode() * 10))
        plog.flush()
    plog.wait_for_seal()  # the last roll's seal runs in the background: a segment still sealing is kept
    before = segment_names(storage)
    deleted = plog.enforce_retention()
    after = segment_names(storage)
    assert deleted
    assert [str(n) for n in before[: len(deleted)]] == deleted  # the oldest, in order
    assert all(SegmentName.parse(d) is not None and SegmentName.parse(d).sealed for d in deleted)  # type: ignore[union-attr]
    assert not after[-1].sealed  # the active segment stays
    assert plog.size_bytes <= 1000
    assert plog.start_offset == after[0].base
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(0)
    tail = read_all(plog)
    assert tail[-1] == (29, b"029" * 10)
    assert [o for o, _ in tail] == list(range(plog.start_offset, 30))
    plog.close()


@pytest.mark.slow
def test_retention_by_time(storage: Storage) -> None:
    plog = open_log(storage, segment_bytes=200, retention_ms=60_000)
    for i in range(10):
        plog.append(batch(f"{i}".encode() * 50))
        plog.flush()
    plog.wait_for_seal()
    sealed = [n for n in segment_names(storage) if n.sealed]
    assert plog.enforce_retention() == []  # all young
    deleted = plog.enforce_retention(now_ms=int(time.time() * 1000) + 120_000)
    assert deleted == [str(n) for n in sealed]
    assert plog.start_offset == 10
    plog.append(batch(b"after"))
    plog.flush()
    assert read_all(plog) == [(10, b"after")]
    plog.close()
    heir = open_log(storage)
    assert heir.start_offset == 10
    assert heir.next_offset == 11
    heir.close()


@pytest.mark.slow
def test_restart_with_an_empty_active_segment_keeps_the_next_offset(storage: Storage) -> None:
    plog = open_log(storage, retention_ms=0)
    plog.append(batch(b"a", b"b"))
    plog.flush()
    plog.roll()
    time.sleep(0.01)
    plog.enforce_retention()
    assert plog.start_offset == 2
    # crash with an empty active segment, twice
    second = open_log(storage)
    third = open_log(storage)
    assert third.next_offset == 2
    assert third.append(batch(b"c")) == (2, 3)
    third.flush()
    with pytest.raises(FencedError):
        second.append(batch(b"x"))
        second.flush()
    third.close()


# ---------------------------------------------------------------- rolls seal the old segment in the background


class HeldClose:
    """A segment file whose close waits for ``release`` (an HDFS close waiting for its last block, made as
    long as the test needs), saying when it starts; ``fail`` makes the close fail after the wait."""

    def __init__(self, file: WritableFile, closing: threading.Event, release: threading.Event, fail: bool) -> None:
        self._file = file
        self._closing = closing
        self._release = release
        self._fail = fail

    @property
    def path(self) -> str:
        return self._file.path

    def write(self, data: Buffer) -> None:
        self._file.write(data)

    def sync(self) -> None:
        self._file.sync()

    def write_synced(self, data: Buffer) -> None:
        self._file.write_synced(data)

    def still_linked(self) -> bool:
        return self._file.still_linked()

    def close(self) -> None:
        self._closing.set()
        assert self._release.wait(60)
        if self._fail:
            raise StorageError(f"close of {self.path}: injected failure")
        self._file.close()


class Held:
    """The old owner's own connection to the storage (on HDFS another client, so another lease holder), whose
    segment files hold their close until :attr:`release` is set."""

    def __init__(self, storage: Storage, *, fail: bool = False) -> None:
        self.fs: FileSystem = open_storage(storage.url)[0]
        self.closing = threading.Event()
        self.release = threading.Event()
        create = self.fs.create

        def held_create(path: str) -> WritableFile:
            file = create(path)
            return HeldClose(file, self.closing, self.release, fail) if path.endswith(".log") else file

        self.fs.create = held_create  # type: ignore[method-assign]


@pytest.fixture
def held(storage: Storage) -> Iterator[Held]:
    held = Held(storage)
    try:
        yield held
    finally:
        held.release.set()
        held.fs.close()


def open_held(held: Held, storage: Storage) -> PartitionLog:
    directory = storage.path("p")
    config = LogConfig(segment_bytes=1000)
    return PartitionLog.open(held.fs, directory, DirectoryEpochSource(held.fs, directory), config=config)


def test_the_flush_that_rolls_returns_while_the_old_segment_still_closes(storage: Storage, held: Held) -> None:
    plog = open_held(held, storage)
    try:
        plog.append(batch(b"a" * 1200))
        assert plog.flush() == 1  # fills the segment: the roll switches to a new one and returns
        assert held.closing.wait(10)  # the old one's close has begun in the background, and is held there
        plog.append(batch(b"b"))
        assert plog.flush() == 2  # written into the new segment while the old one closes
        assert [(n.base, n.sealed) for n in segment_names(storage)] == [(0, False), (1, False)]
        assert read_all(plog) == [(0, b"a" * 1200), (1, b"b")]  # the closing segment is still served
        closer = threading.Thread(target=plog.close)
        closer.start()
        closer.join(0.2)
        assert closer.is_alive()  # a close waits for the background seal
        held.release.set()
        closer.join(30)
        assert not closer.is_alive()
        assert [(n.base, n.end, n.sealed) for n in segment_names(storage)] == [(0, 1, True), (1, 2, True)]
    finally:
        held.release.set()
        plog.close()
    heir = open_log(storage)
    assert heir.recovery is not None and heir.recovery.sealed == []
    assert read_all(heir) == [(0, b"a" * 1200), (1, b"b")]
    heir.close()


@pytest.mark.slow
def test_a_takeover_during_a_background_seal_seals_it_once_and_keeps_every_acknowledged_write(
    storage: Storage, held: Held
) -> None:
    old = open_held(held, storage)
    old.append(batch(b"a" * 1200))
    old.flush()
    assert held.closing.wait(10)
    old.append(batch(b"b"))
    old.flush()  # acknowledged, in the new segment
    heir = open_log(storage)  # seals both open segments (on HDFS: recovers the lease the held close still has)
    assert heir.recovery is not None and len(heir.recovery.sealed) == 2
    held.release.set()
    with pytest.raises(FencedError):
        old.wait_for_seal()  # its close or rename lost the race: the segment is the heir's to seal, and was
    assert isinstance(old.failed, FencedError)
    with pytest.raises(FencedError):
        old.append(batch(b"late"))
    old.close()
    names = segment_names(storage)
    assert [(n.base, n.epoch, n.sealed) for n in names] == [(0, 1, True), (1, 1, True), (2, 2, False)]  # once each
    assert read_all(heir) == [(0, b"a" * 1200), (1, b"b")]
    heir.close()


def test_a_failed_background_seal_fails_the_log_and_the_next_owner_seals_the_segment(tmp_path: Path) -> None:
    storage = Storage("local", *open_storage(str(tmp_path / "store")), f"file://{tmp_path}/store")
    held = Held(storage, fail=True)
    plog = open_held(held, storage)
    plog.append(batch(b"a" * 1200))
    plog.flush()
    held.release.set()
    for thread in threading.enumerate():  # the background seal, which fails
        if thread.name.startswith("talos-seal-"):
            thread.join(30)
    plog.append(batch(b"b"))
    with pytest.raises(StorageError):
        plog.flush()  # synced, but not acknowledged: the failed seal of the previous segment fails the log
    assert isinstance(plog.failed, StorageError)
    plog.close()
    heir = open_log(storage)
    assert heir.recovery is not None
    assert sorted(heir.recovery.sealed) == [str(n) for n in segment_names(storage)[:2]]
    assert read_all(heir)[:1] == [(0, b"a" * 1200)]  # everything acknowledged
    heir.close()
