"""``talos verify``'s pure analysis: what it calls lost, duplicated, reordered, conflicting, missed, unwritable."""

from __future__ import annotations

import json

import pytest

from talos._verify import Outage, analyse, outages

SENT = {"w0:0", "w0:1", "w0:2", "w1:0", "w1:1"}
ACKED = {"w0:0": (0, 0), "w0:1": (0, 1), "w0:2": (1, 0), "w1:0": (1, 1), "w1:1": (0, 2)}
STORED = {0: ["w0:0", "w0:1", "w1:1"], 1: ["w0:2", "w1:0"]}
ALL_SEEN = [(p, o, v) for p, values in STORED.items() for o, v in enumerate(values)]


def test_a_clean_run_is_ok() -> None:
    summary = analyse(SENT, ACKED, STORED, consumed=ALL_SEEN)
    assert (summary.lost, summary.duplicated, summary.out_of_order, summary.offset_conflicts) == (0, 0, 0, 0)
    assert (summary.consumed, summary.consumer_missed, summary.consumer_redelivered) == (5, 0, 0)
    assert summary.ok(exactly_once=True)


def test_an_acknowledged_value_missing_from_its_offset_is_lost() -> None:
    stored = {0: ["w0:0", "w1:1"], 1: ["w0:2", "w1:0"]}
    summary = analyse(SENT, ACKED, stored)
    assert summary.lost == 2  # w0:1 is gone; w1:1 sits at offset 1, not at its acknowledged 2
    assert not summary.ok(exactly_once=False)


def test_a_second_copy_is_a_duplicate_and_fails_only_exactly_once() -> None:
    stored = {0: ["w0:0", "w0:1", "w1:1", "w0:1"], 1: ["w0:2", "w1:0"]}
    summary = analyse(SENT, ACKED, stored)
    assert summary.duplicated == 1
    assert summary.ok(exactly_once=False)
    assert not summary.ok(exactly_once=True)


def test_a_writer_value_before_an_earlier_one_is_out_of_order() -> None:
    acked = {"w0:0": (0, 1), "w0:1": (0, 0)}
    summary = analyse({"w0:0", "w0:1"}, acked, {0: ["w0:1", "w0:0"]})
    assert summary.out_of_order == 1
    assert not summary.ok(exactly_once=False)


def test_two_values_acknowledged_at_one_offset_are_a_conflict() -> None:
    # w0:1 and w1:1 were both acknowledged at 0/1 (a split brain: two owners appended at once).
    acked = {"w0:0": (0, 0), "w0:1": (0, 1), "w1:1": (0, 1)}
    summary = analyse({"w0:0", "w0:1", "w1:1"}, acked, {0: ["w0:0", "w0:1", "w1:1"]})
    assert summary.offset_conflicts == 1
    assert any("0/1" in problem for problem in summary.problems)
    assert not summary.ok(exactly_once=False)


def test_a_consumer_handed_another_value_at_a_stored_offset_is_a_conflict() -> None:
    consumed = [*ALL_SEEN, (1, 1, "w0:9")]  # a deposed owner served its own 1/1
    summary = analyse(SENT, ACKED, STORED, consumed=consumed)
    assert summary.offset_conflicts == 1
    assert not summary.ok(exactly_once=True)


def test_an_acknowledged_value_the_group_never_saw_is_missed() -> None:
    consumed = [d for d in ALL_SEEN if d[2] != "w1:0"]
    summary = analyse(SENT, ACKED, STORED, consumed=consumed)
    assert summary.consumer_missed == 1
    assert any("never saw w1:0" in problem for problem in summary.problems)
    assert not summary.ok(exactly_once=True)


def test_redeliveries_to_the_group_are_counted_but_allowed() -> None:
    summary = analyse(SENT, ACKED, STORED, consumed=[*ALL_SEEN, ALL_SEEN[0], ALL_SEEN[1]])
    assert summary.consumer_redelivered == 2
    assert summary.ok(exactly_once=True)


def test_without_a_group_nothing_is_reported_missed() -> None:
    summary = analyse(SENT, ACKED, STORED)
    assert summary.consumed is None
    assert summary.consumer_missed == 0
    assert "consumer missed" not in summary.render()


def test_outages_are_the_gaps_longer_than_the_threshold_including_both_ends() -> None:
    outage = outages([10.5, 10.6, 15.6, 16.0, 16.5], 10.0, 20.0, gap_s=1.0)
    assert outage.longest_s == pytest.approx(5.0)  # 10.6 → 15.6
    assert outage.total_s == pytest.approx(5.0 + 3.5)  # and 16.5 → the end at 20.0


def test_a_partition_never_acknowledged_was_unwritable_the_whole_window() -> None:
    assert outages([], 0.0, 60.0) == Outage(60.0, 60.0)


def test_analyse_reports_unwritable_time_per_partition() -> None:
    times = {0: [0.1, 0.2, 0.3, 9.8], 1: [0.1 * i for i in range(1, 100)]}
    summary = analyse(SENT, ACKED, STORED, ack_times=times, window=(0.0, 10.0))
    assert summary.unwritable[0].longest_s == pytest.approx(9.5)
    assert summary.unwritable[1] == Outage(0.0, 0.0)
    assert "partition 0 unwritable: longest 9.5s" in summary.render()
    report = json.loads(json.dumps(summary.as_json()))
    assert report["unwritable"]["0"]["longest_s"] == pytest.approx(9.5)
    assert report["offset_conflicts"] == 0
