"""Prometheus metrics of one server process (``GET /metrics``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest

if TYPE_CHECKING:
    from server.broker import Broker

__all__ = ["CONTENT_TYPE", "fetched", "produced", "read_from", "render"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
REGISTRY = CollectorRegistry()
_messages_in = Counter("talos_messages_in", "Messages produced", ["topic"], registry=REGISTRY)
_bytes_in = Counter("talos_bytes_in", "Request bytes produced", ["topic"], registry=REGISTRY)
_bytes_out = Counter("talos_bytes_out", "Batch bytes fetched", ["topic"], registry=REGISTRY)
_reads = Counter("talos_fetch_reads", "Fetches answered, by where the data came from", ["source"], registry=REGISTRY)
_partitions = Gauge("talos_loaded_partitions", "Partitions this server has loaded", registry=REGISTRY)
_cache = Gauge("talos_tail_cache_bytes", "Bytes held by the tail cache", registry=REGISTRY)
_flushes = Gauge("talos_flushes", "Flushes (syncs) of the loaded partitions since they were loaded", registry=REGISTRY)


def produced(topic: str, messages: int, size: int) -> None:
    _messages_in.labels(topic).inc(messages)
    _bytes_in.labels(topic).inc(size)


def fetched(topic: str, size: int) -> None:
    if size:
        _bytes_out.labels(topic).inc(size)


def read_from(source: str) -> None:
    """A fetch was served from ``cache`` (memory) or ``storage`` (the segment files)."""
    _reads.labels(source).inc()


def render(broker: Broker) -> bytes:
    loaded = broker.loaded_partitions()
    _partitions.set(len(loaded))
    _cache.set(broker.cache.used)
    _flushes.set(sum(p.flushes for p in loaded))
    return bytes(generate_latest(REGISTRY))
