"""The transaction coordinator's state machine (``server.transactions.state``): Kafka's decision tables for
InitProducerId, AddPartitionsToTxn (and its verify-only form) and EndTxn under TV1 and TV2, checked cell by
cell; the Jepsen/Bufstream late-EndTxn scenario; epoch exhaustion; timeouts; and random request sequences
(stale, retried and current identities, coordinator reloads) against the invariants a log reader relies on."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from server.transactions import records
from server.transactions.state import (
    COMPLETED,
    EXHAUSTED_EPOCH,
    MAX_EPOCH,
    PREPARED,
    SETTLED,
    AbortFirst,
    AlreadyDone,
    EndOutcome,
    InitOutcome,
    Markers,
    Prepare,
    Ready,
    TxnError,
    TxnErrorCode,
    TxnMetadata,
    TxnStatus,
    add_partitions,
    client_identity,
    complete,
    end_transaction,
    expired,
    fence_and_abort,
    init_producer,
    lease_left_ms,
    leased,
    markers_for,
    renew_lease,
    require_known,
    timed_out,
    verify_partitions,
)

TID = "orders-tx"
PID = 100
EPOCH = 10  # the current epoch of the table's states; "retry" is EPOCH - 1, "stale" EPOCH - 2
FRESH = 7  # the new producer id a request may take
NOW = 5_000
MAX_TIMEOUT = 900_000

PF = TxnErrorCode.PRODUCER_FENCED.value
CONC = TxnErrorCode.CONCURRENT_TRANSACTIONS.value
ITS = TxnErrorCode.INVALID_TXN_STATE.value
MAPPING = TxnErrorCode.INVALID_PRODUCER_ID_MAPPING.value


def meta(status: TxnStatus = TxnStatus.EMPTY, **changes: object) -> TxnMetadata:
    base = TxnMetadata(
        transactional_id=TID,
        tenant="acme",
        producer_id=PID,
        producer_epoch=EPOCH,
        last_producer_epoch=EPOCH - 1,
        timeout_ms=60_000,
        status=status,
        partitions=frozenset({("t", 0)}) if status is TxnStatus.ONGOING or status in PREPARED else frozenset(),
        start_ms=1_000 if status is TxnStatus.ONGOING or status in PREPARED else -1,
        updated_ms=1_000,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def init(
    current: TxnMetadata | None, *, expected: tuple[int, int] | None = None, now: int = NOW, timeout: int = 60_000
) -> InitOutcome:
    return init_producer(
        current,
        transactional_id=TID,
        tenant="acme",
        timeout_ms=timeout,
        max_timeout_ms=MAX_TIMEOUT,
        now_ms=now,
        fresh_producer_id=FRESH,
        expected=expected,
    )


def end(
    current: TxnMetadata | None, epoch: int, *, commit: bool, bump: bool, pid: int = PID, fresh: int = FRESH
) -> EndOutcome:
    return end_transaction(
        current, producer_id=pid, producer_epoch=epoch, commit=commit, bump=bump, now_ms=NOW, fresh_producer_id=fresh
    )


def add(
    current: TxnMetadata | None, epoch: int, *parts: tuple[str, int], pid: int = PID, now: int = NOW
) -> TxnMetadata | None:
    return add_partitions(current, producer_id=pid, producer_epoch=epoch, partitions=parts, now_ms=now)


def summary(run: Callable[[], object]) -> str:
    """One request's outcome, in the table's words."""
    try:
        out = run()
    except TxnError as exc:
        return exc.code.value
    if out is None:
        return "no-op"
    if isinstance(out, Ready):
        m = out.metadata
        return f"Ready {m.status} {m.producer_id}/{m.producer_epoch} last={m.last_producer_epoch}"
    if isinstance(out, AbortFirst | Prepare):
        m = out.metadata
        return f"{type(out).__name__} {m.status} {m.producer_id}/{m.producer_epoch}"
    if isinstance(out, AlreadyDone):
        return f"AlreadyDone {out.metadata.status} {out.metadata.producer_id}/{out.metadata.producer_epoch}"
    if isinstance(out, TxnMetadata):
        return f"{out.status} parts={len(out.partitions)} start={out.start_ms}"
    if isinstance(out, dict):
        return "verify " + ",".join(f"{t}-{p}={'in' if v else 'out'}" for (t, p), v in sorted(out.items()))
    raise AssertionError(out)


# ---------------------------------------------------------------------- the decision table

STATUSES = ["absent", "Dead", *[s.value for s in TxnStatus if s not in {TxnStatus.DEAD, TxnStatus.PREPARE_EPOCH_FENCE}]]
KINDS = ["init", "init-resume", "add", "verify", "commit-v1", "abort-v1", "commit-v2", "abort-v2"]
EPOCHS = {"retry": EPOCH - 1, "current": EPOCH, "stale": EPOCH - 2}

FRESH_READY = f"Ready Empty {FRESH}/0 last=-1"
NEW_TXN = f"Ongoing parts=1 start={NOW}"
FENCE = f"AbortFirst PrepareAbort {PID}/{EPOCH + 1}"
NOT_MAPPED = (MAPPING, MAPPING, MAPPING)


def _all(outcome: str) -> tuple[str, str, str]:
    return outcome, outcome, outcome


def _current_only(outcome: str) -> tuple[str, str, str]:
    return PF, outcome, PF


# (status, kind) -> outcome at the (retry, current, stale) epoch. Prepare*/Complete* were reached by an end of
# the same generation as the request (TV2: a bump from EPOCH - 1, so "retry" is the client's epoch before it).
TABLE: dict[tuple[str, str], tuple[str, str, str]] = {
    **{
        (absent, kind): outcome
        for absent in ("absent", "Dead")
        for kind, outcome in {
            "init": _all(FRESH_READY),
            "init-resume": _all(FRESH_READY),  # KIP-360 on an unknown id: as a new one (Kafka: epoch -1 → 0)
            "add": NOT_MAPPED,
            "verify": NOT_MAPPED,
            "commit-v1": NOT_MAPPED,
            "abort-v1": NOT_MAPPED,
            "commit-v2": NOT_MAPPED,
            "abort-v2": NOT_MAPPED,
        }.items()
    },
    ("Empty", "init"): _all(f"Ready Empty {PID}/{EPOCH + 1} last=-1"),
    ("Empty", "init-resume"): (
        f"Ready Empty {PID}/{EPOCH} last={EPOCH - 1}",  # the resumed epoch was the last one: a retry, same answer
        f"Ready Empty {PID}/{EPOCH + 1} last={EPOCH}",  # KIP-360: bump, remember where it came from
        PF,
    ),
    ("Empty", "add"): _current_only(NEW_TXN),
    ("Empty", "verify"): _current_only("verify t-0=out"),
    ("Empty", "commit-v1"): _current_only(ITS),
    ("Empty", "abort-v1"): _current_only(ITS),
    ("Empty", "commit-v2"): _current_only(ITS),
    ("Empty", "abort-v2"): _current_only(f"Prepare PrepareAbort {PID}/{EPOCH + 1}"),  # empty abort, bumped
    ("Ongoing", "init"): _all(FENCE),
    ("Ongoing", "init-resume"): _all(FENCE),
    ("Ongoing", "add"): _current_only("Ongoing parts=2 start=1000"),
    ("Ongoing", "verify"): _current_only("verify t-0=in"),
    ("Ongoing", "commit-v1"): _current_only(f"Prepare PrepareCommit {PID}/{EPOCH}"),
    ("Ongoing", "abort-v1"): _current_only(f"Prepare PrepareAbort {PID}/{EPOCH}"),
    ("Ongoing", "commit-v2"): _current_only(f"Prepare PrepareCommit {PID}/{EPOCH + 1}"),
    ("Ongoing", "abort-v2"): _current_only(f"Prepare PrepareAbort {PID}/{EPOCH + 1}"),
    **{
        (prepared, kind): outcome
        for prepared, result in (("PrepareCommit", "commit"), ("PrepareAbort", "abort"))
        for kind, outcome in {
            "init": _all(CONC),
            "init-resume": _all(CONC),
            "add": _current_only(CONC),
            "verify": _current_only(CONC),
            f"{result}-v1": _current_only(CONC),
            f"{'abort' if result == 'commit' else 'commit'}-v1": _current_only(ITS),
            # TV2: only the epoch before the bump is a retry; the current epoch is a next transaction too early.
            f"{result}-v2": (CONC, PF, PF),
            f"{'abort' if result == 'commit' else 'commit'}-v2": (ITS, PF, PF),
        }.items()
    },
    **{
        (completed, kind): outcome
        for completed in ("CompleteCommit", "CompleteAbort")
        for kind, outcome in {
            "init": _all(f"Ready Empty {PID}/{EPOCH + 1} last=-1"),
            "init-resume": (
                f"Ready Empty {PID}/{EPOCH} last={EPOCH - 1}",
                f"Ready Empty {PID}/{EPOCH + 1} last={EPOCH}",
                PF,
            ),
            "add": _current_only(NEW_TXN),
            "verify": _current_only("verify t-0=out"),
        }.items()
    },
    ("CompleteCommit", "commit-v1"): _current_only(f"AlreadyDone CompleteCommit {PID}/{EPOCH}"),
    ("CompleteCommit", "abort-v1"): _current_only(ITS),
    ("CompleteAbort", "abort-v1"): _current_only(f"AlreadyDone CompleteAbort {PID}/{EPOCH}"),
    ("CompleteAbort", "commit-v1"): _current_only(ITS),
    # KIP-890's table: (retry, current, stale)
    ("CompleteCommit", "commit-v2"): (f"AlreadyDone CompleteCommit {PID}/{EPOCH}", ITS, PF),
    ("CompleteCommit", "abort-v2"): (ITS, f"Prepare PrepareAbort {PID}/{EPOCH + 1}", PF),
    ("CompleteAbort", "abort-v2"): (
        f"AlreadyDone CompleteAbort {PID}/{EPOCH}",
        f"Prepare PrepareAbort {PID}/{EPOCH + 1}",
        PF,
    ),
    ("CompleteAbort", "commit-v2"): (ITS, ITS, PF),
}


def table_state(status: str, kind: str) -> TxnMetadata | None:
    if status == "absent":
        return None
    current = meta(TxnStatus(status))
    if current.status in PREPARED or current.status in COMPLETED:
        current = dataclasses.replace(current, bumped=kind.endswith("-v2"))  # made by an end of that generation
    return current


def request(kind: str, current: TxnMetadata | None, epoch: int, pid: int = PID) -> Callable[[], object]:
    if kind == "init":
        return lambda: init(current)
    if kind == "init-resume":
        return lambda: init(current, expected=(pid, epoch))
    if kind == "add":
        return lambda: add(current, epoch, ("t", 1), pid=pid)
    if kind == "verify":
        return lambda: verify_partitions(current, producer_id=pid, producer_epoch=epoch, partitions=[("t", 0)])
    action, version = kind.split("-")
    return lambda: end(current, epoch, commit=action == "commit", bump=version == "v2", pid=pid)


def test_the_table_covers_every_status_request_and_epoch() -> None:
    assert set(TABLE) == set(itertools.product(STATUSES, KINDS))


@pytest.mark.parametrize(("status", "kind", "epoch"), [(s, k, e) for s in STATUSES for k in KINDS for e in EPOCHS])
def test_decision_table(status: str, kind: str, epoch: str) -> None:
    expected = TABLE[status, kind][list(EPOCHS).index(epoch)]
    assert summary(request(kind, table_state(status, kind), EPOCHS[epoch])) == expected


@pytest.mark.parametrize("status", [s for s in STATUSES if s not in {"absent", "Dead"}])
@pytest.mark.parametrize("kind", ["add", "verify", "commit-v1", "abort-v1", "commit-v2", "abort-v2"])
def test_another_producer_id_is_not_mapped(status: str, kind: str) -> None:
    assert summary(request(kind, table_state(status, kind), EPOCH, pid=PID + 1)) == MAPPING


@pytest.mark.parametrize("status", [s for s in STATUSES if s not in {"absent", "Dead"}])
def test_resuming_another_producer_id_is_fenced(status: str) -> None:
    assert summary(lambda: init(meta(TxnStatus(status)), expected=(PID + 1, EPOCH))) == PF


def test_a_fence_made_state_is_no_retry_for_a_tv2_end() -> None:
    """A server-side abort bumps without ``bumped``: the old instance's end at its epoch is fenced, not a
    retry (Kafka would take an abort as one and hand it the fencing epoch)."""
    fenced = fence_and_abort(meta(TxnStatus.ONGOING), now_ms=NOW, fresh_producer_id=FRESH)
    for state in (fenced, complete(fenced, now_ms=NOW)):
        for commit in (True, False):
            assert summary(lambda: end(state, EPOCH, commit=commit, bump=True)) == PF  # noqa: B023


def test_timeout_bounds() -> None:
    for bad in (0, -1, MAX_TIMEOUT + 1):
        with pytest.raises(TxnError) as caught:
            init(None, timeout=bad)
        assert caught.value.code is TxnErrorCode.INVALID_TRANSACTION_TIMEOUT
        assert caught.value.api_error().status == 400
    assert isinstance(init(None, timeout=MAX_TIMEOUT), Ready)
    with pytest.raises(TxnError, match="outside"):  # before anything else, even on an Ongoing id
        init(meta(TxnStatus.ONGOING), timeout=0)


def test_adding_nothing_or_what_is_there_writes_nothing() -> None:
    assert add(meta(TxnStatus.EMPTY), EPOCH) is None
    assert add(meta(TxnStatus.ONGOING), EPOCH, ("t", 0)) is None
    grown = add(meta(TxnStatus.ONGOING), EPOCH, ("t", 0), ("__consumer_offsets", 3))
    assert grown is not None
    assert grown.partitions == {("t", 0), ("__consumer_offsets", 3)}
    assert grown.start_ms == 1_000  # the clock runs from the first add


def test_errors_as_api_errors() -> None:
    cases = {
        TxnErrorCode.PRODUCER_FENCED: (409, False),
        TxnErrorCode.INVALID_TXN_STATE: (409, False),
        TxnErrorCode.INVALID_PRODUCER_ID_MAPPING: (409, False),
        TxnErrorCode.CONCURRENT_TRANSACTIONS: (409, True),
        TxnErrorCode.INVALID_TRANSACTION_TIMEOUT: (400, False),
        TxnErrorCode.TRANSACTIONAL_ID_NOT_FOUND: (404, False),
    }
    for code, (status, retriable) in cases.items():
        api = TxnError(code, "what happened").api_error()
        assert (api.status, api.code, api.retriable, api.message) == (status, code.value, retriable, "what happened")


def test_require_known() -> None:
    assert require_known(meta(), TID) == meta()
    for gone in (None, meta(TxnStatus.DEAD)):
        with pytest.raises(TxnError) as caught:
            require_known(gone, TID)
        assert caught.value.code is TxnErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        assert TID in caught.value.message


# ---------------------------------------------------------------------- Jepsen / Bufstream


def _committed_then_next_started(bump: bool) -> tuple[TxnMetadata, int]:
    """Transaction N committed (its EndTxn answered, markers written), N+1 Ongoing; and N's epoch."""
    ready = init(None)
    assert isinstance(ready, Ready)
    state = ready.metadata
    n_epoch = state.producer_epoch
    started = add(state, n_epoch, ("t", 0), pid=FRESH)
    outcome = end(started, n_epoch, commit=True, bump=bump, pid=FRESH)
    assert isinstance(outcome, Prepare)
    state = complete(outcome.metadata, now_ms=NOW)
    _pid, next_epoch = client_identity(outcome.metadata)
    following = add(state, next_epoch, ("t", 1), pid=FRESH)
    assert following is not None
    assert following.status is TxnStatus.ONGOING
    return following, n_epoch


