"""Group commit in ``LoadedPartition``: offsets are given on the event loop, one flush answers a whole group.

A real partition log on a local directory; its file's ``sync`` can be held (a gate), so the tests decide when a
flush completes and see which requests it answered.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fencing import DirectoryEpochSource, FencedError, LogConfig, PartitionLog, StorageError
from fencing.filesystem import Buffer
from fencing.local import LocalFile, LocalFileSystem
from server.errors import ApiError
from server.partition.executor import AffinityExecutor
from server.partition.loaded import LoadedPartition, ProduceResult
from server.partition.tailcache import TailCache
from server.storage_health import StorageHealth
from talos import RecordData, decode_records, encode_batch, iter_batches


class GatedFileSystem(LocalFileSystem):
    """Local files whose flush I/O (``write_synced``) waits for ``gate`` and then fails while ``fail`` is set."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.syncs = 0
        self.fail = False

    def create(self, path: str) -> LocalFile:
        return GatedFile(super().create(path), self)


class GatedFile(LocalFile):
    def __init__(self, plain: LocalFile, fs: GatedFileSystem) -> None:
        self.__dict__.update(plain.__dict__)
        self._gated = fs

    def write_synced(self, data: Buffer) -> None:
        self._gated.gate.wait(10)
        if self._gated.fail:
            raise StorageError("sync failed (test)")
        super().write_synced(data)
        self._gated.syncs += 1


@pytest.fixture
def pools() -> Iterator[tuple[AffinityExecutor, AffinityExecutor]]:
    writes, reads = AffinityExecutor(2, "writes"), AffinityExecutor(1, "reads")
    try:
        yield writes, reads
    finally:
        writes.shutdown()
        reads.shutdown()


def _partition(
    tmp_path: Path, pools: tuple[AffinityExecutor, AffinityExecutor], fs: GatedFileSystem, *, group_commit: bool
) -> LoadedPartition:
    directory = str(tmp_path / "t-0")
    plog = PartitionLog.open(fs, directory, DirectoryEpochSource(fs, directory), config=LogConfig())
    writes, reads = pools
    fs.syncs = 0  # the takeover's own (the epoch marker)
    return LoadedPartition(
        "t",
        0,
        plog,
        TailCache(1 << 20).partition("t", 0),
        writes.for_key("t-0"),
        reads.for_key("t-0"),
        group_commit=group_commit,
    )


def _batch(value: bytes, **producer: int) -> bytearray:
    return bytearray(encode_batch([RecordData(value)], **producer))


@pytest.fixture
def gated() -> GatedFileSystem:
    return GatedFileSystem()


async def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.001)


def test_requests_that_arrive_during_a_flush_share_the_next_one(
    tmp_path: Path, pools: tuple[AffinityExecutor, AffinityExecutor], gated: GatedFileSystem
) -> None:
    async def scenario() -> None:
        partition = _partition(tmp_path, pools, gated, group_commit=True)
        gated.gate.clear()
        first = asyncio.create_task(partition.produce(_batch(b"first")))
        await _until(lambda: partition.flushes == 1)  # the first flush is under way, held at its sync
        rest = [asyncio.create_task(partition.produce(_batch(b"%d" % i))) for i in range(50)]
        await asyncio.sleep(0.01)
        # Every one of them has its offsets already (assigned on the event loop), none is answered
        assert partition.log.next_offset == 51 and not any(task.done() for task in rest)
        gated.gate.set()
        answers = await asyncio.gather(first, *rest)
        assert [a.base_offset for a in answers] == list(range(51))
        assert all(a.durable_offset >= a.next_offset for a in answers)
        assert partition.flushes == 2 and gated.syncs == 2  # one for the first, one for the 50
        data = partition.log.read(0, 1 << 20)
        values = [r.value for position, _ in iter_batches(data) for r in decode_records(data, position)]
        assert values == [b"first"] + [b"%d" % i for i in range(50)]
        await partition.close()

    asyncio.run(scenario())


def test_group_commit_off_flushes_each_request_alone_in_order(
    tmp_path: Path, pools: tuple[AffinityExecutor, AffinityExecutor], gated: GatedFileSystem
) -> None:
    async def scenario() -> None:
        partition = _partition(tmp_path, pools, gated, group_commit=False)
        answers = await asyncio.gather(*(partition.produce(_batch(b"%d" % i)) for i in range(8)))
        assert [a.base_offset for a in answers] == list(range(8))
        assert partition.flushes == 8 and gated.syncs == 8
        await partition.close()

    asyncio.run(scenario())


