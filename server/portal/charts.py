"""Usage charts as inline SVG, drawn on the server: no chart library, nothing fetched by the browser. Pure."""

from __future__ import annotations

import html
import math
import time
from collections.abc import Mapping, Sequence

__all__ = ["PALETTE", "caption", "duration", "line_chart", "nice_ceiling", "shown_start"]

PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2")
_UNITS = ((1024.0**3, "GiB/s"), (1024.0**2, "MiB/s"), (1024.0, "KiB/s"))
_LATE_START = 0.1  # of the period asked for: data starting later than this is drawn from its first point


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k at or above ``value`` (a readable top for the y axis)."""
    if value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        top = step * 10.0**exponent
        if top >= value * (1 - 1e-9):
            return top
    return 10.0 ** (exponent + 1)


def _figure(value: float) -> str:
    # Three significant digits, but never "1e+03": an axis topped at 1000 KiB/s says so.
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def _rate(value: float, unit: str) -> str:
    if unit == "bytes":
        for scale, name in _UNITS:
            if value >= scale:
                return f"{_figure(value / scale)} {name}"
        return f"{_figure(value)} B/s"
    return f"{_figure(value)} {unit}"


def _clock(ms: int) -> str:
    return time.strftime("%m-%d %H:%M", time.gmtime(ms / 1000))


def duration(ms: int) -> str:
    """``"24 h"``, ``"14 d"``, ``"2 h 5 min"``: at most two units, as a person says a period."""
    minutes = max(ms, 0) // 60_000
    if minutes == 0:
        return f"{max(ms, 0) // 1000} s"
    # "24 h" and "36 h" as the period links say them; days from two on.
    days = minutes // 1440 if minutes >= 2 * 1440 else 0
    hours, mins = (minutes - days * 1440) // 60, minutes % 60
    parts = [f"{n} {unit}" for n, unit in ((days, "d"), (hours, "h"), (mins, "min")) if n]
    return " ".join(parts[:2])


def shown_start(series: Mapping[str, Sequence[tuple[int, float]]], start_ms: int, end_ms: int) -> int:
    """Where the x axis starts: at the first point when the data covers less than nine tenths of
    ``[start_ms, end_ms)``, else at ``start_ms``. A server a few minutes old would otherwise draw its day as
    one dot at the right edge of 24 hours; a first point a step or two late (hourly rows read at 5-minute
    steps, a quiet first hour) is not worth a shorter period than the one asked for."""
    first = min((ms for points in series.values() for ms, _ in points), default=start_ms)
    if first - start_ms <= (end_ms - start_ms) * _LATE_START:
        return start_ms
    return min(first, end_ms)


def caption(series: Mapping[str, Sequence[tuple[int, float]]], start_ms: int, end_ms: int) -> str:
    """Which period the chart of :func:`line_chart` shows, and why when it is shorter than the one asked for."""
    start = shown_start(series, start_ms, end_ms)
    shown = f"Shown: the last {duration(end_ms - start)}, from {_clock(start)} to {_clock(end_ms)} UTC"
    if start == start_ms:
        return f"{shown}."
    return f"{shown}: there is no data before that in the last {duration(end_ms - start_ms)}."


def line_chart(
    series: Mapping[str, Sequence[tuple[int, float]]],
    *,
    start_ms: int,
    end_ms: int,
    unit: str = "bytes",
    title: str = "",
    width: int = 640,
    height: int = 220,
) -> str:
    """One line per named series of (time ms, rate) points over ``[start_ms, end_ms)`` (from the first point
    if the data starts later: :func:`shown_start`), with axes, a legend, and the value of each point as its
    tooltip."""
    shown_ms = shown_start(series, start_ms, end_ms)
    # The legend has a row of its own under the title: inside the plot it hid a line at the axis's top.
    left, right, top, bottom = 70, 10, 40, 28
    plot_w, plot_h = width - left - right, height - top - bottom
    span = max(end_ms - shown_ms, 1)
    peak = max((v for points in series.values() for _, v in points), default=0.0)
    # Round in the unit the axis shows: 1 MiB/s, not 977 KiB/s.
    scale = next((size for size, _ in _UNITS if peak >= size), 1.0) if unit == "bytes" else 1.0
    y_top = nice_ceiling(peak / scale) * scale

    def x(ms: int) -> float:
        return left + plot_w * (ms - shown_ms) / span

    def y(value: float) -> float:
        return top + plot_h * (1 - value / y_top)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" aria-label="{html.escape(title)}">',
        f'<text x="{left}" y="14" class="chart-title">{html.escape(title)}</text>',
    ]
    for fraction in (0.0, 0.5, 1.0):
        gy = y(y_top * fraction)
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{gy:.1f}" y2="{gy:.1f}" stroke="#e5e7eb"/>')
        label = html.escape(_rate(y_top * fraction, unit))
        parts.append(f'<text x="{left - 6}" y="{gy + 4:.1f}" text-anchor="end" class="axis">{label}</text>')
    for ms, anchor in ((shown_ms, "start"), (end_ms, "end")):
        parts.append(
            f'<text x="{x(ms):.1f}" y="{height - 8}" text-anchor="{anchor}" class="axis">{_clock(ms)} UTC</text>'
        )
    if not any(series.values()):
        parts.append(
            f'<text x="{left + plot_w / 2:.1f}" y="{top + plot_h / 2:.1f}" text-anchor="middle" class="empty">'
            "no traffic in this period</text>"
        )
    for index, (name, points) in enumerate(sorted(series.items())):
        color = PALETTE[index % len(PALETTE)]
        ordered = sorted(points)
        if ordered:
            path = " ".join(f"{x(ms):.1f},{y(v):.1f}" for ms, v in ordered)
            parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{path}"/>')
        for ms, v in ordered:
            tip = html.escape(f"{name} {_clock(ms)}: {_rate(v, unit)}")
            parts.append(f'<circle cx="{x(ms):.1f}" cy="{y(v):.1f}" r="2" fill="{color}"><title>{tip}</title></circle>')
        legend_x = left + 10 + 150 * index
        parts.append(f'<rect x="{legend_x}" y="20" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{legend_x + 14}" y="29" class="legend">{html.escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)
