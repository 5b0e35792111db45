"""One transactional id's state at the transaction coordinator, and the transitions Kafka's requests make.

A transactional id (Kafka's ``transactional.id``, per tenant) maps to one producer id and epoch at a time, and
to at most one transaction: the partitions it added (``__consumer_offsets`` ones included, for offsets sent to
the transaction) and where it stands. Every function here is pure: the clock and any new producer id come in
as arguments, the answer is a new :class:`TxnMetadata` (or an error), and the coordinator persists it to
``__transaction_state`` before it answers the client or writes a marker (a decision the log does not hold is
lost at failover, and a marker written for it could contradict the next coordinator's).

The life of a transaction: InitProducerId leaves the id ``Empty`` at a new epoch (fencing older instances);
the first AddPartitionsToTxn makes it ``Ongoing`` and starts the timeout clock; EndTxn decides it
(``PrepareCommit``/``PrepareAbort``, answered once durable); the coordinator writes a marker to every partition,
then records ``CompleteCommit``/``CompleteAbort``, and the next transaction starts from there.

Two protocol generations end a transaction differently (``bump``):

* TV1 (EndTxn ≤ v4, the clients we see: librdkafka, aiokafka, kafka-python, KafkaJS): the epoch stays, so a
  retried EndTxn that finds its transaction complete is answered as done. The price (Jepsen, Bufstream 2024):
  a *late* EndTxn of transaction N carries the same epoch as N+1 and decides N+1.
* TV2 (KIP-890 part 2; EndTxn v5, and our own SDK): every end bumps the epoch, markers carry the new one and the
  client continues with it. A retry carries the epoch before the bump and is recognised as one; anything else
  from the old epoch is fenced, so it can no longer touch the next transaction.

A server-side abort (a timed-out transaction, or InitProducerId while one is open) also bumps the epoch, but
fences: the old instance cannot continue (its EndTxn is not taken as a retry, its KIP-360 resume is refused).

Epochs are 16-bit: from :data:`EXHAUSTED_EPOCH` on the id rotates to a new producer id at epoch 0 (InitProducerId
at once; a bumping end or a fence when the transaction completes), keeping :data:`MAX_EPOCH` free so that one
more fence is always possible.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, NamedTuple, TypeAlias

from server.errors import ApiError
from server.security.buckets import retry_after_header

__all__ = [
    "COMPLETED",
    "EXHAUSTED_EPOCH",
    "MAX_EPOCH",
    "PREPARED",
    "SETTLED",
    "AbortFirst",
    "AlreadyDone",
    "EndOutcome",
    "InitOutcome",
    "Markers",
    "Prepare",
    "Ready",
    "TopicPartition",
    "TxnError",
    "TxnErrorCode",
    "TxnMetadata",
    "TxnStatus",
    "add_partitions",
    "client_identity",
    "complete",
    "end_transaction",
    "expired",
    "fence_and_abort",
    "init_producer",
    "lease_left_ms",
    "leased",
    "markers_for",
    "renew_lease",
    "require_known",
    "timed_out",
    "verify_partitions",
]

MAX_EPOCH: Final = 32767  # the largest epoch (Kafka's is a signed 16-bit number)
EXHAUSTED_EPOCH: Final = MAX_EPOCH - 1  # from here on the next epoch comes with a new producer id

TopicPartition: TypeAlias = tuple[str, int]


class TxnStatus(StrEnum):
    """Where a transactional id stands; the values are Kafka's names (DescribeTransactions, ListTransactions)."""

    EMPTY = "Empty"  # an epoch, no transaction
    ONGOING = "Ongoing"  # partitions added, the timeout clock running
    PREPARE_COMMIT = "PrepareCommit"  # decided, markers being written
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"  # every marker written
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"  # expired; its record is a tombstone, so no stored state has it
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"  # Kafka's transient fence state; here a fence goes to PrepareAbort


