"""Idempotent producer state (pure): what a partition does with each batch, and rebuilding it from a log."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from server.errors import ApiError
from server.partition.producers import RETAINED_BATCHES, Append, Duplicate, ProducerStates
from talos import BatchHeader, RecordData, encode_batch, read_header
from talos._accumulator import PendingBatch
from talos._idempotence import Idempotence


def header(pid: int, epoch: int, seq: int, count: int, base_offset: int = 0) -> BatchHeader:
    batch = encode_batch(
        [RecordData(b"x")] * count,
        base_offset=base_offset,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )
    return read_header(batch)


def store(states: ProducerStates, h: BatchHeader, offset: int) -> None:
    assert isinstance(states.check(h), Append)
    states.record(h, offset)


def test_in_order_batches_are_appended_and_a_resend_gets_the_original_offsets() -> None:
    states = ProducerStates()
    store(states, header(7, 0, 0, 3), 100)
    store(states, header(7, 0, 3, 2), 103)
    assert states.check(header(7, 0, 3, 2)) == Duplicate(103)
    assert states.check(header(7, 0, 0, 3)) == Duplicate(100)
    assert isinstance(states.check(header(7, 0, 5, 1)), Append)


def test_a_gap_is_an_error_and_an_old_epoch_is_fenced() -> None:
    states = ProducerStates()
    store(states, header(7, 1, 0, 3), 0)
    with pytest.raises(ApiError) as gap:
        states.check(header(7, 1, 5, 1))
    assert gap.value.code == "OUT_OF_ORDER_SEQUENCE" and gap.value.status == 409
    with pytest.raises(ApiError) as fenced:
        states.check(header(7, 0, 3, 1))
    assert fenced.value.code == "PRODUCER_FENCED"
    with pytest.raises(ApiError):
        states.check(header(7, 2, 4, 1))  # a new epoch starts at sequence 0
    store(states, header(7, 2, 0, 1), 3)
    with pytest.raises(ApiError):
        states.check(header(7, 1, 3, 1))  # and fences the old one from now on


def test_a_resend_older_than_what_is_retained_is_a_duplicate_without_offsets() -> None:
    states = ProducerStates()
    for i in range(RETAINED_BATCHES + 2):
        store(states, header(1, 0, i, 1), i)
    assert states.check(header(1, 0, 0, 1)) == Duplicate(-1)
    assert states.check(header(1, 0, RETAINED_BATCHES + 1, 1)) == Duplicate(RETAINED_BATCHES + 1)


def test_batches_without_a_producer_are_always_appended() -> None:
    states = ProducerStates()
    plain = read_header(encode_batch([RecordData(b"x")]))
    assert isinstance(states.check(plain), Append)
    states.record(plain, 0)
    assert isinstance(states.check(plain), Append) and len(states) == 0


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 5)), min_size=1, max_size=40))
def test_rebuilding_from_the_log_gives_the_same_answers(batches: list[tuple[int, int]]) -> None:
    live = ProducerStates()
    log: list[BatchHeader] = []
    sequences: dict[int, int] = {}
    offset = 0
    for pid, count in batches:
        h = header(pid, 0, sequences.get(pid, 0), count, base_offset=offset)
        store(live, h, offset)
        log.append(h)
        sequences[pid] = sequences.get(pid, 0) + count
        offset += count
    rebuilt = ProducerStates.rebuild(log)
    for h in log[-RETAINED_BATCHES:]:
        assert rebuilt.check(h) == live.check(h)
    for pid, nxt in sequences.items():
        assert isinstance(rebuilt.check(header(pid, 0, nxt, 1)), Append)


def test_the_sdk_keeps_a_batchs_sequence_across_retries() -> None:
    idempotence = Idempotence(5, 2)
    first = PendingBatch[None]("t", 0, 0.0, records=[RecordData(b"a"), RecordData(b"b")])
    second = PendingBatch[None]("t", 0, 0.0, records=[RecordData(b"c")])
    other = PendingBatch[None]("t", 1, 0.0, records=[RecordData(b"d")])
    assert idempotence.fields(first) == {"producer_id": 5, "producer_epoch": 2, "base_sequence": 0}
    assert idempotence.fields(first)["base_sequence"] == 0  # a retry: the same sequence
    assert idempotence.fields(second)["base_sequence"] == 2
    assert idempotence.fields(other)["base_sequence"] == 0  # per partition
    idempotence.restart(3)
    third = PendingBatch[None]("t", 0, 0.0, records=[RecordData(b"e")])
    assert idempotence.fields(third) == {"producer_id": 5, "producer_epoch": 3, "base_sequence": 0}
