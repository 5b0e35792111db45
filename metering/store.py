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

__all__ = ["COLUMNS", "MinuteUsage", "Store", "Window", "rates"]

COUNTERS = ("bytes_in", "messages_in", "bytes_out", "messages_out", "requests", "errors", "latency_ms_sum")
COLUMNS = ("minute_ms", "tenant", "topic", "partition", *COUNTERS, "latency_ms_max")


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


def rates(top: list[dict[str, object]], window: Window) -> dict[str, float]:
    """``top_partitions`` rows (``topic``, ``partition``, ``bytes``) as ring key → average bytes/s."""
    seconds = max((window.end_ms - window.start_ms) / 1000, 1.0)
    return {f"{row['topic']}:{row['partition']}": float(row["bytes"]) / seconds for row in top}  # type: ignore[arg-type]