@pytest.mark.parametrize("commit", [True, False])
def test_a_late_end_of_the_previous_transaction_cannot_decide_the_next_under_tv2(commit: bool) -> None:
    state, n_epoch = _committed_then_next_started(bump=True)
    assert state.producer_epoch == n_epoch + 1
    with pytest.raises(TxnError) as caught:
        end(state, n_epoch, commit=commit, bump=True, pid=FRESH)
    assert caught.value.code is TxnErrorCode.PRODUCER_FENCED
    # Its own end still decides it, at the next epoch.
    outcome = end(state, n_epoch + 1, commit=True, bump=True, pid=FRESH)
    assert isinstance(outcome, Prepare)
    assert markers_for(outcome.metadata) == Markers(True, FRESH, n_epoch + 2, (("t", 1),))


def test_a_late_end_before_the_next_transaction_is_a_retry_or_refused_under_tv2() -> None:
    ready = init(None)
    assert isinstance(ready, Ready)
    state = add(ready.metadata, 0, ("t", 0), pid=FRESH)
    prepared = end(state, 0, commit=True, bump=True, pid=FRESH)
    assert isinstance(prepared, Prepare)
    done = complete(prepared.metadata, now_ms=NOW)
    again = end(done, 0, commit=True, bump=True, pid=FRESH)
    assert isinstance(again, AlreadyDone)
    assert client_identity(again.metadata) == (FRESH, 1)  # the same answer as the first time
    assert summary(lambda: end(done, 0, commit=False, bump=True, pid=FRESH)) == ITS  # never the other result