PREPARED: Final = frozenset({TxnStatus.PREPARE_COMMIT, TxnStatus.PREPARE_ABORT})
COMPLETED: Final = frozenset({TxnStatus.COMPLETE_COMMIT, TxnStatus.COMPLETE_ABORT})
SETTLED: Final = frozenset({TxnStatus.EMPTY, *COMPLETED})  # no transaction open: a new one may start


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnMetadata:
    """One transactional id's state, as ``__transaction_state`` stores it (but ``last_producer_epoch``)."""

    transactional_id: str
    tenant: str | None  # the owner (None: the admin, or auth is off); the record key includes it
    producer_id: int
    producer_epoch: int
    # The epoch before the current one, when the same instance moved on (a KIP-360 resume, a bumping end): a
    # resume that names it is a retry of one that succeeded. -1 when another instance (or a fence) took over.
    # Kafka does not persist it, nor do we: state read back from the log has -1.
    last_producer_epoch: int = -1
    # The producer id before a rotation: a retry from its exhausted epoch is still recognised.
    previous_producer_id: int = -1
    # A bumping end or fence from an exhausted epoch: the id switches to this one (epoch 0) at Complete.
    next_producer_id: int = -1
    timeout_ms: int
    status: TxnStatus
    partitions: frozenset[TopicPartition] = frozenset()  # (topic, partition), __consumer_offsets ones included
    start_ms: int = -1  # the transaction's first add; -1 when none is open
    updated_ms: int
    # This transaction ends (or ended) with a client-requested epoch bump (TV2, our SDK): a request from the
    # epoch before it is a retry. A fence bumps without it.
    bumped: bool = False
    # A named producer's lease (``POST /v1/producers {"name"}``: a connector task): the epoch whose instance
    # holds it, until when (wall-clock ms). While it lasts and that epoch is current, a new instance is refused
    # (PRODUCER_BUSY) instead of fencing it; a client's own epoch bump carries it along, a fence ends it.
    lease_epoch: int = -1
    lease_until_ms: int = 0


# ---------------------------------------------------------------------- errors


class TxnErrorCode(StrEnum):
    """The coordinator's refusals; the values are Kafka's error names."""

    INVALID_PRODUCER_ID_MAPPING = "INVALID_PRODUCER_ID_MAPPING"
    PRODUCER_FENCED = "PRODUCER_FENCED"
    CONCURRENT_TRANSACTIONS = "CONCURRENT_TRANSACTIONS"
    INVALID_TXN_STATE = "INVALID_TXN_STATE"
    INVALID_TRANSACTION_TIMEOUT = "INVALID_TRANSACTION_TIMEOUT"
    TRANSACTIONAL_ID_NOT_FOUND = "TRANSACTIONAL_ID_NOT_FOUND"
    PRODUCER_BUSY = "PRODUCER_BUSY"  # Talos's: a named producer's lease is held by a live instance


_HTTP_STATUS: Final = {
    TxnErrorCode.INVALID_PRODUCER_ID_MAPPING: 409,
    TxnErrorCode.PRODUCER_FENCED: 409,
    TxnErrorCode.CONCURRENT_TRANSACTIONS: 409,
    TxnErrorCode.INVALID_TXN_STATE: 409,
    TxnErrorCode.INVALID_TRANSACTION_TIMEOUT: 400,
    TxnErrorCode.TRANSACTIONAL_ID_NOT_FOUND: 404,
    TxnErrorCode.PRODUCER_BUSY: 409,
}


