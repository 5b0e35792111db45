"""Transactions on a loaded partition (``LoadedPartition``): transactional batches hold the last stable offset
(LSO) until their marker is durable; read-committed fetches stop there and leave out aborted transactions'
batches but not the markers; a load rebuilds all of it from the log. A real partition log on a local
directory, whose flushes the test can hold or fail (``tests.unit.test_group_commit``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from fencing import DirectoryEpochSource, LogConfig, PartitionLog
from server.errors import ApiError
from server.partition import txn_checkpoint
from server.partition.executor import AffinityExecutor
from server.partition.loaded import LoadedPartition, load_partition_state
from server.partition.tailcache import TailCache
from server.partition.transactions import AbortedTransaction, PartitionTransactions
from talos import RecordData, decode_records, encode_batch, iter_batches
from talos._codec import TRANSACTIONAL
from talos._control import ControlType, Marker, marker_batch
from tests.unit.test_group_commit import GatedFileSystem, _partition, _until, gated, pools

__all__ = ["gated", "pools"]  # fixtures used by name

Pools = tuple[AffinityExecutor, AffinityExecutor]


def _txn(value: bytes, pid: int, sequence: int, epoch: int = 0) -> bytearray:
    return bytearray(
        encode_batch(
            [RecordData(value, b"k")],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=sequence,
            attributes=TRANSACTIONAL,
        )
    )


async def _yes() -> bool:
    return True  # the coordinator's answer: the partition is in the producer's transaction


def _plain(value: bytes) -> bytearray:
    return bytearray(encode_batch([RecordData(value, b"k")]))


def _values(batches: list[bytes | bytearray]) -> list[bytes | None]:
    out: list[bytes | None] = []
    for buffer in batches:
        for position, header in iter_batches(buffer):
            if not header.control:
                out.extend(r.value for r in decode_records(buffer, position))
    return out


def _offsets(batches: list[bytes | bytearray]) -> list[int]:
    return [header.base_offset for buffer in batches for _, header in iter_batches(buffer)]


def test_read_committed_stops_at_the_open_transaction_and_skips_an_aborted_one(
    tmp_path: Path, pools: Pools, gated: GatedFileSystem
) -> None:
    async def scenario() -> None:
        p = _partition(tmp_path, pools, gated, group_commit=True)
        await p.produce(_plain(b"a"))  # 0
        await p.produce(_txn(b"t1", 1, 0), in_transaction=_yes)  # 1: producer 1 opens a transaction
        await p.produce(_plain(b"b"))  # 2
        await p.produce(_txn(b"t2", 2, 0), in_transaction=_yes)  # 3: producer 2 opens one
        assert p.last_stable_offset == 1
        uncommitted = await p.fetch(0, 1 << 20, 0)
        assert _values(uncommitted.batches) == [b"a", b"t1", b"b", b"t2"]
        committed = await p.fetch(0, 1 << 20, 0, committed=True)
        assert _values(committed.batches) == [b"a"] and committed.last_stable_offset == 1
        await p.write_marker(Marker(1, 0, ControlType.ABORT, 0))  # 4
        assert p.last_stable_offset == 3
        committed = await p.fetch(0, 1 << 20, 0, committed=True)
        assert _values(committed.batches) == [b"a", b"b"]
        assert _offsets(committed.batches) == [0, 2]  # the marker at 4 is past the LSO (3)
        await p.write_marker(Marker(2, 0, ControlType.COMMIT, 0))  # 5
        committed = await p.fetch(0, 1 << 20, 0, committed=True)
        assert _values(committed.batches) == [b"a", b"b", b"t2"]
        assert _offsets(committed.batches) == [0, 2, 3, 4, 5]  # both markers given: readers step over them
        assert committed.last_stable_offset == committed.high_watermark == 6
        # From the aborted batch on: the reader is told where to go on from
        tail = await p.fetch(1, 1 << 20, 0, committed=True)
        assert _offsets(tail.batches)[0] == 2 and tail.next_offset == 6
        # The producer's next batch outside a transaction is fine once it is closed
        await p.produce(
            bytearray(encode_batch([RecordData(b"c", b"k")], producer_id=1, producer_epoch=0, base_sequence=1))
        )

    asyncio.run(scenario())


def test_a_batch_outside_the_open_transaction_and_a_producers_control_batch_are_refused(
    tmp_path: Path, pools: Pools, gated: GatedFileSystem
) -> None:
    async def scenario() -> None:
        p = _partition(tmp_path, pools, gated, group_commit=True)
        await p.produce(_txn(b"t", 1, 0), in_transaction=_yes)
        plain = bytearray(encode_batch([RecordData(b"x")], producer_id=1, producer_epoch=0, base_sequence=1))
        with pytest.raises(ApiError) as refused:
            await p.produce(plain)
        assert refused.value.code == "INVALID_TXN_STATE"

        with pytest.raises(ApiError) as control:
            await p.produce(bytearray(marker_batch(Marker(1, 0, ControlType.COMMIT, 0), timestamp_ms=0)))
        assert control.value.code == "CORRUPT_BATCH"
        assert p.log.next_offset == 1

    asyncio.run(scenario())


def test_a_marker_counts_only_once_durable_and_a_long_poll_waits_for_it(
    tmp_path: Path, pools: Pools, gated: GatedFileSystem
) -> None:
    async def scenario() -> None:
        p = _partition(tmp_path, pools, gated, group_commit=True)
        await p.produce(_txn(b"t", 1, 0), in_transaction=_yes)
        poll = asyncio.create_task(p.fetch(0, 1 << 20, 5000, committed=True))
        await asyncio.sleep(0.05)
        assert not poll.done()  # offset 0 is durable but not decided
        gated.gate.clear()
        marker = asyncio.create_task(p.write_marker(Marker(1, 0, ControlType.COMMIT, 0)))
        await _until(lambda: p.log.next_offset == 2)
        # Stored, not flushed: the transaction still holds the LSO; the producer's next one opens after it
        next_txn = asyncio.create_task(p.produce(_txn(b"u", 1, 1), in_transaction=_yes))
        await _until(lambda: p.log.next_offset == 3)
        assert p.last_stable_offset == 0 and not poll.done()
        gated.gate.set()
        await marker
        await next_txn
        got = await poll
        assert _values(got.batches) == [b"t"] and p.last_stable_offset == 2

    asyncio.run(scenario())


def test_markers_from_an_older_epoch_or_coordinator_are_refused(
    tmp_path: Path, pools: Pools, gated: GatedFileSystem
) -> None:
    async def scenario() -> None:
        p = _partition(tmp_path, pools, gated, group_commit=True)
        await p.produce(_txn(b"t", 1, 0, epoch=3), in_transaction=_yes)
        with pytest.raises(ApiError) as stale:
            await p.write_marker(Marker(1, 2, ControlType.COMMIT, 0))
        assert stale.value.code == "PRODUCER_FENCED"
        await p.write_marker(Marker(1, 4, ControlType.ABORT, 7))  # a bumped epoch: fences 3 (KIP-890 part 2)
        with pytest.raises(ApiError) as older:
            await p.write_marker(Marker(1, 4, ControlType.ABORT, 6))
        assert older.value.code == "TRANSACTION_COORDINATOR_FENCED"
        with pytest.raises(ApiError) as late:
            await p.produce(_txn(b"late", 1, 1, epoch=3), in_transaction=_yes)  # the old transaction's late batch
        assert late.value.code == "PRODUCER_FENCED"
        assert _values((await p.fetch(0, 1 << 20, 0, committed=True)).batches) == []

    asyncio.run(scenario())


def test_a_load_rebuilds_the_lso_and_the_aborted_transactions(
    tmp_path: Path, pools: Pools, gated: GatedFileSystem
) -> None:
    async def scenario() -> None:
        p = _partition(tmp_path, pools, gated, group_commit=True)
        await p.produce(_txn(b"aborted", 1, 0), in_transaction=_yes)
        await p.write_marker(Marker(1, 0, ControlType.ABORT, 0))
        await p.produce(_plain(b"plain"))
        await p.produce(_txn(b"open", 2, 0), in_transaction=_yes)
        await p.close()

    asyncio.run(scenario())
    directory = str(tmp_path / "t-0")
    plog = PartitionLog.open(gated, directory, DirectoryEpochSource(gated, directory), config=LogConfig())
    state = load_partition_state(plog, 1 << 20)
    writes, reads = pools
    p = LoadedPartition(
        "t",
        0,
        plog,
        TailCache(1 << 20).partition("t", 0),
        writes.for_key("t-0"),
        reads.for_key("t-0"),
        group_commit=True,
        producers=state.producers,
        transactions=state.transactions,
    )

    async def reloaded() -> None:
        assert p.last_stable_offset == 3
        got = await p.fetch(0, 1 << 20, 0, committed=True)
        assert _values(got.batches) == [b"plain"]
        await p.write_marker(Marker(2, 0, ControlType.COMMIT, 0))
        assert _values((await p.fetch(0, 1 << 20, 0, committed=True)).batches) == [b"plain", b"open"]
        await p.close()

    asyncio.run(reloaded())


def test_a_transactional_batch_opens_a_transaction_only_if_its_coordinator_says_the_partition_is_in_it(
    tmp_path: Path, pools: Pools, gated: GatedFileSystem
) -> None:
    async def scenario() -> None:
        p = _partition(tmp_path, pools, gated, group_commit=True)

        async def no() -> bool:
            return False

        for answer in (None, no):
            with pytest.raises(ApiError) as refused:
                await p.produce(_txn(b"t", 1, 0), in_transaction=answer)
            assert refused.value.code == "INVALID_TXN_STATE"
        # The coordinator said yes, but the transaction was decided while it asked: the late batch is refused
        # (else it would open a transaction no coordinator knows of)
        release = asyncio.Event()

        async def slow_yes() -> bool:
            await release.wait()
            return True

        late = asyncio.create_task(p.produce(_txn(b"late", 1, 0), in_transaction=slow_yes))
        await asyncio.sleep(0.01)
        await p.write_marker(Marker(1, 0, ControlType.ABORT, 0))
        release.set()
        with pytest.raises(ApiError) as stale:
            await late
        assert stale.value.code == "INVALID_TXN_STATE"
        assert p.last_stable_offset == p.log.durable_offset == 1  # only the marker
        # Once open, later batches of the transaction do not ask again
        await p.produce(_txn(b"a", 2, 0), in_transaction=_yes)
        await p.produce(_txn(b"b", 2, 1), in_transaction=None)
        assert p.last_stable_offset == 1

    asyncio.run(scenario())


def test_a_checkpoint_keeps_the_transactions_a_load_would_not_read_in_the_tail(
    tmp_path: Path, pools: Pools, gated: GatedFileSystem
) -> None:
    directory = str(tmp_path / "t-0")

    small = LogConfig(segment_bytes=2048)  # so that the tail a load reads is the last few segments

    async def before() -> None:
        plog = PartitionLog.open(gated, directory, DirectoryEpochSource(gated, directory), config=small)
        writes, reads = pools
        p = LoadedPartition(
            "t",
            0,
            plog,
            TailCache(1 << 20).partition("t", 0),
            writes.for_key("a"),
            reads.for_key("a"),
            group_commit=True,
        )
        await p.produce(_txn(b"aborted", 1, 0), in_transaction=_yes)  # 0
        await p.write_marker(Marker(1, 0, ControlType.ABORT, 3))  # 1
        await p.produce(_txn(b"open", 2, 0), in_transaction=_yes)  # 2
        not_durable = asyncio.create_task(p.write_marker(Marker(2, 0, ControlType.COMMIT, 3)))
        gated.gate.clear()
        await _until(lambda: p.log.next_offset == 4)
        # Taken while the commit marker at 3 is not durable: the transaction is still open at offset 3
        txn_checkpoint.write(gated, directory, p.transactions, 3)
        gated.gate.set()
        await not_durable
        for i in range(200):  # far more than the tail the load reads
            await p.produce(_plain(b"%d" % i))
            if i % 20 == 0:
                await asyncio.get_running_loop().run_in_executor(None, p.log.maybe_roll)
        await p.close()

    asyncio.run(before())
    plog = PartitionLog.open(gated, directory, DirectoryEpochSource(gated, directory), config=small)
    checkpoint = txn_checkpoint.latest(gated, directory, plog.durable_offset)
    assert checkpoint is not None and checkpoint[0] == 3
    assert checkpoint[1].open == {2: 2} and checkpoint[1].coordinator_epochs[1] == 3
    tail_only = load_partition_state(plog, 200)
    assert tail_only.transactions.aborted == []  # what a load without it would have known
    state = load_partition_state(plog, 200, checkpoint).transactions
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in state.aborted] == [(1, 0, 1)]
    assert state.open == {} and state.last_stable_offset(plog.durable_offset) == plog.durable_offset
    plog.close()


def test_a_checkpoint_taken_before_the_state_hears_of_the_flush_keeps_the_aborted_transaction() -> None:
    # The log's durable offset moves in the I/O thread, the live state's on the event loop a moment later: a
    # checkpoint at the new durable offset taken in between saw the abort marker still "closing". Seen under a
    # network fault: the checkpoint left the aborted transaction out, and after a reload from it a
    # read-committed consumer read the aborted records.
    live = PartitionTransactions()
    live.appended(7, 15, transactional=True)
    live.appended(8, 16, transactional=True)
    live.appended(9, 17, transactional=True)
    live.ended(7, 18, committed=False)
    live.ended(8, 19, committed=True)
    live.ended(9, 21, committed=False)
    at = txn_checkpoint.state_at(live, 20)  # durable through 19; the live state not told yet
    assert at.aborted == [AbortedTransaction(18, 15, 7)]
    assert at.open == {9: 17}  # its abort marker at 21 is not durable: still open below 20
    assert at.closing == []
    live.durable(20)
    assert txn_checkpoint.state_at(live, 20).aborted == at.aborted  # the same, once the state has heard


def test_a_checkpoint_round_trips_and_an_unreadable_one_is_passed_over(tmp_path: Path) -> None:
    state = PartitionTransactions({7: 10}, [AbortedTransaction(5, 2, 3)], [], {3: 1})
    assert txn_checkpoint.decode(txn_checkpoint.encode(state, 12)) == (12, state)
    fs = GatedFileSystem()
    directory = str(tmp_path / "p")
    txn_checkpoint.write(fs, directory, state, 12)
    fs.write_file(f"{directory}/{txn_checkpoint.CHECKPOINT_DIR}/{20:020d}", b"{not json")
    assert txn_checkpoint.latest(fs, directory, 100) == (12, state)
    assert txn_checkpoint.latest(fs, directory, 11) is None


def test_a_late_copy_of_a_bumped_transactions_marker_does_not_close_the_next_one(
    tmp_path: Path, pools: Pools, gated: GatedFileSystem
) -> None:
    """Transaction N at epoch 3 ends with an epoch bump: its marker carries 4, and N+1 writes at 4. A copy of
    N's marker its coordinator retried, arriving after N+1 began here, must not commit N+1."""

    async def scenario() -> None:
        p = _partition(tmp_path, pools, gated, group_commit=True)
        await p.produce(_txn(b"n", 1, 0, epoch=3), in_transaction=_yes)  # 0
        await p.write_marker(Marker(1, 4, ControlType.COMMIT, 0), bumped=True)  # 1: N committed
        await p.produce(_txn(b"n+1", 1, 0, epoch=4), in_transaction=_yes)  # 2: N+1 opens
        late = await p.write_marker(Marker(1, 4, ControlType.COMMIT, 0), bumped=True)
        assert late.duplicate and p.log.next_offset == 3  # nothing written
        assert p.last_stable_offset == 2  # N+1 still open
        assert _values((await p.fetch(0, 1 << 20, 0, committed=True)).batches) == [b"n"]
        await p.write_marker(Marker(1, 5, ControlType.COMMIT, 0), bumped=True)  # N+1's own marker
        assert _values((await p.fetch(0, 1 << 20, 0, committed=True)).batches) == [b"n", b"n+1"]

    asyncio.run(scenario())
