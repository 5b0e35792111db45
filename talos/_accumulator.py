"""The producer's accumulator: records wait per partition until a batch is full or has lingered (no I/O).

The sync and asyncio producers share it; each brings its own future type and its own sender.

A batch holds its records mostly encoded already (what :meth:`Producer.send_many` adds, encoded at once, without
an object per record), then those ``send`` queued one at a time, encoded together when the batch is sent
(:meth:`PendingBatch.section`). Records without a timestamp get the time their batch was opened.
"""

from __future__ import annotations

import itertools
import operator
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from talos import _codec
from talos._codec import Buffer, RecordData
from talos._futures import ManyOutcome
from talos._partitioning import partition_for_key

__all__ = ["Accumulator", "PendingBatch", "any_partition", "choose_partition", "record_sizes"]

F = TypeVar("F")
_RECORD_OVERHEAD = 16
# A record with no key, value or headers and a zero delta: put in front of records encoded after a batch's
# first (their deltas are from its timestamp), then cut off. Its encoding: length 4, delta 0, key and value
# null (zigzag -1), no headers.
_ANCHOR_BYTES = b"\x04\x00\x01\x01\x00"


@dataclass
class PendingBatch(Generic[F]):
    topic: str
    partition: int
    created: float
    records: list[RecordData] = field(default_factory=list)  # queued as objects: encoded when the batch is sent
    futures: list[tuple[int, F]] = field(default_factory=list)  # the async producer's: (index in batch, future)
    size: int = 0
    attempts: int = 0
    outcome: object = None  # the sync producer's shared result for the records send() queued
    sequence: int | None = None  # an idempotent producer's sequence of the first record, fixed at first send
    epoch: int | None = None  # the producer epoch that sequence belongs to, fixed with it
    timestamp: int = field(default_factory=lambda: int(time.time() * 1000))  # ms: of its records without one
    # The records in order: `chunks` (encoded), then either `records` or `keys`/`values`. Only bytes and None
    # reach `keys`/`values` and the chunks, so encoding them cannot fail; `records` (what send() got with
    # headers, a timestamp or other types) are encoded in the sender, where an error fails just this batch.
    chunks: list[Buffer] = field(default_factory=list)  # parts of the records section
    encoded: int = 0  # how many records `chunks` hold
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    first_timestamp: int = 0  # of the first encoded record, and the largest (once any is encoded)
    max_timestamp: int = 0
    waiters: list[tuple[ManyOutcome, int, Sequence[int]]] = field(default_factory=list)  # send_many's
    # (the call, the index in this batch of its first record here, their places in the call's list)

    @property
    def count(self) -> int:
        """How many records the batch holds (its idempotent sequences count them)."""
        return self.encoded + len(self.records) + len(self.values)

    def add_value(self, key: bytes | None, value: bytes | None) -> None:
        """Queue a record without headers or a timestamp (as an object only after one that is)."""
        if self.records:
            self.records.append(RecordData(value, key))
        else:
            self.keys.append(key)
            self.values.append(value)

    def add_record(self, record: RecordData) -> None:
        self._encode_values()
        self.records.append(record)

    def append_values(self, keys: Sequence[bytes | None] | None, values: Sequence[bytes | None]) -> int:
        """Add records without headers or timestamps, encoded now (as objects only after records that are
        queued as objects); returns the index in the batch of the first."""
        start = self.count
        if self.records:
            pairs = zip([None] * len(values) if keys is None else keys, values, strict=True)
            self.records += [RecordData(value, key) for key, value in pairs]
        else:
            self._encode_values()
            self._append(_codec.encode_values(keys, values, self._delta()), len(values), self.timestamp)
        return start

    def section(self) -> tuple[Buffer, int, int]:
        """The batch's records section, its first and its largest timestamp (what ``build_batch`` takes)."""
        self._encode_values()
        if self.records:
            body: Buffer
            if not self.encoded:
                body, first, largest = _codec.encode_records(self.records, self.timestamp)
                self.first_timestamp = first
            else:  # deltas from the batch's first timestamp: encoded after an anchor record with it, cut off
                anchor = RecordData(None, timestamp=self.first_timestamp)
                encoded, _, largest = _codec.encode_records([anchor, *self.records], self.timestamp)
                body = memoryview(encoded)[len(_ANCHOR_BYTES) :]
            count, self.records = len(self.records), []
            self._append(body, count, largest)
        if len(self.chunks) > 1:
            self.chunks = [b"".join(self.chunks)]
        return self.chunks[0], self.first_timestamp, self.max_timestamp

    def _encode_values(self) -> None:
        if self.values:
            keys, values, self.keys, self.values = self.keys, self.values, [], []
            self._append(_codec.encode_values(keys, values, self._delta()), len(values), self.timestamp)

    def _delta(self) -> int:
        """The timestamp delta of records without a timestamp (0 unless the first had one of its own)."""
        if not self.encoded:
            self.first_timestamp = self.timestamp
        return self.timestamp - self.first_timestamp

    def _append(self, encoded: Buffer, count: int, largest: int) -> None:
        self.max_timestamp = max(self.max_timestamp, largest) if self.encoded else largest
        self.chunks.append(encoded)
        self.encoded += count