class TxnError(Exception):
    """A request the coordinator refuses: ``code`` says which rule (the Kafka edge maps it to its numeric
    code, the REST edge to :meth:`api_error`), the message what happened and what to do."""

    def __init__(self, code: TxnErrorCode, message: str, *, retry_after_ms: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after_ms = retry_after_ms

    @property
    def retriable(self) -> bool:
        """CONCURRENT_TRANSACTIONS (the previous transaction is still completing) and PRODUCER_BUSY (another
        instance's lease runs out in ``retry_after_ms``): the same request succeeds later. Everything else needs
        the client to do something else."""
        return self.code in (TxnErrorCode.CONCURRENT_TRANSACTIONS, TxnErrorCode.PRODUCER_BUSY)

    def api_error(self) -> ApiError:
        """The REST form: 409 for fencing, leases and state conflicts, 400 for a bad timeout, 404 for an unknown
        id."""
        status, code = _HTTP_STATUS[self.code], self.code.value
        if not self.retry_after_ms:
            return ApiError(status, code, self.message, retriable=self.retriable)
        return ApiError(
            status,
            code,
            self.message,
            retriable=self.retriable,
            details={"retry_after_ms": self.retry_after_ms},
            headers={"Retry-After": retry_after_header(self.retry_after_ms / 1000)},
        )


def _unknown_mapping(transactional_id: str | None, producer_id: int) -> TxnError:
    which = "this transactional id" if transactional_id is None else f"transactional id {transactional_id!r}"
    return TxnError(
        TxnErrorCode.INVALID_PRODUCER_ID_MAPPING,
        f"{which} is not held by producer id {producer_id} (never initialized, expired, or moved to another "
        "producer id): call InitProducerId (init_transactions) again",
    )


def _fenced(current: TxnMetadata, producer_id: int, producer_epoch: int) -> TxnError:
    return TxnError(
        TxnErrorCode.PRODUCER_FENCED,
        f"transactional id {current.transactional_id!r}: producer {producer_id} epoch {producer_epoch} is fenced, "
        f"the id is at producer {current.producer_id} epoch {current.producer_epoch} (a newer instance "
        "initialized it, or the coordinator aborted a timed-out transaction): close this producer and create a "
        "new one",
    )


def _concurrent(current: TxnMetadata) -> TxnError:
    return TxnError(
        TxnErrorCode.CONCURRENT_TRANSACTIONS,
        f"transactional id {current.transactional_id!r} is still completing its previous transaction "
        f"({current.status}): retry shortly",
    )


def _bad_state(current: TxnMetadata, *, commit: bool) -> TxnError:
    action = "commit" if commit else "abort"
    if current.status is TxnStatus.EMPTY:
        what = "it has no transaction open (nothing was added since InitProducerId)"
    elif current.status in COMPLETED or current.status in PREPARED:
        what = f"its transaction was already decided the other way ({current.status})"
    else:
        what = f"it is {current.status}"
    return TxnError(
        TxnErrorCode.INVALID_TXN_STATE,
        f"transactional id {current.transactional_id!r} cannot {action}: {what}; the producer's transaction "
        "state is out of step with the coordinator: abort, or close the producer and initialize it again",
    )


def _check_timeout(transactional_id: str, timeout_ms: int, max_timeout_ms: int) -> None:
    if not 0 < timeout_ms <= max_timeout_ms:
        raise TxnError(
            TxnErrorCode.INVALID_TRANSACTION_TIMEOUT,
            f"transactional id {transactional_id!r}: transaction timeout {timeout_ms} ms is outside "
            f"1..{max_timeout_ms} ms (the server's maximum): set transaction.timeout.ms within it",
        )


def require_known(current: TxnMetadata | None, transactional_id: str) -> TxnMetadata:
    """The id's state, for DescribeTransactions and the REST view; TRANSACTIONAL_ID_NOT_FOUND when there is
    none (never initialized, or expired)."""
    current = _live(current)
    if current is None:
        raise TxnError(
            TxnErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
            f"transactional id {transactional_id!r} is unknown (never initialized, or expired after being idle): "
            "check the id and the tenant",
        )
    return current


# ---------------------------------------------------------------------- outcomes


@dataclass(frozen=True, slots=True)
class Ready:
    """InitProducerId succeeds: persist ``metadata``, then answer its producer id and epoch."""

    metadata: TxnMetadata


@dataclass(frozen=True, slots=True)
class AbortFirst:
    """InitProducerId found a transaction open: persist ``metadata`` (PrepareAbort at a fencing epoch), write
    its ABORT markers, complete it, and answer CONCURRENT_TRANSACTIONS; the client's retry then initializes."""

    metadata: TxnMetadata


@dataclass(frozen=True, slots=True)
class Prepare:
    """EndTxn decides the transaction: persist ``metadata`` (PrepareCommit/PrepareAbort), answer
    (:func:`client_identity` for EndTxn v5), then write :func:`markers_for` it and :func:`complete` it."""

    metadata: TxnMetadata


@dataclass(frozen=True, slots=True)
class AlreadyDone:
    """EndTxn is a retry of one that completed: nothing to write; answer with ``metadata``'s identity."""

    metadata: TxnMetadata


InitOutcome: TypeAlias = Ready | AbortFirst
EndOutcome: TypeAlias = Prepare | AlreadyDone


class Markers(NamedTuple):
    """The markers a decided transaction needs: one control batch per partition, all with this result and
    producer identity (the bumped epoch when the end or a fence bumped it)."""

    commit: bool
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]  # sorted


