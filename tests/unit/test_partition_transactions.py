"""A partition's transactions (``server.partition.transactions``) against a model: random interleavings of
producers' plain and transactional batches and their commit and abort markers. The LSO is the oldest open
transaction's start; below it, Kafka's read-committed filter over ``aborted_between`` gives exactly the
records of committed transactions and plain batches, for any range a reader asks."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from server.partition.transactions import AbortedTransaction, PartitionTransactions


@dataclass(frozen=True)
class Batch:
    producer_id: int
    base_offset: int
    count: int
    transactional: bool
    committed: bool | None  # None: data; True/False: a commit or abort marker (count 1)

    @property
    def offsets(self) -> range:
        return range(self.base_offset, self.base_offset + self.count)


@st.composite
def logs(draw: st.DrawFn) -> list[Batch]:
    out: list[Batch] = []
    offset = 0
    for _ in range(draw(st.integers(0, 40))):
        pid = draw(st.integers(0, 3))
        if draw(st.booleans()):
            count = draw(st.integers(1, 3))
            out.append(Batch(pid, offset, count, draw(st.booleans()), None))
        else:
            count = 1
            out.append(Batch(pid, offset, 1, True, draw(st.booleans())))
        offset += count
    return out


def fed(log: list[Batch]) -> PartitionTransactions:
    state = PartitionTransactions()
    for b in log:
        if b.committed is None:
            state.appended(b.producer_id, b.base_offset, transactional=b.transactional)
        else:
            state.ended(b.producer_id, b.base_offset, committed=b.committed)
    state.durable(log[-1].offsets.stop if log else 0)
    return state


def model(log: list[Batch]) -> tuple[int, set[int], list[AbortedTransaction]]:
    """The LSO, the offsets a read-committed reader must see below it, and the aborted transactions."""
    end = log[-1].offsets.stop if log else 0
    open_: dict[int, list[Batch]] = {}
    visible: set[int] = set()
    aborted = []
    for b in log:
        if b.committed is None and not b.transactional:
            visible.update(b.offsets)
        elif b.committed is None:
            open_.setdefault(b.producer_id, []).append(b)
        else:
            batches = open_.pop(b.producer_id, [])
            if b.committed:
                for data in batches:
                    visible.update(data.offsets)
            elif batches:
                aborted.append(AbortedTransaction(b.base_offset, batches[0].base_offset, b.producer_id))
    lso = min((batches[0].base_offset for batches in open_.values()), default=end)
    return lso, {o for o in visible if o < lso}, sorted(aborted)


def read_committed(log: list[Batch], state: PartitionTransactions, start: int, lso: int) -> set[int]:
    """Kafka's consumer algorithm over the batches of [start, lso), with the aborted list the server gives."""
    pending = sorted(state.aborted_between(start, lso), key=lambda t: t.first_offset)  # Kafka's min-heap
    aborting: set[int] = set()
    seen: set[int] = set()
    for b in log:
        if b.offsets.stop <= start or b.base_offset >= lso:
            continue
        while pending and pending[0].first_offset <= b.offsets.stop - 1:
            aborting.add(pending.pop(0).producer_id)
        if b.committed is not None:
            if not b.committed:
                aborting.discard(b.producer_id)
            continue
        if b.transactional and b.producer_id in aborting:
            continue
        seen.update(o for o in b.offsets if o >= start)
    return seen


@given(logs(), st.integers(0, 130))
def test_the_lso_and_the_aborted_index_give_readers_exactly_the_committed_records(log: list[Batch], cut: int) -> None:
    state = fed(log)
    end = log[-1].offsets.stop if log else 0
    lso, visible, aborted = model(log)
    assert state.last_stable_offset(end) == lso
    assert state.aborted == aborted
    start = min(cut, lso)
    assert read_committed(log, state, start, lso) == {o for o in visible if o >= start}
    assert state.last_stable_offset(min(end, cut)) == min(lso, cut)  # never past the high watermark


@given(logs())
def test_a_state_rebuilt_from_the_log_is_the_same(log: list[Batch]) -> None:
    events = [(b.producer_id, b.base_offset, b.transactional, b.committed) for b in log]
    assert PartitionTransactions.rebuilt(events) == fed(log)


def test_an_abort_for_a_producer_with_nothing_open_here_changes_nothing() -> None:
    state = PartitionTransactions()
    state.ended(5, 0, committed=False)
    state.durable(1)
    assert state.aborted == [] and state.last_stable_offset(1) == 1


def test_a_marker_decides_only_once_durable_and_the_next_transaction_opens_after_it() -> None:
    state = PartitionTransactions()
    state.appended(7, 0, transactional=True)
    state.ended(7, 2, committed=False)  # stored, not flushed: a failed flush would take it back
    state.appended(7, 3, transactional=True)  # the producer's next transaction, right after the marker
    assert state.last_stable_offset(4) == 0 and state.aborted == []
    state.durable(3)
    assert state.aborted == [AbortedTransaction(2, 0, 7)]
    assert state.last_stable_offset(4) == 3 and state.open == {7: 3}


def test_retention_forgets_the_aborted_transactions_that_ended_below_the_start() -> None:
    state = PartitionTransactions()
    for pid, first, marker in [(1, 0, 3), (2, 4, 8), (3, 9, 12)]:
        state.appended(pid, first, transactional=True)
        state.ended(pid, marker, committed=False)
    state.durable(13)
    state.appended(4, 13, transactional=True)
    state.forget_below(8)
    assert [t.producer_id for t in state.aborted] == [2, 3] and state.is_open(4)
    assert [t.producer_id for t in state.aborted_between(9, 13)] == [3]
    assert state.last_stable_offset(20) == 13