@pytest.mark.parametrize("commit", [True, False])
def test_under_tv1_a_late_end_decides_the_next_transaction_as_in_kafka(commit: bool) -> None:
    """Kafka's TV1 hole, kept for TV1 clients (they cannot tell the two transactions apart): the late EndTxn
    of N carries the epoch N+1 runs at, so it commits or aborts N+1. Only TV2 (``bump``) closes it."""
    state, n_epoch = _committed_then_next_started(bump=False)
    assert state.producer_epoch == n_epoch
    outcome = end(state, n_epoch, commit=commit, bump=False, pid=FRESH)
    assert isinstance(outcome, Prepare)
    assert outcome.metadata.status is (TxnStatus.PREPARE_COMMIT if commit else TxnStatus.PREPARE_ABORT)
    assert markers_for(outcome.metadata).partitions == (("t", 1),)  # N+1's partition, decided by N's request


# ---------------------------------------------------------------------- epoch exhaustion


def test_init_rotates_an_exhausted_epoch() -> None:
    state = meta(TxnStatus.COMPLETE_COMMIT, producer_epoch=EXHAUSTED_EPOCH - 1, last_producer_epoch=-1)
    bumped = init(state)
    assert isinstance(bumped, Ready)
    assert (bumped.metadata.producer_id, bumped.metadata.producer_epoch) == (PID, EXHAUSTED_EPOCH)
    rotated = init(bumped.metadata)
    assert isinstance(rotated, Ready)
    m = rotated.metadata
    assert (m.producer_id, m.producer_epoch, m.previous_producer_id, m.last_producer_epoch) == (FRESH, 0, PID, -1)
    # The old instance cannot resume from the rotated-away id: a new instance took over.
    assert summary(lambda: init(m, expected=(PID, EXHAUSTED_EPOCH))) == PF


