"""The portal's usage charts (pure SVG): the period a chart shows when the data covers less than the one
asked for, and the caption that says so."""

from __future__ import annotations

import re

import pytest

from server.portal.charts import caption, duration, line_chart, shown_start

MINUTE = 60_000
HOUR = 60 * MINUTE
DAY = 24 * HOUR
# 2024-03-14 10:00 UTC: the start of a 24 h window.
START = 1_710_410_400_000
END = START + DAY


def x_labels(svg: str) -> list[str]:
    return re.findall(r'class="axis">(\d\d-\d\d \d\d:\d\d UTC)</text>', svg)


def circles_x(svg: str) -> list[float]:
    return [float(x) for x in re.findall(r'<circle cx="([\d.]+)"', svg)]


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (DAY, "24 h"),
        (14 * DAY, "14 d"),
        (HOUR, "1 h"),
        (5 * MINUTE, "5 min"),
        (2 * HOUR + 5 * MINUTE, "2 h 5 min"),
        (DAY + 3 * HOUR + 7 * MINUTE, "27 h 7 min"),  # days from two on, as the period links say "24h"
        (3 * DAY + 3 * HOUR + 7 * MINUTE, "3 d 3 h"),
        (30_000, "30 s"),
    ],
)
def test_a_period_reads_as_a_person_says_it(ms: int, text: str) -> None:
    assert duration(ms) == text


def test_a_new_servers_day_is_drawn_from_its_first_point_not_as_one_dot_at_the_edge() -> None:
    # Twenty minutes of a server started at 23:35 of a 24 h window, at 5-minute steps.
    first = END - 25 * MINUTE
    series = {"in": [(first + i * 5 * MINUTE, 1024.0 * (i + 1)) for i in range(4)], "out": [(END - 10 * MINUTE, 5.0)]}
    assert shown_start(series, START, END) == first
    svg = line_chart(series, start_ms=START, end_ms=END, title="orders")
    assert x_labels(svg) == ["03-15 09:35 UTC", "03-15 10:00 UTC"]
    xs = circles_x(svg)
    assert min(xs) == pytest.approx(70.0)  # the first point on the y axis ...
    assert max(xs) - min(xs) == pytest.approx(560 * 15 / 25)  # ... the others over the plot, not in its last pixel
    assert caption(series, START, END) == (
        "Shown: the last 25 min, from 03-15 09:35 to 03-15 10:00 UTC: there is no data before that in the last 24 h."
    )


def test_a_chart_whose_data_covers_the_period_shows_all_of_it() -> None:
    series = {"in": [(START, 1.0), (END - HOUR, 2.0)]}
    assert shown_start(series, START, END) == START
    assert x_labels(line_chart(series, start_ms=START, end_ms=END)) == ["03-14 10:00 UTC", "03-15 10:00 UTC"]
    assert caption(series, START, END) == "Shown: the last 24 h, from 03-14 10:00 to 03-15 10:00 UTC."


def test_a_chart_without_data_shows_the_period_asked_for_and_says_there_was_no_traffic() -> None:
    for series in ({}, {"in": [], "out": []}):
        svg = line_chart(series, start_ms=START, end_ms=END)
        assert x_labels(svg) == ["03-14 10:00 UTC", "03-15 10:00 UTC"] and "no traffic in this period" in svg
        assert caption(series, START, END) == "Shown: the last 24 h, from 03-14 10:00 to 03-15 10:00 UTC."


def test_points_before_the_window_do_not_widen_it() -> None:
    assert shown_start({"in": [(START - HOUR, 1.0), (START + HOUR, 1.0)]}, START, END) == START


@pytest.mark.parametrize(("late", "shown"), [(2 * HOUR, START), (DAY // 10, START), (3 * HOUR, START + 3 * HOUR)])
def test_data_starting_a_little_late_keeps_the_period_asked_for(late: int, shown: int) -> None:
    # Hourly rows read at 5-minute steps start up to an hour into a 24 h window: that is still "the last 24 h".
    assert shown_start({"in": [(START + late, 1.0), (END - HOUR, 1.0)]}, START, END) == shown


def test_the_axis_top_reads_as_a_number_not_an_exponent() -> None:
    svg = line_chart({"in": [(START, 900 * 1024.0)]}, start_ms=START, end_ms=END)
    assert "1000 KiB/s" in svg and "e+" not in svg