def test_a_failed_flush_fails_its_whole_group_and_nothing_later_is_acknowledged(
    tmp_path: Path, pools: tuple[AffinityExecutor, AffinityExecutor], gated: GatedFileSystem
) -> None:
    async def scenario() -> None:
        partition = _partition(tmp_path, pools, gated, group_commit=True)
        await partition.produce(_batch(b"stored"))
        gated.gate.clear()
        gated.fail = True
        group = [asyncio.create_task(partition.produce(_batch(b"lost %d" % i))) for i in range(5)]
        await _until(lambda: partition.flushes == 2)
        gated.gate.set()
        results = await asyncio.gather(*group, return_exceptions=True)
        assert all(isinstance(r, ApiError) and r.status == 503 and r.retriable for r in results)
        with pytest.raises(ApiError) as later:
            await partition.produce(_batch(b"after"))
        assert later.value.status == 503
        assert partition.log.durable_offset == 1

    asyncio.run(scenario())


async def _one_in_a_held_flush(
    partition: LoadedPartition, gated: GatedFileSystem, first: bytes, *queued: bytes
) -> list[asyncio.Task[ProduceResult]]:
    """Produce tasks: ``first`` inside a flush the gate holds, then ``queued`` waiting in the next group."""
    gated.gate.clear()
    tasks = [asyncio.create_task(partition.produce(_batch(first)))]
    await _until(lambda: partition.flushes == 1)
    tasks += [asyncio.create_task(partition.produce(_batch(value))) for value in queued]
    await asyncio.sleep(0.01)
    return tasks


def test_a_waiter_that_gives_up_does_not_cancel_the_others_flush(
    tmp_path: Path, pools: tuple[AffinityExecutor, AffinityExecutor], gated: GatedFileSystem
) -> None:
    async def scenario() -> None:
        partition = _partition(tmp_path, pools, gated, group_commit=True)
        held, quitter, stayer = await _one_in_a_held_flush(partition, gated, b"held", b"quitter", b"stayer")
        quitter.cancel()  # a client that went away
        gated.gate.set()
        assert (await held).base_offset == 0
        assert (await stayer).base_offset == 2 and (await stayer).durable_offset == 3
        assert quitter.cancelled()
        await partition.close()

    asyncio.run(scenario())


def test_waiters_are_answered_when_the_commit_task_is_cancelled_mid_flush(
    tmp_path: Path, pools: tuple[AffinityExecutor, AffinityExecutor], gated: GatedFileSystem
) -> None:
    """A group's waiters cannot cancel their wait, so the commit task answers every group it leaves open when
    it is cancelled itself (as ``asyncio.run`` does to every task at its end): none of them waits for ever."""

    async def scenario() -> None:
        partition = _partition(tmp_path, pools, gated, group_commit=True)
        flushing, queued = await _one_in_a_held_flush(partition, gated, b"in the flush", b"in the next group")
        commit = partition._commit_task
        assert commit is not None
        commit.cancel()
        for waiter in (flushing, queued):
            with pytest.raises(ApiError):
                await asyncio.wait_for(waiter, 5)
        gated.gate.set()
        await partition.close()

    asyncio.run(scenario())


def test_a_resend_waits_for_the_flush_of_its_original_and_gets_its_offsets(
    tmp_path: Path, pools: tuple[AffinityExecutor, AffinityExecutor], gated: GatedFileSystem
) -> None:
    async def scenario() -> None:
        partition = _partition(tmp_path, pools, gated, group_commit=True)
        ids = {"producer_id": 7, "producer_epoch": 0, "base_sequence": 0}
        gated.gate.clear()
        original = asyncio.create_task(partition.produce(_batch(b"once", **ids)))
        await _until(lambda: partition.flushes == 1)
        resend = asyncio.create_task(partition.produce(_batch(b"once", **ids)))
        await asyncio.sleep(0.01)
        assert not resend.done()  # not answered before the original is durable
        gated.gate.set()
        first, again = await asyncio.gather(original, resend)
        assert (again.base_offset, again.duplicate) == (first.base_offset, True)
        assert partition.log.durable_offset == 1  # stored once
        await partition.close()

    asyncio.run(scenario())