def test_a_kip360_resume_from_an_exhausted_epoch_rotates_and_its_retry_gets_the_same_answer() -> None:
    state = meta(TxnStatus.EMPTY, producer_epoch=EXHAUSTED_EPOCH)
    rotated = init(state, expected=(PID, EXHAUSTED_EPOCH))
    assert isinstance(rotated, Ready)
    m = rotated.metadata
    assert (m.producer_id, m.producer_epoch, m.last_producer_epoch, m.previous_producer_id) == (
        FRESH,
        0,
        EXHAUSTED_EPOCH,
        PID,
    )
    retry = init(m, expected=(PID, EXHAUSTED_EPOCH))  # the answer was lost
    assert isinstance(retry, Ready)
    assert (retry.metadata.producer_id, retry.metadata.producer_epoch) == (FRESH, 0)
    assert summary(lambda: init(m, expected=(PID, EXHAUSTED_EPOCH - 1))) == PF  # not exhausted: not that retry


def test_a_tv2_end_from_an_exhausted_epoch_rotates_at_complete() -> None:
    state = meta(TxnStatus.ONGOING, producer_epoch=EXHAUSTED_EPOCH)
    outcome = end(state, EXHAUSTED_EPOCH, commit=True, bump=True, fresh=FRESH)
    assert isinstance(outcome, Prepare)
    prepared = outcome.metadata
    assert (prepared.producer_id, prepared.producer_epoch, prepared.next_producer_id) == (PID, MAX_EPOCH, FRESH)
    assert client_identity(prepared) == (FRESH, 0)  # EndTxn v5 answers the new id
    assert markers_for(prepared) == Markers(True, PID, MAX_EPOCH, (("t", 0),))  # markers close the old id's data
    done = complete(prepared, now_ms=NOW)
    assert (done.producer_id, done.producer_epoch, done.previous_producer_id, done.next_producer_id) == (
        FRESH,
        0,
        PID,
        -1,
    )
    # A retry of that end names the old id at its exhausted epoch.
    retry = end(done, EXHAUSTED_EPOCH, commit=True, bump=True, fresh=99)
    assert isinstance(retry, AlreadyDone)
    assert client_identity(retry.metadata) == (FRESH, 0)
    assert summary(lambda: end(done, EXHAUSTED_EPOCH, commit=False, bump=True)) == ITS
    assert summary(lambda: end(done, EXHAUSTED_EPOCH - 1, commit=True, bump=True)) == MAPPING
    assert summary(lambda: end(done, EXHAUSTED_EPOCH, commit=True, bump=False)) == MAPPING  # TV1 knows no rotation
    # The next transaction runs on the new id.
    assert add(done, 0, ("t", 2), pid=FRESH) is not None


