"""Sticky assignment: balanced, and a change moves no more partitions than the least any balanced
assignment could (checked against a brute-force bound, independent of the implementation)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.groups.assignment import assign, moved
from tests.helpers import least_moves


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[int, list[str], dict[tuple[str, int], str], list[str]]:
    n = draw(st.integers(1, 24))
    before = draw(st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=6, unique=True))
    after = draw(st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=6, unique=True))
    current = {("t", p): draw(st.sampled_from(before)) for p in range(n)}
    return n, sorted(before), current, sorted(after)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_a_change_moves_the_fewest_partitions_and_stays_balanced(
    scenario: tuple[int, list[str], dict[tuple[str, int], str], list[str]],
) -> None:
    n, _before, current, after = scenario
    result = assign({"t": n}, {m: ["t"] for m in after}, current)
    assert sorted(result) == [("t", p) for p in range(n)]
    counts = [sum(1 for owner in result.values() if owner == m) for m in after]
    assert max(counts) - min(counts) <= 1
    assert moved(current, result) == least_moves(n, after, current, "t")


def test_a_member_leaving_moves_only_its_partitions() -> None:
    members = {m: ["t"] for m in "abc"}
    first = assign({"t": 12}, members, {})
    second = assign({"t": 12}, {"a": ["t"], "b": ["t"]}, first)
    gone = [tp for tp, owner in first.items() if owner == "c"]
    assert moved(first, second) == len(gone) == 4
    assert all(second[tp] == first[tp] for tp in first if first[tp] != "c")


def test_a_member_joining_takes_only_its_share() -> None:
    first = assign({"t": 12}, {"a": ["t"], "b": ["t"]}, {})
    second = assign({"t": 12}, {m: ["t"] for m in "abc"}, first)
    assert moved(first, second) == 4
    assert sum(1 for owner in second.values() if owner == "c") == 4


def test_each_topic_goes_only_to_its_subscribers_and_extras_spread_across_topics() -> None:
    subscriptions = {"a": ["x", "y", "z"], "b": ["x", "y", "z"], "c": ["z"]}
    result = assign({"x": 1, "y": 1, "z": 3}, subscriptions, {})
    assert result[("x", 0)] != result[("y", 0)]  # the two single partitions go to different members
    assert {result[("z", p)] for p in range(3)} == {"a", "b", "c"}


def test_departed_members_and_topics_in_current_are_ignored() -> None:
    result = assign({"t": 2}, {"a": ["t"]}, {("t", 0): "gone", ("old", 0): "a"})
    assert result == {("t", 0): "a", ("t", 1): "a"}
