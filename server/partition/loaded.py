"""One loaded partition: the group committer, the tail cache and long-poll wake-ups.

Group commit: a produce request gets its offsets at once, on the event loop (the producer check, a copy into
the log's pending buffer), and waits on the future of the *group* it joined; one commit task at a time flushes
a group (one write and one sync of everything appended so far, in an I/O thread) and answers the whole group
with one result, while the next requests gather in the next group. With group commit off, each request is
appended only when the previous one's flush is done, and flushed alone.

Fencing idempotent producers: a partition refuses an epoch older than the newest it knows of the producer.
It learns the newest from the producer's batches, from a *fence* (:meth:`LoadedPartition.fence`, which a new
instance sends to every partition it may write before it starts), and, the first time a producer writes
here after a load, from the allocator itself (``epochs``): a load forgets the fences, not the allocator. A
fence joins a group like the writes and returns only after that group's flush and a check that this load
still owns the partition, so every write it did not refuse is durable, and readable, when it returns.

Transactions: a producer's transactional batches open its transaction here; its coordinator closes it with a
marker (:meth:`LoadedPartition.write_marker`), written like a fence (answered after the flush and an owner
check). Read-committed fetches stop at the last stable offset and drop the records of aborted transactions
(``server.partition.transactions`` keeps both); a marker counts only once durable.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar

from fencing import FencedError, LogError, OffsetOutOfRangeError, PartitionLog, StorageError
from server import metrics
from server.errors import ApiError
from server.partition.producers import Duplicate, ProducerStates, fenced
from server.partition.tailcache import PartitionTail
from server.partition.transactions import AbortedTransaction, PartitionTransactions
from server.storage_health import StorageHealth
from talos import BatchError, BatchHeader, decode_records, iter_batches, read_header
from talos._control import Marker, marker_batch, parse_marker

log = logging.getLogger("talos.server")

__all__ = [
    "FetchResult",
    "GroupFuture",
    "LoadedPartition",
    "PartitionState",
    "ProduceResult",
    "Stored",
    "as_api_error",
    "load_partition_state",
]

T = TypeVar("T")


class ProduceResult(NamedTuple):  # a tuple: one per produce request, cheaper to make than a frozen dataclass
    base_offset: int  # -1 for a duplicate stored too long ago to know where
    next_offset: int
    durable_offset: int  # everything below is durable (Swift's checkpoint)
    session: int = 0  # the partition's load session (its epoch): changes when it moves or reloads
    duplicate: bool = False  # an idempotent producer's resend: stored before, not stored again
    version: int = 0  # the ring version the partition was loaded under (Swift's V; 0 when standalone)

    def marks(self) -> dict[str, object]:
        """What every produce answer carries besides offsets: Swift's C, S and V, and the duplicate flag."""
        return {
            "durable_offset": self.durable_offset,
            "session": self.session,
            "duplicate": self.duplicate,
            "version": self.version,
        }

    @classmethod
    def from_wire(cls, result: dict[str, Any]) -> ProduceResult:
        """One entry of a batch produce answer (``offset``, ``count`` and the marks), as another server sent it."""
        base = int(result["offset"])
        return cls(
            base,
            base + int(result["count"]) if base >= 0 else -1,
            int(result["durable_offset"]),
            int(result.get("session", 0)),
            bool(result.get("duplicate", False)),
            int(result.get("version", 0)),
        )


class Stored(NamedTuple):
    """A batch :meth:`LoadedPartition.produce_now` appended: its offsets, and its group's flush (the durable
    offset, or the error a waiter of :meth:`LoadedPartition.produce` would get, through :func:`as_api_error`)."""

    base_offset: int
    next_offset: int
    durable: GroupFuture
    partition: LoadedPartition


@dataclass(frozen=True, slots=True)
class FetchResult:
    batches: list[bytes | bytearray]
    high_watermark: int
    start_offset: int
    last_stable_offset: int = -1  # -1: not asked (a read-uncommitted fetch)
    # Where the reader goes on from (-1: after the last batch given). Set when a read-committed fetch left out
    # batches at its end (an aborted transaction's), which the reader cannot step over by itself.
    next_offset: int = -1
    # A read-committed fetch that kept the aborted transactions' batches: the ones its reader must filter out
    # (Kafka's clients do; they cannot step over batches they were not given).
    aborted: list[AbortedTransaction] | None = None