def test_a_fence_from_an_exhausted_epoch_rotates_at_complete() -> None:
    fenced = fence_and_abort(
        meta(TxnStatus.ONGOING, producer_epoch=EXHAUSTED_EPOCH), now_ms=NOW, fresh_producer_id=FRESH
    )
    assert (fenced.producer_epoch, fenced.next_producer_id, fenced.last_producer_epoch) == (MAX_EPOCH, FRESH, -1)
    done = complete(fenced, now_ms=NOW)
    assert (done.status, done.producer_id, done.producer_epoch) == (TxnStatus.COMPLETE_ABORT, FRESH, 0)
    assert summary(lambda: init(done, expected=(PID, EXHAUSTED_EPOCH))) == PF  # fenced: no resume


# ---------------------------------------------------------------------- timeouts and expiration


def test_an_open_transaction_times_out_from_its_first_add_and_is_fenced() -> None:
    ready = init(None, now=0, timeout=1_000)
    assert isinstance(ready, Ready)
    assert not timed_out(ready.metadata, now_ms=10_000)  # no transaction: no clock
    state = add(ready.metadata, 0, ("t", 0), pid=FRESH, now=100)
    assert state is not None
    assert not timed_out(state, now_ms=1_100)
    assert timed_out(state, now_ms=1_101)
    fenced = fence_and_abort(state, now_ms=1_101, fresh_producer_id=FRESH)
    assert (fenced.status, fenced.producer_epoch, fenced.last_producer_epoch) == (TxnStatus.PREPARE_ABORT, 1, -1)
    assert markers_for(fenced) == Markers(False, FRESH, 1, (("t", 0),))
    # The timed-out producer is fenced everywhere, with every kind of request.
    assert summary(lambda: end(fenced, 0, commit=True, bump=False, pid=FRESH)) == PF
    assert summary(lambda: end(fenced, 0, commit=False, bump=True, pid=FRESH)) == PF
    done = complete(fenced, now_ms=1_200)
    assert summary(lambda: add(done, 0, ("t", 0), pid=FRESH)) == PF
    assert summary(lambda: init(done, expected=(FRESH, 0))) == PF
    # A new instance takes over at the next epoch.
    again = init(done)
    assert isinstance(again, Ready)
    assert again.metadata.producer_epoch == 2


