"""Offsets of the ``talos`` Spark source: what a micro-batch covers. Pure logic, no Spark, no I/O.

An offset, as Spark checkpoints it, is ``{topic: {"<partition>": next_offset}}`` (Spark wants string keys
and primitive values). A micro-batch reads, per partition, from its start offset up to (not including)
its end offset.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Offsets", "Range", "cap", "parse_offsets", "ranges"]

Offsets = dict[str, dict[str, int]]


@dataclass(frozen=True, slots=True)
class Range:
    topic: str
    partition: int
    start: int
    end: int  # exclusive

    @property
    def rows(self) -> int:
        return max(self.end - self.start, 0)


def parse_offsets(option: str, bounds: Mapping[str, Mapping[int, tuple[int, int]]], *, what: str) -> Offsets:
    """``earliest``, ``latest``, or JSON ``{"topic": {"0": 42, ...}}`` (``-2`` earliest, ``-1`` latest, as in
    Spark's Kafka source) into offsets for every partition in ``bounds`` (topic → partition → (earliest, latest))."""
    text = option.strip()
    if text in ("earliest", "latest"):
        pick = 0 if text == "earliest" else 1
        return {t: {str(p): b[pick] for p, b in parts.items()} for t, parts in bounds.items()}
    try:
        given = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f'{what} must be earliest, latest or JSON like {{"orders": {{"0": 42}}}}: {exc}') from None
    if not isinstance(given, dict):
        raise ValueError(f"{what}: expected a JSON object of topic -> {{partition: offset}}")
    out: Offsets = {}
    for topic, parts in bounds.items():
        chosen = given.get(topic, {})
        if not isinstance(chosen, dict):
            raise ValueError(f"{what}: {topic!r} must map partitions to offsets")
        out[topic] = {}
        for partition, (earliest, latest) in parts.items():
            value = int(chosen.get(str(partition), -2))
            out[topic][str(partition)] = earliest if value == -2 else latest if value == -1 else value
    return out


def ranges(start: Mapping[str, Mapping[str, int]], end: Mapping[str, Mapping[str, int]]) -> list[Range]:
    """The non-empty per-partition ranges between two offsets (a partition new since ``start`` starts at 0)."""
    out = []
    for topic, parts in sorted(end.items()):
        for partition, stop in sorted(parts.items(), key=lambda item: int(item[0])):
            begin = int(start.get(topic, {}).get(partition, 0))
            if stop > begin:
                out.append(Range(topic, int(partition), begin, int(stop)))
    return out


def cap(start: Mapping[str, Mapping[str, int]], latest: Offsets, max_rows: int | None) -> Offsets:
    """The end of the next micro-batch: ``latest``, or at most ``max_rows`` rows past ``start``, shared among
    partitions in proportion to what each has waiting (every partition with data gets at least one)."""
    waiting = ranges(start, latest)
    total = sum(r.rows for r in waiting)
    if max_rows is None or total <= max_rows:
        return {t: dict(parts) for t, parts in latest.items()}
    end: Offsets = {t: {p: int(start.get(t, {}).get(p, 0)) for p in parts} for t, parts in latest.items()}
    budget = max_rows
    taken = {}
    for r in sorted(waiting, key=lambda r: -r.rows):
        taken[r] = min(r.rows, max(1, r.rows * max_rows // total), budget)
        budget -= taken[r]
    for r in sorted(waiting, key=lambda r: -r.rows):  # what rounding down left over
        extra = min(r.rows - taken[r], budget)
        taken[r] += extra
        budget -= extra
    for r, rows in taken.items():
        end[r.topic][str(r.partition)] = r.start + rows
    return end