# ---------------------------------------------------------------------- helpers


def _live(current: TxnMetadata | None) -> TxnMetadata | None:
    """A Dead id is as good as none: its record is (or is about to be) a tombstone."""
    return None if current is None or current.status is TxnStatus.DEAD else current


def _exhausted(epoch: int) -> bool:
    return epoch >= EXHAUSTED_EPOCH


def _bump(epoch: int) -> int:
    if epoch >= MAX_EPOCH:  # states keep epochs below MAX_EPOCH (rotation); a record that does not is corrupt
        raise ValueError(f"producer epoch {epoch} cannot be bumped")
    return epoch + 1


def _check_holder(current: TxnMetadata | None, producer_id: int, producer_epoch: int) -> TxnMetadata:
    """The checks every request of a running producer passes (AddPartitions, AddOffsets, verification): the
    id maps to this producer at this epoch, and no decided transaction is still completing."""
    current = _live(current)
    if current is None:
        raise _unknown_mapping(None, producer_id)
    if current.producer_id != producer_id:
        raise _unknown_mapping(current.transactional_id, producer_id)
    if current.producer_epoch != producer_epoch:
        raise _fenced(current, producer_id, producer_epoch)
    if current.status in PREPARED or current.status is TxnStatus.PREPARE_EPOCH_FENCE:
        raise _concurrent(current)
    return current


# ---------------------------------------------------------------------- InitProducerId


def _may_resume(current: TxnMetadata, expected: tuple[int, int]) -> bool:
    """KIP-360: a producer naming its (id, epoch) may resume when that id is the current one (the epoch is
    judged next), or the one before a rotation and its epoch the exhausted one (a retry of that rotation)."""
    producer_id, epoch = expected
    return (
        current.producer_epoch < 0
        or producer_id == current.producer_id
        or (producer_id == current.previous_producer_id and _exhausted(epoch))
    )


def lease_left_ms(current: TxnMetadata | None, *, now_ms: int) -> int:
    """How long the current instance's lease lasts still (0: none, lapsed, or its holder was fenced)."""
    current = _live(current)
    if current is None or current.lease_epoch != current.producer_epoch:
        return 0
    return max(0, current.lease_until_ms - now_ms)


def _check_lease(current: TxnMetadata | None, *, now_ms: int) -> None:
    left = lease_left_ms(current, now_ms=now_ms)
    if left:
        assert current is not None
        raise TxnError(
            TxnErrorCode.PRODUCER_BUSY,
            f"{current.transactional_id!r}: another instance holds this producer for {left / 1000:.1f} s more "
            "(it renews while it runs)",
            retry_after_ms=left,
        )


def leased(metadata: TxnMetadata, *, lease_ms: int, now_ms: int) -> TxnMetadata:
    """``metadata`` with its current epoch's instance holding the lease for ``lease_ms`` (0: none held)."""
    if lease_ms <= 0:
        return dataclasses.replace(metadata, lease_epoch=-1, lease_until_ms=0)
    return dataclasses.replace(metadata, lease_epoch=metadata.producer_epoch, lease_until_ms=now_ms + lease_ms)


def renew_lease(
    current: TxnMetadata | None, *, producer_id: int, producer_epoch: int, lease_ms: int, now_ms: int
) -> TxnMetadata:
    """The holder (``producer_id`` at ``producer_epoch``, the current epoch) keeps the lease for ``lease_ms``
    more (0 releases it). PRODUCER_FENCED once a newer instance took the id over; INVALID_PRODUCER_ID_MAPPING
    for an id it is not (expired, or never claimed)."""
    current = _live(current)
    if current is None or current.producer_id != producer_id:
        raise _unknown_mapping(None if current is None else current.transactional_id, producer_id)
    if producer_epoch != current.producer_epoch:
        raise _fenced(current, producer_id, producer_epoch)
    return dataclasses.replace(leased(current, lease_ms=lease_ms, now_ms=now_ms), updated_ms=now_ms)


