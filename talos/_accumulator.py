"""The producer's accumulator: records wait per partition until a batch is full or has lingered (no I/O).

The sync and asyncio producers share it; each brings its own future type and its own sender.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from talos._codec import RecordData
from talos._partitioning import partition_for_key

__all__ = ["Accumulator", "PendingBatch", "RecordMetadata", "choose_partition"]

F = TypeVar("F")
_RECORD_OVERHEAD = 16


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record was stored."""

    topic: str
    partition: int
    offset: int


@dataclass
class PendingBatch(Generic[F]):
    topic: str
    partition: int
    created: float
    records: list[RecordData] = field(default_factory=list)
    futures: list[F] = field(default_factory=list)  # the async producer's, one per record
    size: int = 0
    attempts: int = 0
    outcome: object = None  # the sync producer's shared result for the whole batch
    sequence: int | None = None  # an idempotent producer's sequence of the first record, fixed at first send
    epoch: int | None = None  # the producer epoch that sequence belongs to, fixed with it


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
        queue = self._queues.get((topic, partition))
        if queue is None:
            queue = self._queues[(topic, partition)] = deque()
        if not queue or (queue[-1].size + size > self.batch_bytes and queue[-1].records):
            queue.append(PendingBatch(topic, partition, now))
        batch = queue[-1]
        batch.records.append(record)
        batch.size += size
        self.buffered_bytes += size
        return batch

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
        sticky[topic] = next(_spread) % partitions
    return sticky[topic]
