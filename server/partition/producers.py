"""Idempotent producers: each partition remembers, per producer id, its epoch and last sequences.

A batch from an idempotent producer carries (producer id, epoch, base sequence) in its header. The
partition's owner appends it only if its sequence follows the producer's last one. A resend of a batch
it already stored (the acknowledgement was lost) is answered with the original offsets and not stored
again; a gap is an error; an older epoch is fenced. The state is rebuilt from the log's tail when a
partition is loaded, so it survives failover. This module is the pure part: no I/O.

A new instance can also *fence* a partition before it writes there (:meth:`ProducerStates.fence`): from then
on the older epoch is refused even if the new one never writes to the partition. A batch with base sequence
-1 is epoch-only: fenced when stale, otherwise stored without deduplication.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from server.errors import ApiError
from talos import BatchHeader

__all__ = ["Append", "Duplicate", "ProducerStates", "RETAINED_BATCHES", "fenced"]

RETAINED_BATCHES = 8  # per producer: how far back a resend is recognised with its original offsets


@dataclass(frozen=True, slots=True)
class Append:
    """Store the batch."""


@dataclass(frozen=True, slots=True)
class Duplicate:
    """Already stored at ``base_offset`` (-1: stored, but too long ago to know where)."""

    base_offset: int


@dataclass(slots=True)
class _Producer:
    epoch: int
    last_sequence: int  # of the last record stored
    batches: deque[tuple[int, int, int]] = field(default_factory=lambda: deque(maxlen=RETAINED_BATCHES))
    # (base sequence, last sequence, base offset) of the most recent batches


def fenced(producer_id: int, epoch: int, current: int) -> ApiError:
    """409 ``PRODUCER_FENCED``: ``epoch`` is older than the producer's ``current`` one."""
    return ApiError(
        409,
        "PRODUCER_FENCED",
        f"producer {producer_id} epoch {epoch} is fenced by epoch {current} (a newer instance took over)",
        details={"producer_epoch": epoch, "current_epoch": current},
    )


class ProducerStates:
    def __init__(self) -> None:
        self._producers: dict[int, _Producer] = {}

    def __len__(self) -> int:
        return len(self._producers)

    def check(self, header: BatchHeader) -> Append | Duplicate:
        """What to do with the batch; raises :class:`ApiError` for a fenced epoch or a sequence gap."""
        if header.producer_id < 0:
            return Append()
        known = self._producers.get(header.producer_id)
        first, last = header.base_sequence, header.base_sequence + header.record_count - 1
        if known is None:
            return Append()  # a producer this partition has not seen (or whose state is older than the tail)
        if header.producer_epoch < known.epoch:
            raise fenced(header.producer_id, header.producer_epoch, known.epoch)
        if first < 0:
            return Append()  # epoch-only
        if header.producer_epoch > known.epoch:
            if first != 0:
                raise _gap(header, expected=0)
            return Append()
        for base, end, offset in known.batches:
            if (base, end) == (first, last):
                return Duplicate(offset)
        if first == known.last_sequence + 1:
            return Append()
        if last <= known.last_sequence:
            return Duplicate(-1)
        raise _gap(header, expected=known.last_sequence + 1)

    def record(self, header: BatchHeader, base_offset: int) -> None:
        """The batch was appended at ``base_offset``."""
        if header.producer_id < 0:
            return
        if header.base_sequence < 0:
            self.fence(header.producer_id, header.producer_epoch)
            return
        last = header.base_sequence + header.record_count - 1
        known = self._producers.get(header.producer_id)
        if known is None or header.producer_epoch != known.epoch:
            known = _Producer(header.producer_epoch, last)
            self._producers[header.producer_id] = known
        known.last_sequence = last
        known.batches.append((header.base_sequence, last, base_offset))

    def fence(self, producer_id: int, epoch: int) -> None:
        """Refuse epochs of ``producer_id`` below ``epoch`` from now on; the new epoch starts at sequence 0."""
        known = self._producers.get(producer_id)
        if known is None or epoch > known.epoch:
            self._producers[producer_id] = _Producer(epoch, -1)

    def described(self) -> list[tuple[int, int, int]]:
        """(producer id, epoch, last sequence) of every producer known here: what DescribeProducers shows, to
        find a hanging transaction's producer. Read only."""
        return [(producer_id, known.epoch, known.last_sequence) for producer_id, known in self._producers.items()]

    def epoch_of(self, producer_id: int) -> int | None:
        known = self._producers.get(producer_id)
        return None if known is None else known.epoch

    @classmethod
    def rebuild(cls, headers: Iterable[BatchHeader]) -> ProducerStates:
        """The state after the given batches (the log's tail, oldest first)."""
        states = cls()
        for header in headers:
            states.record(header, header.base_offset)
        return states


def _gap(header: BatchHeader, *, expected: int) -> ApiError:
    return ApiError(
        409,
        "OUT_OF_ORDER_SEQUENCE",
        f"producer {header.producer_id} epoch {header.producer_epoch}: sequence {header.base_sequence} "
        f"where {expected} was expected (a batch is missing)",
    )