def init_producer(
    current: TxnMetadata | None,
    *,
    transactional_id: str,
    tenant: str | None,
    timeout_ms: int,
    max_timeout_ms: int,
    now_ms: int,
    fresh_producer_id: int,
    expected: tuple[int, int] | None = None,
) -> InitOutcome:
    """InitProducerId for a transactional id (Kafka's ``prepareInitProducerIdTransit``).

    ``expected`` is the (producer id, epoch) a v3+ client resumes with (KIP-360; (-1, -1) or None for a new
    instance). ``fresh_producer_id`` is a never-used id, taken for a new transactional id or a rotation.

    * no state (or Dead): ``fresh_producer_id`` at epoch 0, Empty;
    * an ``expected`` id that is neither the current one nor the rotated-away one at its exhausted epoch:
      PRODUCER_FENCED;
    * PrepareCommit/PrepareAbort: CONCURRENT_TRANSACTIONS (the markers are being written; retry);
    * Ongoing: :class:`AbortFirst` (the open transaction is fenced and aborted; the client retries);
    * Empty/Complete*: a new epoch (older instances are fenced), ``last_producer_epoch`` -1 for a new instance
      or the resumed epoch for a KIP-360 resume; ``expected`` naming ``last_producer_epoch`` is a retry of a
      resume that succeeded: the same epoch again; any other ``expected`` epoch is fenced. An exhausted epoch
      rotates to ``fresh_producer_id`` at epoch 0 instead.

    A timeout outside 1..``max_timeout_ms`` is INVALID_TRANSACTION_TIMEOUT before anything else; a new instance
    (no ``expected``) while another's lease lasts is PRODUCER_BUSY, and the new state holds no lease (the
    caller gives it one with :func:`leased`).
    """
    _check_timeout(transactional_id, timeout_ms, max_timeout_ms)
    if expected is not None and expected[0] < 0:
        expected = None  # v3+ clients send (-1, -1) when they do not resume
    current = _live(current)
    if expected is None:
        _check_lease(current, now_ms=now_ms)
    if current is None:
        return Ready(
            TxnMetadata(
                transactional_id=transactional_id,
                tenant=tenant,
                producer_id=fresh_producer_id,
                producer_epoch=0,
                timeout_ms=timeout_ms,
                status=TxnStatus.EMPTY,
                updated_ms=now_ms,
            )
        )
    if expected is not None and not _may_resume(current, expected):
        raise _fenced(current, *expected)
    if current.status in PREPARED or current.status is TxnStatus.PREPARE_EPOCH_FENCE:
        raise _concurrent(current)
    if current.status is TxnStatus.ONGOING:
        return AbortFirst(fence_and_abort(current, now_ms=now_ms, fresh_producer_id=fresh_producer_id))
    settled = dataclasses.replace(
        current,
        status=TxnStatus.EMPTY,
        timeout_ms=timeout_ms,
        partitions=frozenset(),
        start_ms=-1,
        updated_ms=now_ms,
        next_producer_id=-1,
        bumped=False,
        lease_epoch=-1,
        lease_until_ms=0,
    )
    if expected is None:
        last_epoch = -1  # a new instance: whoever held the id is fenced and cannot resume
    elif current.producer_epoch < 0 or expected[1] == current.producer_epoch:
        last_epoch = current.producer_epoch  # the holder resumes after an error (KIP-360)
    elif expected[1] == current.last_producer_epoch:
        return Ready(settled)  # a retry of a resume that succeeded: its answer again
    else:
        raise _fenced(current, *expected)
    if _exhausted(current.producer_epoch):
        return Ready(
            dataclasses.replace(
                settled,
                producer_id=fresh_producer_id,
                producer_epoch=0,
                last_producer_epoch=last_epoch,
                previous_producer_id=current.producer_id,
            )
        )
    return Ready(
        dataclasses.replace(settled, producer_epoch=_bump(current.producer_epoch), last_producer_epoch=last_epoch)
    )


# ---------------------------------------------------------------------- AddPartitionsToTxn / AddOffsetsToTxn


