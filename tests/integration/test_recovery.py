"""Recovery at takeover: torn tails cut at every byte, corrupt batches cut, trailing garbage ignored."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from fencing import DirectoryEpochSource, LogConfig, PartitionLog, SegmentName
from talos import RecordData, encode_batch
from tests.conftest import Storage
from tests.helpers import read_all


def make_batches(count: int) -> list[bytes]:
    out = []
    for i in range(count):
        out.append(
            encode_batch([RecordData(f"record-{i}".encode(), key=b"k"), RecordData(b"second")], base_offset=2 * i)
        )
    return out


def take_over(storage: Storage, directory: str) -> PartitionLog:
    return PartitionLog.open(storage.fs, directory, DirectoryEpochSource(storage.fs, directory), config=LogConfig())


def read_offsets(plog: PartitionLog) -> list[int]:
    return [offset for offset, _ in read_all(plog)]


def write_open_segment(storage: Storage, directory: str, data: bytes, epoch: int = 1) -> None:
    """An open segment as a crashed writer of ``epoch`` leaves it (its marker too)."""
    storage.fs.write_file(f"{directory}/_epoch/{epoch:010d}", b"")
    storage.fs.write_file(f"{directory}/{SegmentName(0, epoch)}", data)


@pytest.mark.slow
def test_torn_tail_cut_at_every_byte_of_the_last_batch(storage: Storage) -> None:
    batches = make_batches(3)
    whole = b"".join(batches[:2])
    last = batches[2]

    def recover(cut: int) -> None:
        directory = storage.path(f"torn-{cut}")
        write_open_segment(storage, directory, whole + last[:cut])
        plog = take_over(storage, directory)
        assert plog.recovery is not None
        assert plog.recovery.truncated_bytes == cut
        assert plog.next_offset == 4
        assert read_offsets(plog) == [0, 1, 2, 3]
        # the log goes on right after the last whole batch
        assert plog.append(encode_batch([RecordData(b"new")])) == (4, 5)
        plog.flush()
        assert read_offsets(plog) == [0, 1, 2, 3, 4]
        plog.close()

    # Independent directories; in parallel because closing an HDFS file waits for the block report.
    with ThreadPoolExecutor(max_workers=16) as pool:
        for future in [pool.submit(recover, cut) for cut in range(len(last))]:
            future.result()


@pytest.mark.parametrize("victim", [0, 1, 2])
def test_corrupt_batch_is_cut_with_everything_after_it(storage: Storage, victim: int) -> None:
    batches = make_batches(3)
    data = bytearray(b"".join(batches))
    position = sum(len(b) for b in batches[:victim]) + len(batches[victim]) // 2 + 20
    data[position] ^= 0x40
    directory = storage.path("corrupt")
    write_open_segment(storage, directory, bytes(data))
    plog = take_over(storage, directory)
    assert plog.recovery is not None
    assert plog.recovery.truncated_bytes == len(data) - sum(len(b) for b in batches[:victim])
    assert plog.next_offset == 2 * victim
    assert read_offsets(plog) == list(range(2 * victim))
    plog.close()


def test_a_segment_a_crashed_takeover_moved_aside_is_sealed_by_the_next(storage: Storage) -> None:
    """A POSIX takeover renames an open segment to ``.sealing`` before reading it; if it dies right there,
    the next takeover reads and seals that file, torn tail cut, as it would the open one."""
    batches = make_batches(3)
    directory = storage.path("moved")
    storage.fs.write_file(f"{directory}/_epoch/{1:010d}", b"")
    storage.fs.write_file(f"{directory}/_epoch/{2:010d}", b"")  # the takeover that died after the move
    storage.fs.write_file(f"{directory}/{SegmentName(0, 1).move_aside()}", b"".join(batches) + batches[0][:9])
    plog = take_over(storage, directory)
    assert plog.epoch == 3
    assert plog.recovery is not None
    assert plog.recovery.sealed == [str(SegmentName(0, 1, 6, sum(map(len, batches))))]
    assert plog.recovery.truncated_bytes == 9
    assert read_offsets(plog) == list(range(6))
    plog.close()
    names = sorted(info.name for info in storage.fs.list(directory))
    assert not any(name.endswith(".sealing") for name in names), names


def test_sealed_length_is_the_truth_not_the_file_size(storage: Storage) -> None:
    """A fenced POSIX writer may still append to the renamed inode; readers stop at the sealed length."""
    batches = make_batches(2)
    directory = storage.path("garbage")
    storage.fs.write_file(f"{directory}/_epoch/{1:010d}", b"")
    sealed = SegmentName(0, 1, 4, sum(len(b) for b in batches))
    storage.fs.write_file(f"{directory}/{sealed}", b"".join(batches) + b"\xff" * 100 + batches[0])
    plog = take_over(storage, directory)
    assert plog.next_offset == 4
    assert read_offsets(plog) == [0, 1, 2, 3]
    assert plog.read(2, 1 << 20) == batches[1]
    plog.close()


def test_segments_that_do_not_join_are_refused(storage: Storage) -> None:
    from fencing import LogCorruptError

    batches = make_batches(2)
    directory = storage.path("gap")
    storage.fs.write_file(f"{directory}/{SegmentName(0, 1, 2, len(batches[0]))}", batches[0])
    storage.fs.write_file(f"{directory}/{SegmentName(5, 1, 7, len(batches[1]))}", batches[1])
    with pytest.raises(LogCorruptError, match="does not follow"):
        take_over(storage, directory)