def record_sizes(keys: Sequence[bytes | None] | None, values: Sequence[bytes | None]) -> list[int]:
    """What each record counts against ``batch_bytes`` and ``buffer_bytes``, summed: entry ``i`` is the size of
    records ``0..i``."""
    overheads = range(_RECORD_OVERHEAD, _RECORD_OVERHEAD * (len(values) + 1), _RECORD_OVERHEAD)
    try:  # no key or value is None: iterators of C functions, no Python step per record
        sized_values: Sequence[Any] = values  # (len(None) raises the TypeError caught below)
        sized_keys: Sequence[Any] | None = keys
        lengths = map(len, sized_values)
        if sized_keys is not None:
            lengths = map(operator.add, lengths, map(len, sized_keys))
        return list(map(operator.add, itertools.accumulate(lengths), overheads))
    except TypeError:
        sizes = [len(v) if v is not None else 0 for v in values]
        if keys is not None:
            sizes = [size + len(k) if k is not None else size for size, k in zip(sizes, keys, strict=True)]
        return list(map(operator.add, itertools.accumulate(sizes), overheads))


class Accumulator(Generic[F]):
    """Batches per ``(topic, partition)``, in order; at most one batch per partition is taken at a time."""

    def __init__(self, *, batch_bytes: int, linger_s: float) -> None:
        self.batch_bytes = batch_bytes
        self.linger_s = linger_s
        self._queues: dict[tuple[str, int], deque[PendingBatch[F]]] = {}
        self._busy: set[tuple[str, int]] = set()
        self.buffered_bytes = 0

    def add(self, topic: str, partition: int, record: RecordData, now: float) -> PendingBatch[F]:
        """Queue the record; returns its batch (the record is the batch's last)."""
        size = len(record.value or b"") + len(record.key or b"") + _RECORD_OVERHEAD
        if record.headers:
            size += sum(len(k) + len(v or b"") for k, v in record.headers)
        batch = self._open(topic, partition, size, now)
        batch.add_record(record)
        return batch

    def add_value(
        self, topic: str, partition: int, key: bytes | None, value: bytes | None, now: float
    ) -> PendingBatch[F]:
        """:meth:`add` for a record without headers or a timestamp (what ``send`` mostly queues): no object for it."""
        size = (len(value) if value is not None else 0) + (len(key) if key is not None else 0) + _RECORD_OVERHEAD
        batch = self._open(topic, partition, size, now)
        batch.add_value(key, value)
        return batch

    def _open(self, topic: str, partition: int, size: int, now: float) -> PendingBatch[F]:
        """The partition's open batch with room for ``size`` more bytes (a new one if there is none), counted."""
        batch = self._with_room(topic, partition, size, now)
        batch.size += size
        self.buffered_bytes += size
        return batch

    def _with_room(self, topic: str, partition: int, size: int, now: float) -> PendingBatch[F]:
        """The partition's open batch if ``size`` more bytes fit it (or it is empty), else a new one."""
        queue = self._queues.get((topic, partition))
        if queue is None:
            queue = self._queues[(topic, partition)] = deque()
        if not queue or (queue[-1].size + size > self.batch_bytes and queue[-1].count):
            queue.append(PendingBatch(topic, partition, now))
        return queue[-1]

    def add_values(
        self,
        topic: str,
        partition: int,
        keys: Sequence[bytes | None] | None,
        values: Sequence[bytes | None],
        sizes: Sequence[int],
        start: int,
        now: float,
    ) -> tuple[PendingBatch[F], int, int]:
        """Queue records ``start..`` of ``values`` (and ``keys``; ``sizes`` from :func:`record_sizes`) that fit the
        partition's open batch (a new one when that is full; at least one record). Returns the batch,
        the index in it of record ``start``, and the index in ``values`` after the last record queued."""
        before = sizes[start - 1] if start else 0
        batch = self._with_room(topic, partition, sizes[start] - before, now)
        end = max(bisect_right(sizes, before + self.batch_bytes - batch.size, lo=start), start + 1)
        first = batch.append_values(None if keys is None else keys[start:end], values[start:end])
        added = sizes[end - 1] - before
        batch.size += added
        self.buffered_bytes += added
        return batch, first, end

    def ready(self, now: float, *, flushing: bool) -> list[PendingBatch[F]]:
        """Take the first batch of every idle partition that is full, old enough, or being flushed."""
        out = []
        for key, queue in self._queues.items():
            if key in self._busy or not queue:
                continue
            first = queue[0]
            if flushing or len(queue) > 1 or first.size >= self.batch_bytes or now - first.created >= self.linger_s:
                out.append(queue.popleft())
                self._busy.add(key)
        return out

    def next_deadline(self, now: float) -> float | None:
        """Seconds until the oldest waiting batch of an idle partition lingers long enough."""
        waits = [q[0].created + self.linger_s - now for k, q in self._queues.items() if q and k not in self._busy]
        return max(min(waits), 0.0) if waits else None

    def done(self, batch: PendingBatch[F]) -> None:
        """The batch was answered (stored or failed for good): the partition is free again."""
        self._busy.discard((batch.topic, batch.partition))
        self.buffered_bytes -= batch.size

    @property
    def empty(self) -> bool:
        return not self._busy and not any(self._queues.values())


_spread = itertools.count()


def choose_partition(
    key: bytes | None, partition: int | None, partitions: int, sticky: dict[str, int], topic: str
) -> int:
    """Explicit partition, else the key's slot range, else a sticky partition per topic (changed per batch)."""
    if partition is not None:
        if not 0 <= partition < partitions:
            raise ValueError(f"topic {topic!r} has partitions 0..{partitions - 1}, not {partition}")
        return partition
    if key is not None:
        return partition_for_key(key, partitions)
    if topic not in sticky:
        sticky[topic] = any_partition(partitions)
    return sticky[topic]


def any_partition(partitions: int) -> int:
    """A partition for records without a key (each call the next, so producers spread)."""
    return next(_spread) % partitions