def add_partitions(
    current: TxnMetadata | None,
    *,
    producer_id: int,
    producer_epoch: int,
    partitions: Iterable[TopicPartition],
    now_ms: int,
) -> TxnMetadata | None:
    """AddPartitionsToTxn, and AddOffsetsToTxn with the group's ``__consumer_offsets`` partition: the
    transaction with ``partitions`` added (Ongoing; a new transaction starts its timeout clock now), or None
    when there is nothing to write (all already in the open transaction, or none given).

    INVALID_PRODUCER_ID_MAPPING when the id is unknown or held by another producer id, PRODUCER_FENCED for
    another epoch, CONCURRENT_TRANSACTIONS while the previous transaction completes (clients retry).
    """
    current = _check_holder(current, producer_id, producer_epoch)
    wanted = frozenset(partitions)
    if current.status is TxnStatus.ONGOING:
        if wanted <= current.partitions:
            return None
        return dataclasses.replace(current, partitions=current.partitions | wanted, updated_ms=now_ms)
    if not wanted:
        return None
    return dataclasses.replace(  # from Empty or Complete*: a new transaction
        current,
        status=TxnStatus.ONGOING,
        partitions=wanted,
        start_ms=now_ms,
        updated_ms=now_ms,
        next_producer_id=-1,
        bumped=False,
    )


def verify_partitions(
    current: TxnMetadata | None,
    *,
    producer_id: int,
    producer_epoch: int,
    partitions: Iterable[TopicPartition],
) -> dict[TopicPartition, bool]:
    """KIP-890 part 1 (AddPartitionsToTxn ``verify_only``): for a partition leader about to open a
    transaction of this producer, whether each partition belongs to its open transaction. Nothing changes;
    the same errors as :func:`add_partitions`. (The leader maps False to TRANSACTION_ABORTABLE or
    INVALID_TXN_STATE by the client's version.)"""
    current = _check_holder(current, producer_id, producer_epoch)
    open_ = current.status is TxnStatus.ONGOING
    return {partition: open_ and partition in current.partitions for partition in partitions}


# ---------------------------------------------------------------------- EndTxn


def _prepare(current: TxnMetadata, *, commit: bool, bump: bool, now_ms: int, fresh_producer_id: int) -> TxnMetadata:
    status = TxnStatus.PREPARE_COMMIT if commit else TxnStatus.PREPARE_ABORT
    if not bump:
        return dataclasses.replace(current, status=status, updated_ms=now_ms, next_producer_id=-1, bumped=False)
    held = current.lease_epoch == current.producer_epoch  # the client's own bump keeps its lease
    return dataclasses.replace(
        current,
        status=status,
        producer_epoch=_bump(current.producer_epoch),
        last_producer_epoch=current.producer_epoch,
        next_producer_id=fresh_producer_id if _exhausted(current.producer_epoch) else -1,
        updated_ms=now_ms,
        bumped=True,
        lease_epoch=_bump(current.producer_epoch) if held else current.lease_epoch,
    )


def _end_v1(current: TxnMetadata, producer_epoch: int, *, commit: bool, now_ms: int) -> EndOutcome:
    """TV1: the epoch must be the current one; a retry finds its transaction complete at the same epoch."""
    if producer_epoch != current.producer_epoch:
        raise _fenced(current, current.producer_id, producer_epoch)
    status = current.status
    if status is TxnStatus.ONGOING:
        return Prepare(_prepare(current, commit=commit, bump=False, now_ms=now_ms, fresh_producer_id=-1))
    same = TxnStatus.PREPARE_COMMIT if commit else TxnStatus.PREPARE_ABORT
    done = TxnStatus.COMPLETE_COMMIT if commit else TxnStatus.COMPLETE_ABORT
    if status is same or status is TxnStatus.PREPARE_EPOCH_FENCE:
        raise _concurrent(current)
    if status is done:
        # The retry path of a lost answer; also the Jepsen/Bufstream hole: a late EndTxn of the previous
        # transaction lands here (harmless) or, once the next one is Ongoing, above (it decides that one).
        return AlreadyDone(current)
    raise _bad_state(current, commit=commit)  # Empty, or decided the other way


