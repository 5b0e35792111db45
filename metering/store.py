"""Where metered usage lands, per minute, and what it answers.

Rows are per (minute, tenant, topic, partition) sums. :meth:`Store.ingest` takes rows together with the
``__talos_metrics`` positions they came from and stores both in one transaction; the job filters each
micro-batch by those positions first, so a re-run batch (a restarted job, a lost checkpoint) is counted
once. The store is the source of truth for what has been counted, not Spark's checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["COLUMNS", "MINUTE_MS", "SERIES_COUNTERS", "MinuteUsage", "Store", "Window", "check_step", "rates"]

COUNTERS = ("bytes_in", "messages_in", "bytes_out", "messages_out", "requests", "errors", "latency_ms_sum")
COLUMNS = ("minute_ms", "tenant", "topic", "partition", *COUNTERS, "latency_ms_max")
# Charts plot counts; a latency sum over a step means nothing without its request count beside it.
SERIES_COUNTERS = ("bytes_in", "messages_in", "bytes_out", "messages_out", "requests", "errors")
MINUTE_MS = 60_000


@dataclass(frozen=True, slots=True)
class MinuteUsage:
    minute_ms: int
    tenant: str
    topic: str
    partition: int
    bytes_in: int
    messages_in: int
    bytes_out: int
    messages_out: int
    requests: int
    errors: int
    latency_ms_sum: float
    latency_ms_max: float


@dataclass(frozen=True, slots=True)
class Window:
    """``[start_ms, end_ms)``; minutes are counted by their start."""

    start_ms: int
    end_ms: int


class Store(Protocol):
    def positions(self) -> dict[int, int]:
        """``__talos_metrics`` partition → next offset not yet counted."""
        ...

    def ingest(self, rows: Sequence[MinuteUsage], positions: Mapping[int, int]) -> None:
        """Add the rows and move the positions, all or nothing."""
        ...

    def traffic(self, window: Window, *, topic: str | None = None) -> list[dict[str, object]]:
        """Per topic and partition: the counters summed over the window."""
        ...

    def tenants(self, window: Window) -> list[dict[str, object]]:
        """Per tenant: the counters summed over the window."""
        ...

    def top_partitions(self, window: Window, limit: int) -> list[dict[str, object]]:
        """The partitions with the most bytes in + out over the window."""
        ...

    def partition_rates(self, window: Window) -> dict[str, float]:
        """Ring key ``"topic:partition"`` → average bytes/s in + out over the window (ring weights)."""
        ...

    def usage_series(
        self, window: Window, *, tenant: str | None = None, topic: str | None = None, step_ms: int = MINUTE_MS
    ) -> list[dict[str, object]]:
        """Per step and topic: the :data:`SERIES_COUNTERS` summed over partitions and the step's minutes,
        for one tenant (None: all) and one topic (None: every topic).

        Rows are ``time_ms``, ``topic`` and the counters, all ints, ordered by ``time_ms, topic``. ``time_ms``
        is the step's start, a multiple of ``step_ms`` since the epoch; only minutes inside the window count,
        so the first and last steps of a window that is not aligned are partial (and the first may start
        before ``window.start_ms``). Steps with no rows are absent. ``step_ms`` must be a positive multiple
        of a minute (:class:`ValueError` otherwise).
        """
        ...


def check_step(step_ms: int) -> int:
    """``step_ms`` if it is a positive whole number of minutes; :class:`ValueError` otherwise."""
    # Rows are whole minutes, so a finer or ragged step would split a minute between steps. The step also
    # becomes a number in SQL text (Druid), so only a real int passes: not a bool, a float or a string.
    if isinstance(step_ms, bool) or not isinstance(step_ms, int) or step_ms <= 0 or step_ms % MINUTE_MS:
        raise ValueError(f"step_ms must be a positive multiple of {MINUTE_MS} (a minute), not {step_ms!r}")
    return step_ms


def rates(top: list[dict[str, object]], window: Window) -> dict[str, float]:
    """``top_partitions`` rows (``topic``, ``partition``, ``bytes``) as ring key → average bytes/s."""
    seconds = max((window.end_ms - window.start_ms) / 1000, 1.0)
    return {f"{row['topic']}:{row['partition']}": float(row["bytes"]) / seconds for row in top}  # type: ignore[arg-type]
