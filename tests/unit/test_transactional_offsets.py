"""Offsets committed in transactions (``server.groups.offsets.decided_order``): they take effect at their
commit marker, never on abort, stay pending while undecided, and lose to a plain commit written after them."""

from __future__ import annotations

from server.groups.offsets import PendingCommit, commit_record, decided_order, fold, snapshot_record
from server.groups.state import GroupState
from talos import BatchHeader, Record, decode_records, encode_batch, read_header
from talos._codec import TRANSACTIONAL
from talos._control import ControlType, Marker, marker_batch

GROUP = "g"


def encode_batch_at(batch: bytes, offset: int) -> bytes:
    """The batch as the log stores it at ``offset`` (the base offset is outside the CRC)."""
    return offset.to_bytes(8, "big") + batch[8:]


class Log:
    """The offsets partition's batches, as the coordinator reads them back."""

    def __init__(self) -> None:
        self.batches: list[tuple[BatchHeader, list[Record]]] = []
        self.offset = 0

    def add(self, batch: bytes) -> int:
        header = read_header(batch)
        at = self.offset
        stored = encode_batch_at(batch, at)
        self.batches.append((read_header(stored), decode_records(stored)))
        self.offset += header.record_count
        return at

    def commit(self, offset: int, *, pid: int | None = None) -> int:
        record = commit_record(GROUP, {("", "t", 0): offset})
        if pid is None:
            return self.add(encode_batch([record]))
        fields = {"producer_id": pid, "producer_epoch": 0, "base_sequence": -1}
        return self.add(encode_batch([record], attributes=TRANSACTIONAL, **fields))

    def marker(self, pid: int, *, commit: bool) -> None:
        kind = ControlType.COMMIT if commit else ControlType.ABORT
        self.add(marker_batch(Marker(pid, 0, kind, 0), timestamp_ms=0))

    def snapshot(self, offset: int) -> None:
        state = GroupState(GROUP, generation=1, mode=None, offsets={("", "t", 0): offset})
        self.add(encode_batch([snapshot_record(state)]))

    def replayed(self) -> tuple[int | None, dict[int, PendingCommit]]:
        ordered, pending = decided_order(GROUP, self.batches)
        return fold(GROUP, ordered).offsets.get(("", "t", 0)), pending


def test_a_committed_transactions_offsets_take_effect_at_its_marker_even_after_a_snapshot() -> None:
    log = Log()
    log.commit(1)
    log.commit(5, pid=7)
    log.snapshot(1)  # written while the transaction was undecided
    log.marker(7, commit=True)
    assert log.replayed() == (5, {})


def test_an_aborted_transactions_offsets_never_take_effect() -> None:
    log = Log()
    log.commit(1)
    log.commit(5, pid=7)
    log.marker(7, commit=False)
    assert log.replayed() == (1, {})


def test_an_undecided_transactions_offsets_are_pending_from_its_first_batch() -> None:
    log = Log()
    log.commit(1)
    first = log.commit(5, pid=7)
    log.commit(6, pid=7)
    offsets, pending = log.replayed()
    assert offsets == 1
    assert pending == {7: PendingCommit(first, {("", "t", 0): 6})}


def test_a_plain_commit_written_after_a_transactions_wins_whatever_it_decides() -> None:
    log = Log()
    log.commit(5, pid=7)
    log.commit(3)
    log.marker(7, commit=True)
    assert log.replayed() == (3, {})
