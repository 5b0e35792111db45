"""This server's recent usage per (tenant, topic) and minute, kept in memory for a day.

The portal's charts and the quota decision model read usage from the metering store (``metering_store``)
when one is configured; without one (a standalone server) they read this instead. It answers the same
``usage_series`` query as the stores, but only for the partitions this server served.
"""

from __future__ import annotations

from collections.abc import Mapping

from metering.store import MINUTE_MS, SERIES_COUNTERS, Window, check_step
from server.usage.meter import Key, Usage

__all__ = ["UsageHistory"]

_KEEP_MS = 24 * 3600 * 1000


class UsageHistory:
    def __init__(self) -> None:
        self._minutes: dict[tuple[int, str, str], list[int]] = {}  # (minute, tenant, topic) → counters

    def add(self, counts: Mapping[Key, Usage], at_ms: int) -> None:
        minute = at_ms - at_ms % MINUTE_MS
        for (tenant, topic, _partition), usage in counts.items():
            row = self._minutes.setdefault((minute, tenant, topic), [0] * len(SERIES_COUNTERS))
            for index, name in enumerate(SERIES_COUNTERS):
                row[index] += int(getattr(usage, name))
        oldest = minute - _KEEP_MS
        if self._minutes and next(iter(self._minutes))[0] < oldest:
            self._minutes = {k: v for k, v in self._minutes.items() if k[0] >= oldest}

    def usage_series(
        self, window: Window, *, tenant: str | None = None, topic: str | None = None, step_ms: int = MINUTE_MS
    ) -> list[dict[str, object]]:
        check_step(step_ms)
        steps: dict[tuple[int, str], list[int]] = {}
        for (minute, row_tenant, row_topic), counters in self._minutes.items():
            if not window.start_ms <= minute < window.end_ms:
                continue
            if (tenant is not None and row_tenant != tenant) or (topic is not None and row_topic != topic):
                continue
            into = steps.setdefault((minute - minute % step_ms, row_topic), [0] * len(SERIES_COUNTERS))
            for index, value in enumerate(counters):
                into[index] += value
        return [
            {"time_ms": time_ms, "topic": row_topic, **dict(zip(SERIES_COUNTERS, counters, strict=True))}
            for (time_ms, row_topic), counters in sorted(steps.items())
        ]
