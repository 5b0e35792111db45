"""Offsets of the Spark source: parsing, ranges and the per-trigger cap (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectors.spark.offsets import cap, parse_offsets, ranges

BOUNDS = {"t": {0: (5, 20), 1: (0, 3)}}


def test_parse_offsets_understands_earliest_latest_and_json() -> None:
    assert parse_offsets("earliest", BOUNDS, what="s") == {"t": {"0": 5, "1": 0}}
    assert parse_offsets("latest", BOUNDS, what="s") == {"t": {"0": 20, "1": 3}}
    assert parse_offsets('{"t": {"0": 7, "1": -1}}', BOUNDS, what="s") == {"t": {"0": 7, "1": 3}}
    assert parse_offsets('{"t": {"1": 2}}', BOUNDS, what="s") == {"t": {"0": 5, "1": 2}}  # missing: earliest
    with pytest.raises(ValueError, match="startingOffsets"):
        parse_offsets("yesterday", BOUNDS, what="startingOffsets")
    with pytest.raises(ValueError, match="map partitions"):
        parse_offsets('{"t": 3}', BOUNDS, what="s")


def test_ranges_skip_empty_partitions_and_start_new_ones_at_zero() -> None:
    got = ranges({"t": {"0": 4, "1": 9}}, {"t": {"0": 6, "1": 9, "2": 2}})
    assert [(r.partition, r.start, r.end) for r in got] == [(0, 4, 6), (2, 0, 2)]


@given(
    st.dictionaries(st.integers(0, 7), st.tuples(st.integers(0, 500), st.integers(0, 500)), min_size=1),
    st.integers(1, 300),
)
def test_cap_reads_at_most_the_limit_never_past_latest_and_always_progresses(
    spans: dict[int, tuple[int, int]], limit: int
) -> None:
    start = {"t": {str(p): min(a, b) for p, (a, b) in spans.items()}}
    latest = {"t": {str(p): max(a, b) for p, (a, b) in spans.items()}}
    end = cap(start, latest, limit)
    waiting = sum(r.rows for r in ranges(start, latest))
    taken = sum(r.rows for r in ranges(start, end))
    assert taken == min(waiting, limit)  # the whole budget, or everything there is
    for p in spans:
        assert start["t"][str(p)] <= end["t"][str(p)] <= latest["t"][str(p)]
    assert cap(start, latest, None) == latest