def test_a_flush_past_its_deadline_abandons_the_partition_and_answers_everyone_retriable(
    tmp_path: Path, pools: tuple[AffinityExecutor, AffinityExecutor], gated: GatedFileSystem
) -> None:
    """A flush the storage holds past ``flush_timeout_s``: the write inside it and the one queued behind it are
    answered 503 (retriable) at the deadline, not when the storage comes back, and the partition takes nothing
    more (the server reloads it); the held flush, let go later, changes none of those answers."""

    async def scenario() -> None:
        partition = _partition(tmp_path, pools, gated, group_commit=True)
        partition._flush_timeout_s = 0.3
        flushing, queued = await _one_in_a_held_flush(partition, gated, b"in the held flush", b"queued")
        for waiter in (flushing, queued):
            with pytest.raises(ApiError) as refused:
                await asyncio.wait_for(waiter, 5)
            assert (refused.value.status, refused.value.retriable) == (503, True)
            assert "a flush took over" in refused.value.message
        assert partition.abandoned is not None
        with pytest.raises(ApiError):
            await partition.produce(_batch(b"after"))
        gated.gate.set()
        await _until(lambda: gated.syncs == 1)  # the held flush ends in its thread; nobody waits for it

    asyncio.run(scenario())


def test_abandoning_a_partition_answers_a_stuck_flush_and_its_queue_at_once_as_moved(
    tmp_path: Path, pools: tuple[AffinityExecutor, AffinityExecutor], gated: GatedFileSystem
) -> None:
    """A server stepping down (its storage failing) does not wait for the flush that storage holds: every
    waiting write is answered 503 NOT_OWNER (retriable) at once, and release does not touch the log."""

    async def scenario() -> None:
        health = StorageHealth()
        partition = _partition(tmp_path, pools, gated, group_commit=True)
        partition._health = health
        flushing, queued = await _one_in_a_held_flush(partition, gated, b"in the stuck flush", b"queued")
        await asyncio.sleep(0.05)
        assert health.state(stall_s=0.01).failing_s > 0  # the held flush counts as failing storage
        partition.abandon(FencedError("released while its storage is failing"))
        for waiter in (flushing, queued):
            with pytest.raises(ApiError) as refused:
                await asyncio.wait_for(waiter, 1)
            assert (refused.value.status, refused.value.code, refused.value.retriable) == (503, "NOT_OWNER", True)
        await asyncio.wait_for(partition.close(), 1)  # does not queue behind the stuck flush
        with pytest.raises(ApiError):
            await partition.produce(_batch(b"after"))
        gated.gate.set()

    asyncio.run(scenario())


def test_only_flushes_that_write_report_to_the_storage_health(
    tmp_path: Path, pools: tuple[AffinityExecutor, AffinityExecutor], gated: GatedFileSystem
) -> None:
    async def scenario() -> None:
        health = StorageHealth()
        partition = _partition(tmp_path, pools, gated, group_commit=True)
        partition._health = health
        await partition.fence(7, 0)  # nothing to write: no word on the storage
        assert health.last_ok_ms() == 0
        await partition.produce(_batch(b"stored"))
        assert health.last_ok_ms() > 0
        gated.fail = True
        with pytest.raises(ApiError):
            await partition.produce(_batch(b"lost"))
        assert "sync failed (test)" in health.state().problem
        await partition.close()

    asyncio.run(scenario())


def test_a_flush_of_a_log_that_failed_already_says_nothing_of_the_storage(
    tmp_path: Path, pools: tuple[AffinityExecutor, AffinityExecutor], gated: GatedFileSystem
) -> None:
    """A fenced log raises its remembered error without asking the storage: even with a batch pending (an
    append that raced the failure), that flush is no evidence the storage works (a server whose storage is
    cut must not look healthy to its peers' step-down checks)."""

    async def scenario() -> None:
        health = StorageHealth()
        partition = _partition(tmp_path, pools, gated, group_commit=True)
        partition._health = health
        partition.log._fail(FencedError("a newer epoch exists (test)"))  # as a flush that met the fence does
        partition.log._pending.append(_batch(b"appended past the check"))  # the race, made certain
        with pytest.raises(FencedError):
            partition._flush(check_owner=False)
        assert health.last_ok_ms() == 0
        await partition.close()

    asyncio.run(scenario())
