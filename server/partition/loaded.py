"""One loaded partition: the group committer, the tail cache and long-poll wake-ups.

Group commit: produce requests queue on the partition; one commit task at a time takes *every* queued
request, appends them to the log and flushes once (in an I/O thread), then answers each with its own
offsets or all with the same error. With group commit off, each request gets its own flush.

Fencing idempotent producers: a partition refuses an epoch older than the newest it knows of the producer.
It learns the newest from the producer's batches, from a *fence* (:meth:`LoadedPartition.fence`, which a new
instance sends to every partition it may write before it starts), and, the first time a producer writes
here after a load, from the allocator itself (``epochs``): a load forgets the fences, not the allocator. A
fence goes through the same queue as the writes and returns only after a flush and a check that this load
still owns the partition, so every write it did not refuse is durable, and readable, when it returns.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Protocol

from fencing import FencedError, LogError, OffsetOutOfRangeError, PartitionLog, StorageError
from server import metrics
from server.errors import ApiError
from server.partition.producers import Duplicate, ProducerStates
from server.partition.tailcache import PartitionTail
from talos import HEADER_SIZE, BatchError, decode_records, iter_batches, read_header

log = logging.getLogger("talos.server")

__all__ = ["FetchResult", "LoadedPartition", "ProduceResult", "as_api_error", "load_producer_states"]


@dataclass(frozen=True, slots=True)
class ProduceResult:
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


@dataclass(frozen=True, slots=True)
class FetchResult:
    batches: list[bytes | bytearray]
    high_watermark: int
    start_offset: int


class Epochs(Protocol):
    def newer_epoch(self, producer_id: int, epoch: int) -> int | None:
        """The producer's current epoch if newer than ``epoch``. Does I/O."""


