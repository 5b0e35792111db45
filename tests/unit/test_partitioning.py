"""Key → slot → partition (Swift style) and the producer's accumulator: pure logic."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from talos import SLOTS, RecordData, partition_for_key, slot_for_key, slot_range
from talos._accumulator import Accumulator, choose_partition


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=4096))
def test_a_key_lands_in_the_partition_whose_slot_range_holds_its_slot(key: bytes, partitions: int) -> None:
    partition = partition_for_key(key, partitions)
    start, end = slot_range(partition, partitions)
    assert 0 <= partition < partitions
    assert start <= slot_for_key(key) < end


@given(st.integers(min_value=1, max_value=4096))
def test_slot_ranges_tile_all_slots(partitions: int) -> None:
    ranges = [slot_range(p, partitions) for p in range(partitions)]
    assert ranges[0][0] == 0
    assert ranges[-1][1] == SLOTS
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))


def test_accumulator_batches_by_size_and_linger_one_partition_at_a_time() -> None:
    acc: Accumulator[int] = Accumulator(batch_bytes=120, linger_s=1.0)
    for i in range(3):  # 40 bytes + 16 of overhead each: two fit in a batch, the third starts the next
        acc.add("t", 0, RecordData(b"x" * 40), now=0.0).futures.append(i)
    acc.add("t", 1, RecordData(b"y"), now=0.0).futures.append(9)
    ready = acc.ready(0.1, flushing=False)  # partition 0 has a closed batch; partition 1 lingers
    assert [(b.partition, b.futures) for b in ready] == [(0, [0, 1])]
    acc.add("t", 0, RecordData(b"x" * 40), now=0.2).futures.append(3)
    assert acc.ready(0.2, flushing=False) == []  # partition 0 is busy until done()
    acc.done(ready[0])
    assert acc.ready(0.3, flushing=False) == []  # [2, 3] is neither full nor old enough yet
    assert [(b.partition, b.futures) for b in acc.ready(1.5, flushing=False)] == [(0, [2, 3]), (1, [9])]
    assert acc.next_deadline(2.0) is None
    assert not acc.empty


def test_flush_makes_everything_ready() -> None:
    acc: Accumulator[int] = Accumulator(batch_bytes=10_000, linger_s=60.0)
    acc.add("t", 0, RecordData(b"a"), now=0.0).futures.append(1)
    assert acc.ready(0.0, flushing=False) == []
    assert acc.next_deadline(0.0) == pytest.approx(60.0)
    (batch,) = acc.ready(0.0, flushing=True)
    acc.done(batch)
    assert acc.empty
    assert acc.buffered_bytes == 0


def test_choose_partition() -> None:
    sticky: dict[str, int] = {}
    assert choose_partition(None, 2, 4, sticky, "t") == 2
    with pytest.raises(ValueError, match=r"partitions 0\.\.3"):
        choose_partition(None, 4, 4, sticky, "t")
    assert choose_partition(b"k", None, 4, sticky, "t") == partition_for_key(b"k", 4)
    first = choose_partition(None, None, 4, sticky, "t")
    assert choose_partition(None, None, 4, sticky, "t") == first  # sticky until the batch goes
    del sticky["t"]
    assert choose_partition(None, None, 4, sticky, "t") == (first + 1) % 4
