"""The ring, Talos's traffic weighting and delayed reassignment: pure logic, property-tested."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hashring import Ring, imbalance, next_members, partition_key, rebalance, worth_publishing

KEYS = [partition_key("orders", p) for p in range(1000)]
NODES = [f"server-{i}" for i in range(10)]


def zipf_traffic(seed: int, exponent: float = 0.8) -> dict[str, float]:
    """Zipf-skewed traffic over the 1000 partitions, heaviest ranks shuffled across them."""
    ranks = list(range(1, len(KEYS) + 1))
    random.Random(seed).shuffle(ranks)
    return {key: 1.0 / rank**exponent for key, rank in zip(KEYS, ranks, strict=True)}


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_rebalance_brings_zipf_traffic_under_1_10(seed: int) -> None:
    traffic = zipf_traffic(seed)
    plain = Ring.of(NODES)
    result = rebalance(plain, traffic)
    print(
        f"seed {seed}: plain ring max/mean {result.before:.3f} -> weighted {result.after:.3f}, "
        f"{len(result.moved)} of 1000 partitions move"
    )
    assert result.before > 1.3  # the plain ring is badly skewed under this traffic
    assert result.after <= 1.10
    assert imbalance(result.ring, traffic).ratio == pytest.approx(result.after)
    assert result.ring.version == plain.version + 1
    assert worth_publishing(result)


def test_adding_a_node_moves_at_most_1_25x_the_ideal_share() -> None:
    ring = Ring.of(NODES)
    for new in ("server-10", "server-11", "server-12", "late-joiner"):
        grown = Ring.of([*NODES, new])
        moved = [k for k in KEYS if ring.owner(k) != grown.owner(k)]
        assert all(grown.owner(k) == new for k in moved)  # keys only move to the new node
        assert len(moved) <= 1.25 * len(KEYS) / (len(NODES) + 1), (new, len(moved))


def test_removing_a_node_moves_at_most_1_25x_the_ideal_share() -> None:
    ring = Ring.of(NODES)
    for gone in NODES:
        shrunk = Ring.of([n for n in NODES if n != gone])
        moved = [k for k in KEYS if ring.owner(k) != shrunk.owner(k)]
        assert all(ring.owner(k) == gone for k in moved)  # only the removed node's keys move
        assert len(moved) <= 1.25 * len(KEYS) / len(NODES), (gone, len(moved))


members = st.dictionaries(st.sampled_from([f"s{i}" for i in range(8)]), st.integers(4, 300), min_size=1, max_size=6)
traffics = st.dictionaries(st.sampled_from(KEYS[:80]), st.floats(0.0, 1000.0), min_size=1, max_size=80)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(members, traffics)
def test_rebalance_never_makes_balance_worse(counts: dict[str, int], traffic: dict[str, float]) -> None:
    ring = Ring(counts, version=7)
    result = rebalance(ring, traffic, max_rounds=5, starts=(50,))
    assert result.after <= result.before + 1e-9
    assert result.ring.version == 8
    assert set(result.ring.members) == set(counts)
    assert all(4 <= count <= 2048 or count == counts[m] for m, count in result.ring.members.items())
    assert result.moved == {k for k in traffic if ring.owner(k) != result.ring.owner(k)}


@given(members, st.lists(st.sampled_from(KEYS), max_size=50))
def test_every_server_builds_the_same_ring_from_its_json(counts: dict[str, int], keys: list[str]) -> None:
    ring = Ring(counts, version=3)
    copy = Ring.from_json(ring.to_json())
    assert copy == ring
    assert copy.place(keys) == ring.place(keys)


def test_ring_validation() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Ring({"a": 0})
    with pytest.raises(LookupError):
        Ring({}).owner("x")
    with pytest.raises(ValueError, match="version"):
        Ring.from_json({"members": [], "version": "x"})


def test_worth_publishing_needs_a_real_gain() -> None:
    ring = Ring.of(NODES)
    even = {k: 1.0 for k in KEYS}
    result = rebalance(ring, even, threshold=10.0)  # already under the threshold: nothing to gain
    assert not worth_publishing(result)
    assert result.moved == frozenset()


def test_a_restart_inside_the_reassign_delay_moves_nothing() -> None:
    ring = Ring.of(["a", "b", "c"], version=4)
    # "b" lost its registration 20 s ago (restarting); the delay is 30 s
    change = next_members(ring, {"a": 0.0, "c": 0.0}, {"b": 80.0}, now=100.0, join_delay=5, reassign_delay=30)
    assert not change.changed
    assert change.members == ring.members
    assert change.next_check_in == pytest.approx(10.0)
    # it came back before the delay ran out: still nothing to do, nothing pending
    back = next_members(ring, {"a": 0.0, "b": 105.0, "c": 0.0}, {}, now=106.0, join_delay=5, reassign_delay=30)
    assert not back.changed
    assert back.next_check_in is None


def test_a_member_missing_past_the_delay_leaves_and_a_new_one_joins_after_join_delay() -> None:
    ring = Ring.of(["a", "b"])
    change = next_members(ring, {"a": 0.0, "d": 98.0}, {"b": 60.0}, now=100.0, join_delay=5, reassign_delay=30)
    assert change.removed == {"b"}
    assert change.added == frozenset()  # "d" has been up 2 s of the 5 it needs
    assert change.next_check_in == pytest.approx(3.0)
    later = next_members(ring, {"a": 0.0, "d": 98.0}, {"b": 60.0}, now=103.0, join_delay=5, reassign_delay=30)
    assert later.added == {"d"}
    assert set(later.members) == {"a", "d"}


def test_a_member_that_stepped_down_leaves_at_once_and_rejoins_join_delay_after_it_can_write() -> None:
    ring = Ring.of(["a", "b", "c"])
    # "b" is registered, but stepped down (cannot write): out now, no reassign_delay
    change = next_members(
        ring, {"a": 0.0, "c": 0.0}, {}, now=100.0, join_delay=5, reassign_delay=30, stepped_down={"b"}
    )
    assert change.removed == {"b"}
    assert set(change.members) == {"a", "c"}
    out = Ring(change.members, ring.version + 1)
    # it can write again since t=101 (its registration's writable_since): back once that is join_delay old
    early = next_members(out, {"a": 0.0, "b": 101.0, "c": 0.0}, {}, now=104.0, join_delay=5, reassign_delay=30)
    assert not early.changed
    back = next_members(out, {"a": 0.0, "b": 101.0, "c": 0.0}, {}, now=106.0, join_delay=5, reassign_delay=30)
    assert back.added == {"b"}


def test_the_last_member_never_steps_down_out_of_the_ring() -> None:
    ring = Ring.of(["a", "b"])
    change = next_members(ring, {}, {}, now=100.0, join_delay=5, reassign_delay=30, stepped_down={"a", "b"})
    assert len(change.members) == 1  # one of them stays: an empty ring serves nothing
    alone = next_members(Ring.of(["a"]), {}, {}, now=100.0, join_delay=5, reassign_delay=30, stepped_down={"a"})
    assert not alone.changed