@dataclass(eq=False)
class _Request:
    batch: bytearray
    durable: bool
    future: asyncio.Future[ProduceResult]
    verify: bool = True  # False for batches the server encoded itself (the JSON path): no second CRC pass
    offsets: tuple[int, int] | None = None
    error: Exception | None = field(default=None)
    duplicate: bool = False
    fence: tuple[int, int] | None = None  # (producer id, epoch): a fence, not a batch
    newest_epoch: int | None = None  # the allocator's newest epoch of the batch's producer, if newer


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
        epochs: Epochs | None = None,
        flush_timeout_s: float = 20.0,
        version: int = 0,
    ) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.producers = producers or ProducerStates()
        self._epochs = epochs
        self._verified: set[int] = set()  # producer ids whose newest epoch this load asked the allocator for
        self.version = version
        self.tail = tail
        # Writes (append + flush, close) and reads (segment reads, time scans) on separate pools: a read
        # storm or a slow partition's reads cannot stall another partition's flush (``server.partition.executor``).
        self._writes = writes
        self._reads = reads
        self._group_commit = group_commit
        self._queue: list[_Request] = []
        self._committing = False
        self._commit_task: asyncio.Task[None] | None = None
        self._data = asyncio.Event()  # replaced after every commit: long polls wait on it
        self.flushes = 0
        self.loaded_at = time.monotonic()
        self._flush_timeout_s = flush_timeout_s
        # A flush that never returns (an HDFS pipeline waiting on a DataNode that restarted) must not hold
        # the partition forever: past the timeout the log is abandoned, never touched again (its thread may
        # still be inside it), and the broker takes the partition over anew, which recovers the lease.
        self.abandoned: StorageError | None = None

    @property
    def failed(self) -> bool:
        return self.abandoned is not None or self.log.failed is not None

    # ---------------------------------------------------------------- produce

    async def produce(self, batch: bytearray, *, durable: bool = True, verify: bool = True) -> ProduceResult:
        loop = asyncio.get_running_loop()
        request = _Request(batch, durable, loop.create_future(), verify)
        if self._epochs is not None and len(batch) >= HEADER_SIZE:
            header = read_header(batch)
            if header.producer_id >= 0 and header.producer_id not in self._verified:
                # Asked before the batch queues (on the read pool: never inside a flush), applied in order
                # by the write thread, so a fence queued meanwhile still counts.
                request.newest_epoch = await loop.run_in_executor(
                    self._reads, self._newest_epoch, header.producer_id, header.producer_epoch
                )
        self._queue.append(request)
        if not self._committing:
            self._committing = True
            self._commit_task = loop.create_task(self._commit_loop())
        return await request.future

    async def fence(self, producer_id: int, epoch: int) -> ProduceResult:
        """Refuse ``producer_id``'s epochs below ``epoch`` from now on; returns once every write queued before
        is durable and this load is known to still own the partition (else raises, like a failed write)."""
        loop = asyncio.get_running_loop()
        request = _Request(bytearray(), True, loop.create_future(), fence=(producer_id, epoch))
        self._queue.append(request)
        if not self._committing:
            self._committing = True
            self._commit_task = loop.create_task(self._commit_loop())
        return await request.future

    async def _commit_loop(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._queue:
                if self._group_commit:
                    group, self._queue = self._queue, []
                else:
                    group = [self._queue.pop(0)]
                try:
                    if self.abandoned is not None:
                        raise self.abandoned
                    work = loop.run_in_executor(self._writes, self._write, group, loop)
                    work.add_done_callback(_retrieve)  # if abandoned, its late end is nobody's business
                    durable = await asyncio.wait_for(asyncio.shield(work), self._flush_timeout_s)
                except TimeoutError:
                    self.abandoned = StorageError(f"a flush took over {self._flush_timeout_s:.0f}s; reloading")
                    log.error("%s/%d: %s", self.topic, self.index, self.abandoned)
                    for request in group:
                        request.error = self.abandoned
                    durable = self.log.durable_offset
                except Exception as exc:
                    for request in group:
                        if request.error is None:
                            request.error = exc
                    durable = self.log.durable_offset
                for request in group:
                    if request.future.done():
                        continue
                    if request.error is not None:
                        request.future.set_exception(as_api_error(request.error))
                    else:
                        assert request.offsets is not None
                        result = ProduceResult(
                            *request.offsets, durable, self.log.epoch, request.duplicate, self.version
                        )
                        request.future.set_result(result)
                for request in group:
                    if (
                        request.error is None
                        and request.offsets is not None
                        and not request.duplicate
                        and request.batch
                    ):
                        self.tail.add(request.offsets[0], request.offsets[1], request.batch)
                self._data.set()
                self._data = asyncio.Event()
        finally:
            self._committing = False
            for request in self._queue:  # only if the loop above died
                if not request.future.done():
                    request.future.set_exception(as_api_error(LogError("commit stopped")))

    def _write(self, group: list[_Request], loop: asyncio.AbstractEventLoop) -> int:
        """In an I/O thread: append every request, one flush for all. Returns the durable offset."""
        fences = []
        for request in group:
            if request.fence is not None:
                self.producers.fence(*request.fence)
                self._verified.add(request.fence[0])
                fences.append(request)
                continue
            try:
                header = read_header(request.batch)
                if header.producer_id >= 0 and header.producer_id not in self._verified:
                    if request.newest_epoch is not None:
                        self.producers.fence(header.producer_id, request.newest_epoch)
                    self._verified.add(header.producer_id)
                verdict = self.producers.check(header)
                if isinstance(verdict, Duplicate):  # answered after this flush, as the original was
                    base = verdict.base_offset
                    request.offsets = (base, base + header.record_count if base >= 0 else -1)
                    request.duplicate = True
                    continue
                request.offsets = self.log.append(request.batch, verify=request.verify)
            except (BatchError, ApiError) as exc:
                request.error = exc
                continue
            self.producers.record(header, request.offsets[0])
            if not request.durable:
                result = ProduceResult(*request.offsets, self.log.durable_offset, self.log.epoch, False, self.version)
                loop.call_soon_threadsafe(_resolve, request.future, result)
        self.flushes += 1
        durable = self.log.flush()
        if fences:
            self.log.check_owner()  # a load that lost the partition must not answer a fence
            for request in fences:
                request.offsets = (durable, durable)
                request.duplicate = True  # nothing stored
        return durable

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

    async def fetch(self, offset: int, max_bytes: int, wait_ms: int) -> FetchResult:
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            high = self.log.durable_offset
            if offset < high or wait_ms <= 0:
                break
            if offset > high:
                raise OffsetOutOfRangeError(offset, self.log.start_offset, high)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            event = self._data
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                break
            if self.failed:
                raise as_api_error(self.log.failed or LogError("failed"))
        high, start = self.log.durable_offset, self.log.start_offset
        if offset < start or offset > high:
            raise OffsetOutOfRangeError(offset, start, high)
        if offset == high:
            return FetchResult([], high, start)
        cached = self.tail.read(offset, max_bytes)
        if cached is not None:
            metrics.read_from("cache")
            return FetchResult(cached, high, start)
        metrics.read_from("storage")
        data = await asyncio.get_running_loop().run_in_executor(self._reads, self.log.read, offset, max_bytes)
        return FetchResult([data] if data else [], high, start)

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

        return await asyncio.get_running_loop().run_in_executor(self._reads, scan)

    async def close(self, *, seal: bool = True) -> None:
        """Answer what is queued, flush, stop; long polls wake up and see the partition gone."""
        while self._committing:
            await asyncio.sleep(0.005)
        try:
            await asyncio.get_running_loop().run_in_executor(self._writes, self._close, seal)
        finally:
            self._data.set()

    def _close(self, seal: bool) -> None:
        try:
            if self.log.failed is None and self.abandoned is None:
                self.log.close(seal=seal)
        finally:
            self.tail.clear()


def _retrieve(future: asyncio.Future[int]) -> None:
    if not future.cancelled():
        future.exception()


def _resolve(future: asyncio.Future[ProduceResult], result: ProduceResult) -> None:
    if not future.done():
        future.set_result(result)


def load_producer_states(log: PartitionLog, window_bytes: int) -> ProducerStates:
    """Idempotent producers' state from the last ``window_bytes`` of the log (in an I/O thread, on load)."""
    offset = log.tail_offset(window_bytes)
    headers = []
    while offset < log.durable_offset:
        data = log.read(offset, 4 * 1024 * 1024)
        if not data:
            break
        for _position, header in iter_batches(data, verify=False):
            if header.next_offset > offset:
                headers.append(header)
                offset = header.next_offset
    return ProducerStates.rebuild(headers)
