"""Connector checkpoints, kept in Talos itself: the internal topic ``__connect_offsets``.

A checkpoint is a JSON document under the key ``<connector>/<task>``. All of a connector's checkpoints go
to one partition (chosen by the connector's name), so loading them reads one partition; the newest record
of each key wins. Records are written by an idempotent producer and each ``save`` waits until durable.
Sinks keep their offsets as consumer-group commits instead (``__consumer_offsets``); sources, whose
positions are files and search cursors, keep them here.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import orjson

from connectors.reading import read_to_end
from talos import Admin, ConflictError, Producer, partition_for_key

__all__ = ["CHECKPOINT_PARTITIONS", "CHECKPOINT_TOPIC", "CheckpointStore"]

CHECKPOINT_TOPIC = "__connect_offsets"
CHECKPOINT_PARTITIONS = 8


class CheckpointStore:
    """Load and save one runner's checkpoints (thread-safe: tasks save from their own threads)."""

    def __init__(self, url: str, *, timeout_s: float = 60.0) -> None:
        self.url = url
        self._timeout_s = timeout_s
        self._producer: Producer | None = None
        self._lock = threading.Lock()

    def ensure_topic(self) -> None:
        """Create ``__connect_offsets`` if it does not exist (kept forever: no retention)."""
        with Admin(self.url) as admin, contextlib.suppress(ConflictError):
            admin.create_topic(CHECKPOINT_TOPIC, partitions=CHECKPOINT_PARTITIONS)

    def partition(self, connector: str) -> int:
        return partition_for_key(connector.encode(), CHECKPOINT_PARTITIONS)

    def load(self, connector: str) -> dict[str, dict[str, Any]]:
        """Every task's newest checkpoint of ``connector``: task key → document."""
        prefix = f"{connector}/".encode()
        found: dict[str, dict[str, Any]] = {}
        for message in read_to_end(self.url, CHECKPOINT_TOPIC, self.partition(connector)):
            if message.key is None or not message.key.startswith(prefix):
                continue
            task = message.key[len(prefix) :].decode()
            if message.value is None:
                found.pop(task, None)
                continue
            try:
                document = orjson.loads(message.value)
            except orjson.JSONDecodeError:
                continue  # not written by a runner
            if isinstance(document, dict):
                found[task] = document
        return found

    def save(self, connector: str, task: str, document: dict[str, Any]) -> None:
        """Write the checkpoint; returns once it is durable (raises if it cannot be written)."""
        with self._lock:
            if self._producer is None:
                self._producer = Producer(self.url, idempotent=True, linger_ms=0)
            producer = self._producer
        future = producer.send(
            CHECKPOINT_TOPIC,
            value=orjson.dumps(document),
            key=f"{connector}/{task}",
            partition=self.partition(connector),
        )
        future.result(timeout=self._timeout_s)

    def close(self) -> None:
        with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            producer.close()