class PartitionState(NamedTuple):
    """What a load rebuilds from the log besides the log itself."""

    producers: ProducerStates
    transactions: PartitionTransactions


class Epochs(Protocol):
    def newer_epoch(self, producer_id: int, epoch: int) -> int | None:
        """The producer's current epoch if newer than ``epoch``. Does I/O."""


class GroupFuture(asyncio.Future[int]):
    """A group's future (its flush's durable offset), which its waiters cannot cancel: a waiter's task cancelled
    (a client gone, a shutdown) must not cancel the others' flush. The task is cancelled once the flush is over
    (``Task.cancel`` then throws into it at its next step), as ``asyncio.shield`` would, without a second future
    and two callbacks per waiter.

    A produce answered without a task registers with :meth:`after`: every such answer of the group runs in the
    one event-loop pass after the flush, where a done-callback each would be a handle each."""

    def __init__(self, *, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop=loop)
        self._after: list[Callable[[], None]] = []
        self.add_done_callback(self._answer)

    def cancel(self, msg: object = None) -> bool:
        return False

    def after(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the flush is over (the future done), in the order registered."""
        if self.done():
            self.get_loop().call_soon(callback)
        else:
            self._after.append(callback)

    def _answer(self, _: asyncio.Future[int]) -> None:
        self.exception()  # retrieved: every waiter may have gone (clients that disconnected)
        for callback in self._after:
            try:
                callback()
            except Exception:
                log.exception("unexpected error answering a produce")
        self._after = []


class _Group:
    """The writes waiting for one flush, and the one future that flush answers (its durable offset)."""

    __slots__ = ("check_owner", "future", "stored")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.future = GroupFuture(loop=loop)
        self.stored: list[tuple[int, int, bytearray]] = []  # (base, next, batch): for the tail cache once durable
        self.check_owner = False  # a fence waits on it: ask the storage after the flush whether we still own it


def _wake(callbacks: list[Callable[[], None]]) -> None:
    for callback in callbacks:
        try:
            callback()
        except Exception:
            log.exception("unexpected error waking a long poll")


def as_api_error(error: Exception) -> ApiError:
    """What a client sees when a partition cannot take a request: fenced, storage failing, corrupt."""
    if isinstance(error, ApiError):
        return error
    if isinstance(error, BatchError):
        return ApiError(400, "CORRUPT_BATCH", f"invalid record batch: {error}")
    if isinstance(error, FencedError):
        return ApiError(
            503,
            "NOT_OWNER",
            "the partition moved to another owner; retry",
            retriable=True,
            headers={"Retry-After": "1"},
        )
    if isinstance(error, StorageError):
        return ApiError(503, "STORAGE_ERROR", f"storage failed: {error}", retriable=True, headers={"Retry-After": "1"})
    return ApiError(
        503, "PARTITION_UNAVAILABLE", f"partition unavailable: {error}", retriable=True, headers={"Retry-After": "1"}
    )


class LoadedPartition:
    def __init__(
        self,
        topic: str,
        index: int,
        log: PartitionLog,
        tail: PartitionTail,
        writes: Executor,
        reads: Executor,
        *,
        group_commit: bool,
        producers: ProducerStates | None = None,
        transactions: PartitionTransactions | None = None,
        epochs: Epochs | None = None,
        flush_timeout_s: float = 20.0,
        version: int = 0,
        health: StorageHealth | None = None,
        keys_required: bool = False,
    ) -> None:
        self.topic = topic
        self.keys_required = keys_required  # a compacted topic: a record without a key is refused
        self.index = index
        self.log = log
        self.producers = producers or ProducerStates()
        self.transactions = transactions or PartitionTransactions()
        # Changed since its last checkpoint (``server.partition.txn_checkpoint``), and where that was (-1: none)
        self.transactions_changed = False
        self.transactions_checkpoint = -1
        self._markers: dict[int, int] = {}  # producer id -> markers stored since this load
        self._epochs = epochs
        self._verified: set[int] = set()  # producer ids whose newest epoch this load asked the allocator for
        self.version = version
        self.tail = tail
        # Writes (append + flush, close) and reads (segment reads, time scans) on separate pools: a read
        # storm or a slow partition's reads cannot stall another partition's flush (``server.partition.executor``).
        self._writes = writes
        self._reads = reads
        self._group_commit = group_commit
        self._group: _Group | None = None  # the writes appended since the running flush began
        self._commit_task: asyncio.Task[None] | None = None
        self._one_at_a_time = asyncio.Lock()  # group commit off: one request per flush
        self._data = asyncio.Event()  # replaced after every commit: long polls wait on it
        self._waiting: dict[Callable[[], None], None] = {}  # long polls without a task (when_data), in order
        self.flushes = 0
        self.loaded_at = time.monotonic()
        self._flush_timeout_s = flush_timeout_s
        # A flush that never returns (an HDFS pipeline waiting on a DataNode that restarted) must not hold
        # the partition forever: past the timeout the log is abandoned, never touched again (its thread may
        # still be inside it), and the broker takes the partition over anew, which recovers the lease.
        self.abandoned: LogError | None = None
        self._health = health or StorageHealth()  # told of every flush: the server steps down on its evidence

    @property
    def failed(self) -> bool:
        return self.abandoned is not None or self.log.failed is not None

    # ---------------------------------------------------------------- produce

    async def produce(
        self,
        batch: bytearray,
        *,
        durable: bool = True,
        verify: bool = True,
        appended: asyncio.Future[None] | None = None,
        in_transaction: Callable[[], Awaitable[bool]] | None = None,
    ) -> ProduceResult:
        """Store one batch: offsets are assigned here, on the event loop (a header read, the producer check and
        a copy into the log's pending buffer); only the flush of the whole group goes to an I/O thread.
        ``appended`` is resolved once the batch has its place in the log, before it is durable: what a caller
        with requests that must stay in order waits for before handing over the next (a refused batch ends
        this call instead, so such a caller waits for either).

        A transactional batch that would open its producer's transaction here is stored only if
        ``in_transaction`` (the coordinator's answer, KIP-890 part 1) says this partition is in the producer's
        open transaction, and no marker of the producer was stored meanwhile: a late batch of a transaction
        already decided would otherwise open one no coordinator knows of, holding the LSO for ever."""
        try:
            header = read_header(batch, whole=False)
        except BatchError as exc:
            raise as_api_error(exc) from None
        if header.control:
            raise ApiError(
                400, "CORRUPT_BATCH", "a control batch (a transaction marker) is written by coordinators only"
            )
        if self.keys_required:
            await self._check_keys(batch, header)
        if self._epochs is not None and header.producer_id >= 0 and header.producer_id not in self._verified:
            # Asked on the read pool (never inside a flush); a fence that arrives meanwhile still counts.
            newest = await self.on_read_pool(self._newest_epoch, header.producer_id, header.producer_epoch)
            if newest is not None:
                self.producers.fence(header.producer_id, newest)
            self._verified.add(header.producer_id)
        markers = -1
        if header.transactional and not self.transactions.is_open(header.producer_id):
            markers = self._markers.get(header.producer_id, 0)
            if in_transaction is None or not await in_transaction():
                raise _not_in_transaction(self.topic, self.index, header.producer_id)
        if not self._group_commit:
            async with self._one_at_a_time:  # each request its own flush: appended only when its turn comes
                return await self._store(header, batch, durable, verify, appended, markers)
        return await self._store(header, batch, durable, verify, appended, markers)

    async def _check_keys(self, batch: bytearray, header: BatchHeader) -> None:
        """Refuse a batch with a record without a key (a compacted topic keeps the last value *per key*), as
        Kafka refuses it. A compressed batch is decompressed for it, on the read pool."""
        try:
            if header.codec:
                records = await self.on_read_pool(decode_records, batch)
            else:
                records = decode_records(batch, verify=False)
        except BatchError as exc:
            raise as_api_error(exc) from None
        if any(record.key is None for record in records):
            raise ApiError(
                400, "INVALID_RECORD", f"topic {self.topic!r} is compacted: every message needs a key (Kafka's rule)"
            )

    async def _store(
        self,
        header: BatchHeader,
        batch: bytearray,
        durable: bool,
        verify: bool,
        appended: asyncio.Future[None] | None,
        markers: int = -1,
    ) -> ProduceResult:
        if self.abandoned is not None:
            raise as_api_error(self.abandoned)
        try:
            verdict = self.producers.check(header)
            if isinstance(verdict, Duplicate):  # answered once durable, as the original was
                if appended is not None:
                    appended.set_result(None)
                durable_offset = await self._group_flush(self._join())
                base = verdict.base_offset
                end = base + header.record_count if base >= 0 else -1
                return ProduceResult(base, end, durable_offset, self.log.epoch, True, self.version)
            if markers >= 0 and self._markers.get(header.producer_id, 0) != markers:
                raise _not_in_transaction(self.topic, self.index, header.producer_id)  # decided since verified
            if not header.transactional and header.producer_id >= 0 and self.transactions.is_open(header.producer_id):
                raise ApiError(
                    409,
                    "INVALID_TXN_STATE",
                    f"producer {header.producer_id} has a transaction open on {self.topic}/{self.index}: "
                    "a batch outside it must wait for its commit or abort",
                )
            base, end, group = self._append(header, batch, verify)
        except (BatchError, LogError) as exc:
            raise as_api_error(exc) from None
        if appended is not None:
            appended.set_result(None)
        if not durable:
            return ProduceResult(base, end, self.log.durable_offset, self.log.epoch, False, self.version)
        return ProduceResult(base, end, await self._group_flush(group), self.log.epoch, False, self.version)

    def _append(self, header: BatchHeader, batch: bytearray, verify: bool) -> tuple[int, int, _Group]:
        """Give the batch its offsets in the log and a place in the next flush's group."""
        base, end = self.log.append(batch, verify=verify, header=header)
        self.producers.record(header, base)
        if header.transactional:
            self.transactions.appended(header.producer_id, base, transactional=True, epoch=header.producer_epoch)
            self.transactions_changed = True
        group = self._join()
        group.stored.append((base, end, batch))
        return base, end, group

    def takes_now(self, header: BatchHeader) -> bool:
        """Whether :meth:`produce_now` would append a batch with this header (no side effect): a plain batch, group
        commit on, no key check, a working log."""
        return not (
            header.producer_id >= 0
            or header.transactional
            or header.control
            or not self._group_commit
            or self.keys_required
            or self.failed
        )

    def produce_now(self, batch: bytearray, header: BatchHeader) -> Stored | None:
        """:meth:`produce` of a plain batch (no producer id, no transaction) that the server encoded itself,
        without an await: the batch has its offsets when this returns, and ``Stored.durable`` resolves once its
        group's flush is done. None whenever anything would need an await or an error answer (group commit
        off, a compacted topic's key check, a failed log): :meth:`produce` then does it all, so nothing here
        decides differently from it."""
        return self.append_now(batch, header) if self.takes_now(header) else None

    def append_now(self, batch: bytearray, header: BatchHeader) -> Stored | None:
        """:meth:`produce_now` of a batch :meth:`takes_now` already took (not asked again); None if the log
        refused it (nothing was appended: :meth:`produce` answers the same error)."""
        try:
            base, end, group = self._append(header, batch, False)
        except (BatchError, LogError):
            return None
        return Stored(base, end, group.future, self)

    def result_of(self, stored: Stored) -> ProduceResult:
        """The answer of a :meth:`produce_now` whose flush succeeded (``stored.durable`` done, no exception)."""
        return ProduceResult(
            stored.base_offset, stored.next_offset, stored.durable.result(), self.log.epoch, False, self.version
        )

    async def fence(self, producer_id: int, epoch: int) -> ProduceResult:
        """Refuse ``producer_id``'s epochs below ``epoch`` from now on; returns once every write accepted before
        is durable and this load is known to still own the partition (else raises, like a failed write)."""
        if self.abandoned is not None:
            raise as_api_error(self.abandoned)
        self.producers.fence(producer_id, epoch)
        self._verified.add(producer_id)
        group = self._join()
        group.check_owner = True
        durable = await self._group_flush(group)
        return ProduceResult(durable, durable, durable, self.log.epoch, True, self.version)

    async def write_marker(self, marker: Marker, *, bumped: bool = False) -> ProduceResult:
        """Close ``marker.producer_id``'s transaction here (a commit or abort marker), answered once the marker
        is durable and this load is known to still own the partition. A marker for a producer with nothing
        open here is stored all the same (its coordinator closes every partition it named, and retries).
        Refused from an epoch older than the producer's (a zombie's coordinator decision) and from a
        coordinator older than the newest one that wrote a marker of this producer here.

        ``bumped``: the transaction ended with an epoch bump (our SDK, KIP-890 part 2), so its marker's epoch is
        above every epoch of its data. A marker that is not above the open transaction's first epoch is then a
        late copy of an earlier transaction's (its coordinator retried it, and the first copy was slow): the
        open transaction is the producer's next one, which it must not close. Nothing is written; it is
        answered as done (that earlier transaction's marker is here already)."""
        if self.abandoned is not None:
            raise as_api_error(self.abandoned)
        pid = marker.producer_id
        began = self.transactions.open_epoch(pid)
        if bumped and began is not None and marker.producer_epoch <= began:
            durable = self.log.durable_offset
            return ProduceResult(-1, -1, durable, self.log.epoch, True, self.version)
        known = self.producers.epoch_of(pid)
        if known is not None and marker.producer_epoch < known:
            raise fenced(pid, marker.producer_epoch, known)
        newest = self.transactions.coordinator_epochs.get(pid, -1)
        if marker.coordinator_epoch < newest:
            raise ApiError(
                409,
                "TRANSACTION_COORDINATOR_FENCED",
                f"a marker of producer {pid} from coordinator epoch {marker.coordinator_epoch} where "
                f"{newest} has written: an older coordinator's decision",
            )
        if not self._group_commit:
            async with self._one_at_a_time:
                return await self._store_marker(marker)
        return await self._store_marker(marker)

    async def _store_marker(self, marker: Marker) -> ProduceResult:
        batch = bytearray(marker_batch(marker, timestamp_ms=int(time.time() * 1000)))
        try:
            header = read_header(batch)
            base, end = self.log.append(batch, verify=False, header=header)
        except (BatchError, LogError) as exc:
            raise as_api_error(exc) from None
        self.producers.record(header, base)  # its epoch fences the older ones (a bump per transaction)
        self._markers[marker.producer_id] = self._markers.get(marker.producer_id, 0) + 1
        self.transactions_changed = True
        self.transactions.ended(
            marker.producer_id, base, committed=marker.committed, coordinator_epoch=marker.coordinator_epoch
        )
        group = self._join()
        group.stored.append((base, end, batch))
        group.check_owner = True
        return ProduceResult(base, end, await self._group_flush(group), self.log.epoch, False, self.version)

    def _join(self) -> _Group:
        """The group the next flush takes; starts the committer if none runs."""
        group = self._group
        if group is None:
            loop = asyncio.get_running_loop()
            group = self._group = _Group(loop)
            if self._commit_task is None:
                self._commit_task = loop.create_task(self._commit_loop())
        return group

    async def _group_flush(self, group: _Group) -> int:
        try:
            return await group.future  # uncancellable: one waiter giving up must not cancel the others' flush
        except Exception as exc:
            raise as_api_error(exc) from None

    async def _commit_loop(self) -> None:
        """One flush per group, one group at a time: while a flush runs, new writes gather in the next group."""
        loop = asyncio.get_running_loop()
        group: _Group | None = None
        try:
            while (group := self._group) is not None:
                self._group = None
                try:
                    if self.abandoned is not None:
                        raise self.abandoned
                    work = asyncio.wrap_future(self._writes.submit(self._flush, group.check_owner), loop=loop)
                    work.add_done_callback(_retrieve)  # if abandoned, its late end is nobody's business
                    # Awaited directly: wait_for(shield(...)) took three more passes of the event loop between the
                    # sync and the answers, and asyncio.timeout a measurable part of the flush's own loop time.
                    # At the deadline the wait is cancelled; the flush thread is not (it cannot be), and the
                    # partition is abandoned either way.
                    deadline = loop.call_later(self._flush_timeout_s, work.cancel)
                    try:
                        durable = await work
                    except asyncio.CancelledError:
                        task = asyncio.current_task()
                        if (task is not None and task.cancelling()) or loop.time() < deadline.when():
                            raise  # this task is cancelled (the event loop's end), not the flush overdue
                        raise TimeoutError from None
                    finally:
                        deadline.cancel()
                except TimeoutError:
                    self.abandoned = StorageError(f"a flush took over {self._flush_timeout_s:.0f}s; reloading")
                    log.error("%s/%d: %s", self.topic, self.index, self.abandoned)
                    group.future.set_exception(self.abandoned)
                except Exception as exc:
                    group.future.set_exception(exc)
                else:
                    self.transactions.durable(durable)  # before any waiter runs: its marker counts
                    group.future.set_result(durable)
                    self.tail.extend(group.stored)
                self._data_changed()
                self._data = asyncio.Event()
        finally:
            self._commit_task = None
            # Only if the loop above died (cancelled at the event loop's end): its waiters cannot cancel their
            # wait (GroupFuture), so every group still open is answered here.
            for left in (group, self._group):
                if left is not None and not left.future.done():
                    left.future.set_exception(self.abandoned or LogError("commit stopped"))
            self._group = None

    def _flush(self, check_owner: bool) -> int:
        """In an I/O thread: one write and one sync for everything appended so far. Returns the durable offset."""
        self.flushes += 1
        # A log that failed already raises its remembered error without asking the storage: that says
        # nothing of it (an append racing the failure can leave a batch pending on such a log).
        if self.log.pending and self.log.failed is None:
            with self._health.operation(
                f"a flush of {self.topic}/{self.index}", failures=(StorageError,), answered=(FencedError,)
            ):
                durable = self.log.flush()
        else:
            durable = self.log.flush()
        if check_owner:
            self.log.check_owner()  # a load that lost the partition must not answer a fence
        return durable

    def abandon(self, error: LogError) -> None:
        """Stop serving now, without touching the storage (it is failing, or the partition moved): the commit
        in flight and every write waiting are answered with ``error`` (retriable for clients) at once, not
        after the flush's timeout; the log object is never used again (its thread may be stuck inside it)."""
        if self.abandoned is None:
            self.abandoned = error
        if self._commit_task is not None:
            self._commit_task.cancel()
        self.tail.clear()
        self._data_changed()

    def _newest_epoch(self, producer_id: int, epoch: int) -> int | None:
        """In an I/O thread, the first write of a producer since this load: the allocator's newest epoch of it,
        if newer than ``epoch`` (the partition then fences the older ones)."""
        assert self._epochs is not None
        try:
            return self._epochs.newer_epoch(producer_id, epoch)
        except Exception as exc:  # ZooKeeper or the storage unreachable: this batch only, retriable
            raise ApiError(
                503, "PRODUCER_CHECK_FAILED", f"cannot check producer {producer_id}'s epoch: {exc}", retriable=True
            ) from exc

    # ---------------------------------------------------------------- fetch

    @property
    def last_stable_offset(self) -> int:
        """Where read-committed readers stop (the high watermark when no transaction is undecided)."""
        return self.transactions.last_stable_offset(self.log.durable_offset)

    async def fetch(
        self,
        offset: int,
        max_bytes: int,
        wait_ms: int,
        *,
        committed: bool = False,
        keep_aborted: bool = False,
        until: int | None = None,
    ) -> FetchResult:
        """Stored batches from the one holding ``offset``. ``committed``: only what is below the last stable
        offset, without the batches of aborted transactions (markers stay: they hold offsets readers step
        over), or with them and the list of those transactions (``keep_aborted``: Kafka's way). ``until``: from
        the tail cache, no batch after the one holding ``until - 1`` (a reader of that many messages at most)."""
        if wait_ms > 0:
            await self.wait_for_data(offset, wait_ms, committed=committed)
        high, start = self.log.durable_offset, self.log.start_offset
        if offset < start or offset > high:
            raise OffsetOutOfRangeError(offset, start, high)
        stable = self.transactions.last_stable_offset(high) if committed else -1
        if offset >= (stable if committed else high):
            return FetchResult([], high, start, stable)
        batches = self._cached(offset, max_bytes, until)
        if batches is None:
            metrics.read_from("storage")
            data = await self.on_read_pool(self.log.read, offset, max_bytes)
            batches = [data] if data else []
        if not committed:
            return FetchResult(batches, high, start)
        aborted = self.transactions.aborted_between(offset, stable)
        return _committed(batches, high, start, stable, aborted, keep_aborted)

    def fetch_now(self, offset: int, max_bytes: int, wait_ms: int, until: int | None = None) -> FetchResult | None:
        """:meth:`fetch` (read-uncommitted) without an await: what the tail cache holds from ``offset``, or nothing
        at the high watermark if ``wait_ms`` is 0. None if it needs an await (a read of the storage, a wait for
        messages) or would raise (out of range): :meth:`fetch` then does it."""
        high, start = self.log.durable_offset, self.log.start_offset
        if offset < start or offset > high or (offset == high and wait_ms > 0):
            return None
        if offset == high:
            return FetchResult([], high, start)
        batches = self._cached(offset, max_bytes, until)
        return None if batches is None else FetchResult(batches, high, start)

    def _cached(self, offset: int, max_bytes: int, until: int | None) -> list[bytes | bytearray] | None:
        batches = self.tail.read(offset, max_bytes, until)
        if batches is not None:
            metrics.read_from("cache")
        return batches

    def when_data(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (once) after the next flush is done, or once the partition stops serving: a long poll
        that waits without a task looks again then (``forget_waiting`` if it stops waiting first)."""
        if self._data.is_set():  # stopped: the event is no longer replaced
            asyncio.get_running_loop().call_soon(callback)
        else:
            self._waiting[callback] = None

    def forget_waiting(self, callback: Callable[[], None]) -> None:
        self._waiting.pop(callback, None)

    def _data_changed(self) -> None:
        """Wake the long polls: the tasks waiting on the event, and (in the next pass of the event loop, not
        inside the commit loop) the callbacks of :meth:`when_data`."""
        self._data.set()
        if self._waiting:
            waiting, self._waiting = self._waiting, {}
            asyncio.get_running_loop().call_soon(_wake, list(waiting))

    async def wait_for_data(self, offset: int, wait_ms: int, *, committed: bool = False) -> None:
        """Return once a message at ``offset`` is durable (``committed``: decided), or after ``wait_ms`` (a long
        poll)."""
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            high = self.log.durable_offset
            if offset < (self.transactions.last_stable_offset(high) if committed else high):
                return
            if offset > high:
                raise OffsetOutOfRangeError(offset, self.log.start_offset, high)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            event = self._data
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                return
            if self.failed:
                raise as_api_error(self.abandoned or self.log.failed or LogError("failed"))

    async def on_read_pool(self, function: Callable[..., T], *args: object) -> T:
        """Run a read's blocking or CPU work (storage reads, decompressing a fetch's batches) on the read pool,
        not on the event loop every partition's requests share, nor inside a flush."""
        return await asyncio.get_running_loop().run_in_executor(self._reads, function, *args)

    async def offset_for_timestamp(self, timestamp_ms: int) -> int:
        """The first offset whose batch has a record at or after ``timestamp_ms`` (latest if none)."""

        def scan() -> int:
            offset = self.log.start_offset
            while offset < self.log.durable_offset:
                data = self.log.read(offset, 4 * 1024 * 1024)
                if not data:
                    break
                for position, header in iter_batches(data, verify=False):
                    if header.next_offset <= offset:
                        continue
                    if header.max_timestamp >= timestamp_ms:  # the answer is in this batch: decode just it
                        for record in decode_records(data, position, verify=False):
                            if record.offset >= offset and record.timestamp >= timestamp_ms:
                                return record.offset
                    offset = header.next_offset
            return self.log.durable_offset

        return await self.on_read_pool(scan)

    async def close(self, *, seal: bool = True) -> None:
        """Answer what is queued, flush, stop; long polls wake up and see the partition gone."""
        if self.abandoned is not None:
            self.abandon(self.abandoned)
            return
        while self._commit_task is not None:
            await asyncio.wait([self._commit_task])
        try:
            await asyncio.get_running_loop().run_in_executor(self._writes, self._close, seal)
        finally:
            self._data_changed()

    def _close(self, seal: bool) -> None:
        try:
            if self.log.failed is None and self.abandoned is None:
                self.log.close(seal=seal)
        finally:
            self.tail.clear()


def _committed(
    batches: list[bytes | bytearray],
    high: int,
    start: int,
    stable: int,
    aborted: list[AbortedTransaction],
    keep_aborted: bool,
) -> FetchResult:
    """A read-committed view of fetched ``batches``: cut at the last stable offset (always a batch boundary),
    and either without the data batches of the ``aborted`` transactions, saying where the reader goes on from
    (it cannot step over batches it was not given), or (``keep_aborted``) with them and their list. Headers
    only: no record is decoded."""
    listed = aborted if keep_aborted else None
    if stable >= high and (keep_aborted or not aborted):
        return FetchResult(batches, high, start, stable, aborted=listed)  # the usual case: nothing to leave out
    kept: list[bytes | bytearray] = []
    after = -1
    for buffer in batches:
        view = memoryview(buffer)
        for position, header in iter_batches(buffer, verify=False):
            if header.base_offset >= stable:
                return FetchResult(kept, high, start, stable, after, listed)
            after = header.next_offset
            if (
                not keep_aborted
                and header.transactional
                and not header.control
                and any(t.holds(header.producer_id, header.base_offset) for t in aborted)
            ):
                continue
            kept.append(bytes(view[position : position + header.length]))
    return FetchResult(kept, high, start, stable, after, listed)


def _not_in_transaction(topic: str, index: int, producer_id: int) -> ApiError:
    return ApiError(
        409,
        "INVALID_TXN_STATE",
        f"producer {producer_id}'s transaction does not include {topic}/{index} (add the partition to the "
        "transaction first), or it was already committed or aborted: abort and begin a new one",
    )


def _retrieve(future: asyncio.Future[int]) -> None:
    if not future.cancelled():
        future.exception()


def load_partition_state(
    plog: PartitionLog, window_bytes: int, checkpoint: tuple[int, PartitionTransactions] | None = None
) -> PartitionState:
    """Idempotent producers' state from the last ``window_bytes`` of the log, and the transactions' from the
    ``checkpoint`` (offset, state: ``server.partition.txn_checkpoint``) on, or from the same tail if there is
    none (in an I/O thread, on load)."""
    offset = plog.tail_offset(window_bytes)
    headers = []
    transactions = PartitionTransactions()
    since = offset  # the transactions' events count from here
    if checkpoint is not None:
        since, transactions = checkpoint
        offset = max(min(offset, since), plog.start_offset)
    while offset < plog.durable_offset:
        data = plog.read(offset, 4 * 1024 * 1024)
        if not data:
            break
        for position, header in iter_batches(data, verify=False):
            if header.next_offset <= offset:
                continue
            headers.append(header)
            offset = header.next_offset
            if header.base_offset < since:
                continue  # in the checkpoint already
            if header.control:
                try:
                    marker = parse_marker(header, decode_records(data, position, verify=False))
                except BatchError as exc:  # not a transaction's end (or unreadable): it closes nothing
                    log.warning("the control batch at %d is no transaction marker: %s", header.base_offset, exc)
                    continue
                transactions.ended(
                    marker.producer_id,
                    header.base_offset,
                    committed=marker.committed,
                    coordinator_epoch=marker.coordinator_epoch,
                )
            elif header.transactional:
                epoch = header.producer_epoch
                transactions.appended(header.producer_id, header.base_offset, transactional=True, epoch=epoch)
    transactions.durable(plog.durable_offset)
    return PartitionState(ProducerStates.rebuild(headers), transactions)
