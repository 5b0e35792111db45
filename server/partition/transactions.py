"""A partition's transactions: which producers have one open here, where each began, the last stable offset
(LSO) that read-committed readers stop at, and the index of aborted transactions they filter by. Pure: the
loaded partition feeds it the batches it stores and the markers once durable, in offset order.

Kafka's rules, which readers rely on:

* A producer's transaction opens on the partition at its first transactional batch there, and closes at its
  marker (commit or abort, a control batch the coordinator has written).
* The LSO is the first offset of the oldest transaction still open, or the end when none is: every offset
  below it is decided. Read-committed readers see nothing at or past it.
* An aborted transaction is remembered as (producer, first offset, marker offset): a reader of any range
  below the LSO is given the ones that overlap it, and drops that producer's transactional batches from the
  first offset on until it meets the abort marker (Kafka's consumer algorithm; the SDK does the same).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["AbortedTransaction", "PartitionTransactions"]


@dataclass(frozen=True, slots=True, order=True)
class AbortedTransaction:
    """An aborted transaction on one partition: ordered by its marker's offset (``last_offset``)."""

    last_offset: int  # the abort marker's offset
    first_offset: int
    producer_id: int


@dataclass(slots=True)
class PartitionTransactions:
    open: dict[int, int] = field(default_factory=dict)  # producer id -> first offset of its open transaction
    aborted: list[AbortedTransaction] = field(default_factory=list)  # by marker offset

    # ------------------------------------------------------------------ what the log stores

    def appended(self, producer_id: int, base_offset: int, *, transactional: bool) -> None:
        """A data batch stored at ``base_offset``: a transactional one opens its producer's transaction here if
        none is open (later batches belong to it)."""
        if transactional and producer_id not in self.open:
            self.open[producer_id] = base_offset

    def ended(self, producer_id: int, marker_offset: int, *, committed: bool) -> None:
        """A marker stored (durable) at ``marker_offset``. A marker for a producer with nothing open here is
        how a coordinator closes every partition it named; it changes nothing."""
        first = self.open.pop(producer_id, None)
        if first is not None and not committed:
            bisect.insort(self.aborted, AbortedTransaction(marker_offset, first, producer_id))

    def is_open(self, producer_id: int) -> bool:
        return producer_id in self.open

    # ------------------------------------------------------------------ what readers are told

    def last_stable_offset(self, high_watermark: int) -> int:
        """Where read-committed readers stop: the oldest open transaction's first offset, at most the high
        watermark."""
        return min(min(self.open.values(), default=high_watermark), high_watermark)

    def aborted_between(self, start: int, end: int) -> list[AbortedTransaction]:
        """The aborted transactions a reader of ``[start, end)`` must filter: those whose records or marker
        overlap it (marker at or after ``start``, first offset before ``end``), by marker offset."""
        at = bisect.bisect_left(self.aborted, AbortedTransaction(start, -1, -1))
        return [t for t in self.aborted[at:] if t.first_offset < end]

    # ------------------------------------------------------------------ the log's start moving on

    def forget_below(self, offset: int) -> None:
        """Retention or DeleteRecords removed everything below ``offset``: aborted transactions that ended
        below it concern no reader any more. (An open one stays open: its marker is still to come.)"""
        at = bisect.bisect_left(self.aborted, AbortedTransaction(offset, -1, -1))
        del self.aborted[:at]

    @classmethod
    def rebuilt(cls, events: Iterable[tuple[int, int, bool, bool | None]]) -> PartitionTransactions:
        """From the log, in offset order: ``(producer_id, base_offset, transactional, committed)`` per batch,
        ``committed`` None for a data batch and True/False for a marker."""
        state = cls()
        for producer_id, base_offset, transactional, committed in events:
            if committed is None:
                state.appended(producer_id, base_offset, transactional=transactional)
            else:
                state.ended(producer_id, base_offset, committed=committed)
        return state