def test_init_on_an_open_transaction_aborts_it_first() -> None:
    state = meta(TxnStatus.ONGOING, partitions=frozenset({("t", 0), ("__consumer_offsets", 1)}))
    outcome = init(state)
    assert isinstance(outcome, AbortFirst)
    prepared = outcome.metadata
    assert markers_for(prepared) == Markers(False, PID, EPOCH + 1, (("__consumer_offsets", 1), ("t", 0)))
    assert summary(lambda: init(prepared)) == CONC  # while the markers are written
    retried = init(complete(prepared, now_ms=NOW))
    assert isinstance(retried, Ready)
    assert (retried.metadata.producer_epoch, retried.metadata.status) == (EPOCH + 2, TxnStatus.EMPTY)


# ---------------------------------------------------------------------- named producers: the lease


def test_a_live_lease_refuses_a_new_instance_and_tells_how_long_it_lasts() -> None:
    held = leased(meta(), lease_ms=30_000, now_ms=NOW)
    assert (held.lease_epoch, held.lease_until_ms) == (EPOCH, NOW + 30_000)
    with pytest.raises(TxnError) as busy:
        init(held, now=NOW + 10_000)
    assert busy.value.code is TxnErrorCode.PRODUCER_BUSY and busy.value.retriable
    assert busy.value.retry_after_ms == 20_000
    error = busy.value.api_error()
    assert (error.status, error.code, error.details, error.headers) == (
        409,
        "PRODUCER_BUSY",
        {"retry_after_ms": 20_000},
        {"Retry-After": "20"},
    )
    # The holder itself may resume (KIP-360): the lease is its own
    assert isinstance(init(held, expected=(PID, EPOCH), now=NOW + 10_000), Ready)


def test_a_lapsed_or_released_lease_lets_the_next_instance_fence_the_holder() -> None:
    held = leased(meta(), lease_ms=30_000, now_ms=NOW)
    taken = init(held, now=NOW + 30_000)
    assert isinstance(taken, Ready)
    assert taken.metadata.producer_epoch == EPOCH + 1
    assert lease_left_ms(taken.metadata, now_ms=NOW + 30_000) == 0  # the caller gives the new one its lease
    released = renew_lease(held, producer_id=PID, producer_epoch=EPOCH, lease_ms=0, now_ms=NOW + 1)
    assert lease_left_ms(released, now_ms=NOW + 1) == 0
    assert isinstance(init(released, now=NOW + 2), Ready)


def test_a_renewal_extends_the_holders_lease_and_fences_anyone_else() -> None:
    held = leased(meta(), lease_ms=30_000, now_ms=NOW)
    renewed = renew_lease(held, producer_id=PID, producer_epoch=EPOCH, lease_ms=30_000, now_ms=NOW + 20_000)
    assert lease_left_ms(renewed, now_ms=NOW + 40_000) == 10_000
    assert renewed.updated_ms == NOW + 20_000  # a renewed id never expires
    assert summary(lambda: renew_lease(held, producer_id=PID, producer_epoch=EPOCH - 1, lease_ms=1, now_ms=NOW)) == PF
    assert summary(lambda: renew_lease(held, producer_id=PID + 1, producer_epoch=EPOCH, lease_ms=1, now_ms=NOW)) == (
        MAPPING
    )
    assert summary(lambda: renew_lease(None, producer_id=PID, producer_epoch=0, lease_ms=1, now_ms=NOW)) == MAPPING


def test_a_fence_ends_the_lease_and_the_holders_own_bump_carries_it() -> None:
    held = leased(meta(TxnStatus.ONGOING), lease_ms=30_000, now_ms=NOW)
    fenced = fence_and_abort(held, now_ms=NOW, fresh_producer_id=FRESH)  # a timed-out transaction
    assert lease_left_ms(fenced, now_ms=NOW) == 0
    assert isinstance(init(complete(fenced, now_ms=NOW), now=NOW), Ready)  # the fenced holder may claim again
    bumped = end_transaction(
        held, producer_id=PID, producer_epoch=EPOCH, commit=True, bump=True, now_ms=NOW, fresh_producer_id=-1
    )
    assert isinstance(bumped, Prepare)
    assert lease_left_ms(complete(bumped.metadata, now_ms=NOW), now_ms=NOW) == 30_000
    rotating = leased(meta(TxnStatus.ONGOING, producer_epoch=EXHAUSTED_EPOCH), lease_ms=30_000, now_ms=NOW)
    rotated = end_transaction(
        rotating,
        producer_id=PID,
        producer_epoch=EXHAUSTED_EPOCH,
        commit=True,
        bump=True,
        now_ms=NOW,
        fresh_producer_id=FRESH,
    )
    assert isinstance(rotated, Prepare)
    done = complete(rotated.metadata, now_ms=NOW)
    assert (done.producer_id, done.producer_epoch, lease_left_ms(done, now_ms=NOW)) == (FRESH, 0, 30_000)


