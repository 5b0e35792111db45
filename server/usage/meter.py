"""Metering: what each (tenant, topic, partition) cost this server, sent through Talos itself.

:class:`UsageMeter` counts, where a partition's owner serves a request (never at a server that only
forwards it, so nothing is counted twice): bytes and messages in and out, requests, errors, and the
latency sum and maximum; ``server.usage.emitter`` sends them to ``__talos_metrics``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import orjson

from server import metrics
from talos import RecordData

__all__ = ["METRICS_TOPIC", "TENANT_HEADER", "Usage", "UsageMeter", "tenant_of", "usage_records"]

METRICS_TOPIC = "__talos_metrics"
TENANT_HEADER = "x-talos-tenant"
DEFAULT_TENANT = "default"
Key = tuple[str, str, int]  # (tenant, topic, partition)


def tenant_of(headers: Mapping[str, str]) -> str:
    return headers.get(TENANT_HEADER) or DEFAULT_TENANT


@dataclass
class Usage:
    bytes_in: int = 0
    messages_in: int = 0
    bytes_out: int = 0
    messages_out: int = 0
    requests: int = 0
    errors: int = 0
    latency_ms_sum: float = 0.0
    latency_ms_max: float = 0.0


class UsageMeter:
    """Counts since the last :meth:`take`. Called on the event loop only: no lock needed."""

    def __init__(self) -> None:
        self._counts: dict[Key, Usage] = {}

    def record(self, key: Key, *, started: float, sizes: Mapping[str, int] | None = None, error: bool = False) -> None:
        """One request served: ``sizes`` holds any of bytes_in, messages_in, bytes_out, messages_out."""
        sizes = sizes or {}
        self._count(
            key,
            started,
            sizes.get("bytes_in", 0),
            sizes.get("messages_in", 0),
            sizes.get("bytes_out", 0),
            sizes.get("messages_out", 0),
            error,
        )

    def produced(self, key: Key, *, started: float, size: int, messages: int) -> None:
        """:meth:`record` of a produce served (``bytes_in`` and ``messages_in``), without a sizes mapping: one per
        single-message produce."""
        self._count(key, started, size, messages, 0, 0, False)

    def _count(
        self, key: Key, started: float, bytes_in: int, messages_in: int, bytes_out: int, messages_out: int, error: bool
    ) -> None:
        if key[1] == METRICS_TOPIC:
            return  # metering the meter would never settle
        usage = self._counts.get(key)
        if usage is None:
            usage = self._counts[key] = Usage()
        # On every produce and fetch: the fields added here, not through a method with keyword arguments.
        latency_ms = (time.monotonic() - started) * 1000
        usage.bytes_in += bytes_in
        usage.messages_in += messages_in
        usage.bytes_out += bytes_out
        usage.messages_out += messages_out
        usage.requests += 1
        usage.errors += error
        usage.latency_ms_sum += latency_ms
        usage.latency_ms_max = max(usage.latency_ms_max, latency_ms)
        metrics.usage(key, bytes_in + bytes_out, messages_in + messages_out, error)

    def take(self) -> dict[Key, Usage]:
        counts, self._counts = self._counts, {}
        return counts


def usage_records(
    server: str, window_start_ms: int, window_end_ms: int, counts: Mapping[Key, Usage]
) -> list[RecordData]:
    return [
        RecordData(
            orjson.dumps(
                {
                    "server": server,
                    "window_start_ms": window_start_ms,
                    "window_end_ms": window_end_ms,
                    "tenant": tenant,
                    "topic": topic,
                    "partition": partition,
                    **asdict(usage),
                }
            ),
            server.encode(),
            timestamp=window_end_ms,
        )
        for (tenant, topic, partition), usage in sorted(counts.items())
    ]
