"""A partition's transactions: which producers have one open here, where each began, the last stable offset
(LSO) that read-committed readers stop at, and the index of aborted transactions they filter by. Pure: the
loaded partition feeds it the batches it stores, in offset order, and tells it how far the log is durable.

Kafka's rules, which readers rely on:

* A producer's transaction opens on the partition at its first transactional batch there, and closes at its
  marker (commit or abort, a control batch the coordinator has written).
* The LSO is the first offset of the oldest transaction not yet decided *durably*: one still open, or one
  whose marker is stored but not flushed (a flush that fails takes the marker back). Every offset below it
  is decided; read-committed readers see nothing at or past it, and it never passes the high watermark.
* An aborted transaction is remembered as (producer, first offset, marker offset): a reader of any range
  below the LSO is given the ones that overlap it, and drops that producer's transactional batches from the
  first offset on until it meets the abort marker (Kafka's consumer algorithm; the server does the same for
  its own readers).
* A marker is appended before it is durable, and the producer may begin its next transaction here right
  after it: the next transactional batch then opens a *new* transaction, while the closed one holds the LSO
  until its marker is flushed.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["AbortedTransaction", "PartitionTransactions", "Verifier"]


class Verifier(Protocol):
    """KIP-890 part 1, the partition's question to the transaction's coordinator (wherever it is) before it
    opens a transaction of a producer: is this partition in the producer's open transaction? Raises the
    coordinator's refusal (a fenced epoch, an unknown id)."""

    async def in_transaction(
        self,
        tenant: str | None,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topic: str,
        partition: int,
    ) -> bool: ...


@dataclass(frozen=True, slots=True, order=True)
class AbortedTransaction:
    """An aborted transaction on one partition: ordered by its marker's offset (``last_offset``)."""

    last_offset: int  # the abort marker's offset
    first_offset: int
    producer_id: int

    def holds(self, producer_id: int, offset: int) -> bool:
        """Whether ``producer_id``'s transactional batch at ``offset`` belongs to this aborted transaction."""
        return producer_id == self.producer_id and self.first_offset <= offset < self.last_offset


@dataclass(frozen=True, slots=True, order=True)
class _Closing:
    marker_offset: int
    first_offset: int
    producer_id: int
    committed: bool


@dataclass(slots=True)
class PartitionTransactions:
    open: dict[int, int] = field(default_factory=dict)  # producer id -> first offset of its open transaction
    aborted: list[AbortedTransaction] = field(default_factory=list)  # by marker offset
    closing: list[_Closing] = field(default_factory=list)  # markers stored, not yet durable (by offset)
    coordinator_epochs: dict[int, int] = field(default_factory=dict)  # producer id -> newest marker's
    epochs: dict[int, int] = field(default_factory=dict)  # producer id -> its open transaction's first epoch

    # ------------------------------------------------------------------ what the log stores

    def appended(self, producer_id: int, base_offset: int, *, transactional: bool, epoch: int = 0) -> None:
        """A data batch stored at ``base_offset``: a transactional one opens its producer's transaction here if
        none is open (later batches belong to it)."""
        if transactional and producer_id not in self.open:
            self.open[producer_id] = base_offset
            self.epochs[producer_id] = epoch

    def open_epoch(self, producer_id: int) -> int | None:
        """The epoch the producer's open transaction here began in (None: none open)."""
        return self.epochs.get(producer_id) if producer_id in self.open else None

    def ended(self, producer_id: int, marker_offset: int, *, committed: bool, coordinator_epoch: int = 0) -> None:
        """A marker stored at ``marker_offset``: it closes the producer's open transaction here, which holds the
        LSO until :meth:`durable` passes the marker. A marker for a producer with nothing open here is how a
        coordinator closes every partition it named; it changes nothing else."""
        if coordinator_epoch > self.coordinator_epochs.get(producer_id, -1):
            self.coordinator_epochs[producer_id] = coordinator_epoch
        first = self.open.pop(producer_id, None)
        self.epochs.pop(producer_id, None)
        if first is not None:
            self.closing.append(_Closing(marker_offset, first, producer_id, committed))

    def durable(self, high_watermark: int) -> None:
        """Everything below ``high_watermark`` is flushed: the markers there take effect."""
        done = 0
        for closing in self.closing:
            if closing.marker_offset >= high_watermark:
                break
            done += 1
            if not closing.committed:
                aborted = AbortedTransaction(closing.marker_offset, closing.first_offset, closing.producer_id)
                bisect.insort(self.aborted, aborted)
        del self.closing[:done]

    def is_open(self, producer_id: int) -> bool:
        return producer_id in self.open

    # ------------------------------------------------------------------ what readers are told

    def last_stable_offset(self, high_watermark: int) -> int:
        """Where read-committed readers stop: the oldest undecided transaction's first offset, at most the high
        watermark."""
        oldest = min(self.open.values(), default=high_watermark)
        for closing in self.closing:
            oldest = min(oldest, closing.first_offset)
        return min(oldest, high_watermark)

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
        """From the durable log, in offset order: ``(producer_id, base_offset, transactional, committed)`` per
        batch, ``committed`` None for a data batch and True/False for a marker."""
        state = cls()
        end = 0
        for producer_id, base_offset, transactional, committed in events:
            if committed is None:
                state.appended(producer_id, base_offset, transactional=transactional)
            else:
                state.ended(producer_id, base_offset, committed=committed)
            end = base_offset + 1
        state.durable(end)
        return state