def test_a_lease_survives_the_state_record() -> None:
    held = leased(meta(), lease_ms=30_000, now_ms=NOW)
    key, value = records.state_record(held)
    assert records.decode(key, value)[1] == dataclasses.replace(held, last_producer_epoch=-1)


def test_expiration_only_of_idle_settled_ids() -> None:
    for status in SETTLED:
        state = meta(status, updated_ms=1_000)
        assert not expired(state, now_ms=11_000, expiration_ms=10_000)
        assert expired(state, now_ms=11_001, expiration_ms=10_000)
    for status in (TxnStatus.ONGOING, *PREPARED):
        assert not expired(meta(status, updated_ms=0), now_ms=10**12, expiration_ms=1)


def test_complete_and_markers_need_a_prepared_state() -> None:
    for status in (TxnStatus.EMPTY, TxnStatus.ONGOING, *COMPLETED):
        with pytest.raises(ValueError, match="nothing to complete"):
            complete(meta(status), now_ms=NOW)
        with pytest.raises(ValueError, match="markers"):
            markers_for(meta(status))
    with pytest.raises(ValueError, match="no open transaction"):
        fence_and_abort(meta(TxnStatus.EMPTY), now_ms=NOW, fresh_producer_id=FRESH)


# ---------------------------------------------------------------------- random sequences