def _end_v2(
    current: TxnMetadata, producer_id: int, producer_epoch: int, *, commit: bool, now_ms: int, fresh_producer_id: int
) -> EndOutcome:
    """TV2 (Kafka's ``endTransaction`` with ``clientTransactionVersion`` 2): every end bumps the epoch, and a
    request from the epoch before a client-requested bump is a retry of the end that bumped it."""
    retry_bump = current.bumped and producer_id == current.producer_id and producer_epoch + 1 == current.producer_epoch
    retry_rotation = (
        current.bumped
        and current.status in COMPLETED
        and producer_id == current.previous_producer_id
        and producer_id != current.producer_id
        and _exhausted(producer_epoch)
        and current.producer_epoch == 0
    )
    retry = retry_bump or retry_rotation
    if producer_id != current.producer_id and not retry_rotation:
        raise _unknown_mapping(current.transactional_id, producer_id)
    status = current.status
    if status in PREPARED:
        valid = retry_bump
    elif status in COMPLETED:
        valid = retry or producer_epoch == current.producer_epoch
    else:  # Empty, Ongoing
        valid = producer_epoch == current.producer_epoch
    if not valid:
        raise _fenced(current, producer_id, producer_epoch)

    def bump() -> Prepare:
        return Prepare(_prepare(current, commit=commit, bump=True, now_ms=now_ms, fresh_producer_id=fresh_producer_id))

    if status is TxnStatus.ONGOING:
        return bump()
    if status in PREPARED:
        if (status is TxnStatus.PREPARE_COMMIT) == commit:
            raise _concurrent(current)
        raise _bad_state(current, commit=commit)
    if status is TxnStatus.COMPLETE_COMMIT:
        if commit:
            if retry:
                return AlreadyDone(current)
            raise _bad_state(current, commit=commit)
        if retry:
            raise _bad_state(current, commit=commit)
        return bump()  # abort of an empty transaction
    if status is TxnStatus.COMPLETE_ABORT:
        if not commit:
            return AlreadyDone(current) if retry else bump()
        raise _bad_state(current, commit=commit)
    if status is TxnStatus.EMPTY and not commit:
        return bump()  # abort of an empty transaction
    if status is TxnStatus.PREPARE_EPOCH_FENCE:
        raise _concurrent(current)
    raise _bad_state(current, commit=commit)


def end_transaction(
    current: TxnMetadata | None,
    *,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    bump: bool,
    now_ms: int,
    fresh_producer_id: int,
) -> EndOutcome:
    """EndTxn: :class:`Prepare` (persist it, answer, write the markers, complete) or :class:`AlreadyDone`
    (a retry of an end that completed: answer only).

    ``bump`` False is TV1 (EndTxn ≤ v4): the id must be at ``producer_epoch``; Ongoing → Prepare* at the same
    epoch; Prepare* of the same result → CONCURRENT_TRANSACTIONS (retry until complete); Complete* of the same
    result → AlreadyDone; Empty or the other result → INVALID_TXN_STATE.

    ``bump`` True is TV2 (EndTxn v5, our SDK): Prepare* carries the epoch + 1 (and ``fresh_producer_id`` as
    ``next_producer_id`` when the epoch is exhausted); a request at the epoch before a bump the client asked
    for is a retry: CONCURRENT_TRANSACTIONS while Prepare*, AlreadyDone in the Complete* of its result; an
    abort at the current epoch of Empty/Complete* is an empty transaction's abort (a bump, no markers); Kafka's
    table (§4.2 of the notes) for the rest: PRODUCER_FENCED for other epochs, INVALID_TXN_STATE otherwise.
    """
    current = _live(current)
    if current is None:
        raise _unknown_mapping(None, producer_id)
    if not bump:
        if current.producer_id != producer_id:
            raise _unknown_mapping(current.transactional_id, producer_id)
        return _end_v1(current, producer_epoch, commit=commit, now_ms=now_ms)
    return _end_v2(
        current, producer_id, producer_epoch, commit=commit, now_ms=now_ms, fresh_producer_id=fresh_producer_id
    )


def complete(prepared: TxnMetadata, *, now_ms: int) -> TxnMetadata:
    """The record after every marker of ``prepared`` is written: Complete* with no partitions and no start
    time; a pending rotation switches to ``next_producer_id`` at epoch 0 (``previous_producer_id`` keeps the
    old one, so a retry from its exhausted epoch is still recognised). ValueError unless ``prepared`` is
    PrepareCommit/PrepareAbort."""
    if prepared.status not in PREPARED:
        raise ValueError(f"{prepared.transactional_id!r} is {prepared.status}, not prepared: nothing to complete")
    done = TxnStatus.COMPLETE_COMMIT if prepared.status is TxnStatus.PREPARE_COMMIT else TxnStatus.COMPLETE_ABORT
    completed = dataclasses.replace(prepared, status=done, partitions=frozenset(), start_ms=-1, updated_ms=now_ms)
    if prepared.next_producer_id < 0:
        return completed
    return dataclasses.replace(
        completed,
        producer_id=prepared.next_producer_id,
        producer_epoch=0,
        previous_producer_id=prepared.producer_id,
        next_producer_id=-1,
        # The client's epoch before the bump stays resumable (-1 after a fence: the old instance is out).
        last_producer_epoch=prepared.last_producer_epoch,
        lease_epoch=0 if prepared.lease_epoch == prepared.producer_epoch else -1,
    )


def markers_for(prepared: TxnMetadata) -> Markers:
    """What to write for a decided transaction: its result, the producer id and (bumped) epoch the markers
    carry, and every partition it added. ValueError unless ``prepared`` is PrepareCommit/PrepareAbort."""
    if prepared.status not in PREPARED:
        raise ValueError(f"{prepared.transactional_id!r} is {prepared.status}: no markers to write")
    return Markers(
        prepared.status is TxnStatus.PREPARE_COMMIT,
        prepared.producer_id,
        prepared.producer_epoch,
        tuple(sorted(prepared.partitions)),
    )


def client_identity(metadata: TxnMetadata) -> tuple[int, int]:
    """The (producer id, epoch) the client continues with after this state: EndTxn v5 answers it (the new id
    at epoch 0 when the end rotates it)."""
    if metadata.next_producer_id >= 0:
        return metadata.next_producer_id, 0
    return metadata.producer_id, metadata.producer_epoch


# ---------------------------------------------------------------------- the coordinator's own moves


def timed_out(current: TxnMetadata, *, now_ms: int) -> bool:
    """An open transaction older than its timeout (counted from its first add): the coordinator fences it
    and aborts it (:func:`fence_and_abort`)."""
    return (
        current.status is TxnStatus.ONGOING and current.start_ms >= 0 and current.start_ms + current.timeout_ms < now_ms
    )


def fence_and_abort(current: TxnMetadata, *, now_ms: int, fresh_producer_id: int) -> TxnMetadata:
    """A server-side abort of the Ongoing transaction (a timeout, or InitProducerId by a new instance):
    PrepareAbort at epoch + 1 with ``last_producer_epoch`` -1, so the old instance is fenced everywhere (its
    markers carry the new epoch) and can neither resume (KIP-360) nor pass a late EndTxn off as a retry. From an
    exhausted epoch the id also rotates to ``fresh_producer_id`` at Complete. ValueError unless Ongoing (the
    caller looks first, under the id's lock)."""
    if current.status is not TxnStatus.ONGOING:
        raise ValueError(f"{current.transactional_id!r} is {current.status}: no open transaction to abort")
    return dataclasses.replace(
        current,
        status=TxnStatus.PREPARE_ABORT,
        producer_epoch=_bump(current.producer_epoch),
        last_producer_epoch=-1,
        next_producer_id=fresh_producer_id if _exhausted(current.producer_epoch) else -1,
        updated_ms=now_ms,
        bumped=False,
    )


def expired(current: TxnMetadata, *, now_ms: int, expiration_ms: int) -> bool:
    """Idle with no transaction (Empty/Complete*) for longer than ``expiration_ms``
    (``transactional.id.expiration.ms``): the coordinator tombstones it, and the next InitProducerId starts
    the id afresh. An open or completing transaction never expires."""
    return current.status in SETTLED and now_ms - current.updated_ms > expiration_ms