class Coordinator(RuleBasedStateMachine):
    """One transactional id driven by requests from every identity it ever had (current, one before, stale,
    rotated-away), TV1 and TV2 ends, completions, timeouts and coordinator reloads (the fold of its record)."""

    def __init__(self) -> None:
        super().__init__()
        self.state: TxnMetadata | None = None
        self.now = 0
        self.next_pid = 1_000
        self.seen: set[tuple[int, int]] = set()  # every (pid, epoch) the id has held
        self.max_epoch: dict[int, int] = {}

    # -------------------------------------------------------------- helpers

    def fresh(self) -> int:
        self.next_pid += 1
        return self.next_pid

    def tick(self) -> int:
        self.now += 7
        return self.now

    def identity(self, data: st.DataObject) -> tuple[int, int]:
        if self.state is None:
            return 1, 0
        pid, epoch = self.state.producer_id, self.state.producer_epoch
        which = data.draw(st.sampled_from(["current"] * 4 + ["retry", "next", "rotated", "seen"]))
        if which == "retry":
            return pid, epoch - 1
        if which == "next":
            return pid, epoch + 1
        if which == "rotated" and self.state.previous_producer_id >= 0:
            return self.state.previous_producer_id, EXHAUSTED_EPOCH
        if which == "seen":
            return data.draw(st.sampled_from(sorted(self.seen)))
        return pid, epoch

    def move(self, new: TxnMetadata, *, bump: bool = False) -> None:
        old = self.state
        if old is not None and new.status in PREPARED and old.status not in PREPARED:
            # Prepare* only from Ongoing, or (TV2) an empty abort from a settled state.
            assert old.status is TxnStatus.ONGOING or (
                bump and old.status in SETTLED and new.status is TxnStatus.PREPARE_ABORT
            ), (old.status, new.status)
        if old is not None and old.status in PREPARED and new.status is not old.status:
            # A decided transaction only completes, with its own result.
            expected = {
                TxnStatus.PREPARE_COMMIT: TxnStatus.COMPLETE_COMMIT,
                TxnStatus.PREPARE_ABORT: TxnStatus.COMPLETE_ABORT,
            }[old.status]
            assert new.status is expected, (old.status, new.status)
        if old is not None and old.producer_id == new.producer_id:
            assert new.producer_epoch >= old.producer_epoch
        previous = self.max_epoch.get(new.producer_id, -1)
        assert new.producer_epoch >= previous, "an epoch went backwards for its producer id"
        self.max_epoch[new.producer_id] = new.producer_epoch
        self.seen.add((new.producer_id, new.producer_epoch))
        self.state = new

    @staticmethod
    def attempt(run: Callable[[], object]) -> object:
        try:
            return run()
        except TxnError as exc:
            return exc

    # -------------------------------------------------------------- rules

    @initialize(epoch=st.sampled_from([0, 5, EXHAUSTED_EPOCH - 3]))
    def start(self, epoch: int) -> None:
        if epoch:
            self.move(meta(TxnStatus.EMPTY, producer_id=1, producer_epoch=epoch, last_producer_epoch=-1))

    @rule(data=st.data(), resume=st.booleans())
    def do_init(self, data: st.DataObject, resume: bool) -> None:
        expected = self.identity(data) if resume else None
        out = self.attempt(
            lambda: init_producer(
                self.state,
                transactional_id=TID,
                tenant="acme",
                timeout_ms=1_000,
                max_timeout_ms=MAX_TIMEOUT,
                now_ms=self.tick(),
                fresh_producer_id=self.fresh(),
                expected=expected,
            )
        )
        if isinstance(out, Ready | AbortFirst):
            self.move(out.metadata)

    @rule(data=st.data(), partition=st.integers(0, 3))
    def do_add(self, data: st.DataObject, partition: int) -> None:
        pid, epoch = self.identity(data)
        out = self.attempt(
            lambda: add_partitions(
                self.state, producer_id=pid, producer_epoch=epoch, partitions=[("t", partition)], now_ms=self.tick()
            )
        )
        if isinstance(out, TxnMetadata):
            assert self.state is not None
            assert (pid, epoch) == (self.state.producer_id, self.state.producer_epoch)
            self.move(out)

    @rule(data=st.data())
    def do_verify(self, data: st.DataObject) -> None:
        pid, epoch = self.identity(data)
        before = self.state
        out = self.attempt(
            lambda: verify_partitions(self.state, producer_id=pid, producer_epoch=epoch, partitions=[("t", 0)])
        )
        assert self.state is before
        if isinstance(out, dict):
            assert out[("t", 0)] == (
                before is not None and before.status is TxnStatus.ONGOING and ("t", 0) in before.partitions
            )

    @rule(data=st.data(), commit=st.booleans(), bump=st.booleans())
    def do_end(self, data: st.DataObject, commit: bool, bump: bool) -> None:
        pid, epoch = self.identity(data)
        before = self.state
        out = self.attempt(
            lambda: end_transaction(
                self.state,
                producer_id=pid,
                producer_epoch=epoch,
                commit=commit,
                bump=bump,
                now_ms=self.tick(),
                fresh_producer_id=self.fresh(),
            )
        )
        if isinstance(out, Prepare):
            # Only the identity the id holds decides a transaction: never a late request of an earlier one
            # (under TV1 that earlier one shares the identity, which is Kafka's hole).
            assert before is not None
            assert (pid, epoch) == (before.producer_id, before.producer_epoch)
            self.move(out.metadata, bump=bump)
            assert (out.metadata.status is TxnStatus.PREPARE_COMMIT) == commit
        elif isinstance(out, AlreadyDone):
            assert out.metadata is before
            assert before is not None
            assert before.status is (TxnStatus.COMPLETE_COMMIT if commit else TxnStatus.COMPLETE_ABORT)

    @rule(commit=st.booleans(), bump=st.booleans(), partition=st.integers(0, 3))
    def whole_transaction(self, commit: bool, bump: bool, partition: int) -> None:
        """A well-behaved producer's add and end at the current identity (so the random requests above meet
        every state often)."""
        if self.state is None or self.state.status not in SETTLED | {TxnStatus.ONGOING}:
            return
        pid, epoch = self.state.producer_id, self.state.producer_epoch
        added = add_partitions(
            self.state, producer_id=pid, producer_epoch=epoch, partitions=[("t", partition)], now_ms=self.tick()
        )
        if added is not None:
            self.move(added)
        out = end_transaction(
            self.state,
            producer_id=pid,
            producer_epoch=epoch,
            commit=commit,
            bump=bump,
            now_ms=self.tick(),
            fresh_producer_id=self.fresh(),
        )
        assert isinstance(out, Prepare)
        self.move(out.metadata, bump=bump)

    @rule()
    def do_complete(self) -> None:
        if self.state is not None and self.state.status in PREPARED:
            commit, _pid, _epoch, _parts = markers_for(self.state)
            self.move(complete(self.state, now_ms=self.tick()))
            assert (self.state.status is TxnStatus.COMPLETE_COMMIT) == commit

    @rule()
    def time_out(self) -> None:
        if self.state is not None and self.state.status is TxnStatus.ONGOING:
            self.now += self.state.timeout_ms + 1
            assert timed_out(self.state, now_ms=self.now)
            self.move(fence_and_abort(self.state, now_ms=self.tick(), fresh_producer_id=self.fresh()))

    @rule()
    def reload(self) -> None:
        """The coordinator moves: the state is what its record folds back to."""
        if self.state is not None:
            folded = records.fold([records.state_record(self.state)])
            (back,) = folded.values()
            assert back == dataclasses.replace(self.state, last_producer_epoch=-1)
            self.state = back

    # -------------------------------------------------------------- invariants

    @invariant()
    def settled_shapes(self) -> None:
        state = self.state
        if state is None:
            return
        if state.status in COMPLETED or state.status is TxnStatus.EMPTY:
            assert state.partitions == frozenset()
            assert state.start_ms == -1
            assert state.next_producer_id == -1
        if state.status not in PREPARED:
            assert 0 <= state.producer_epoch <= EXHAUSTED_EPOCH  # one fence always left
        else:
            assert state.producer_epoch <= MAX_EPOCH


Coordinator.TestCase.settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_random_request_sequences = Coordinator.TestCase
