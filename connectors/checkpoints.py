"""Connector checkpoints, kept by the servers: ``GET/PUT /v1/connectors/{name}/offsets`` through the SDK's
:class:`talos.Admin`.

A checkpoint is a JSON document per (connector, task); the servers keep them in the internal topic
``__connect_offsets``, scoped to the tenant of the runner's token, so another tenant cannot read or
rewind them (tenants cannot reach that topic directly). Each ``save`` returns once it is durable.
Sinks keep their offsets as consumer-group commits instead (``__consumer_offsets``); sources, whose
positions are files and search cursors, keep them here.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from talos import Admin, ApiError, ProducerIdentity, TransportError, partition_for_key

__all__ = ["CHECKPOINT_PARTITIONS", "CHECKPOINT_TOPIC", "CheckpointStore"]

CHECKPOINT_TOPIC = "__connect_offsets"
CHECKPOINT_PARTITIONS = 8  # the servers' layout of CHECKPOINT_TOPIC (server.http.connector_offsets)
_RETRY_S = 0.5


class CheckpointStore:
    """Load and save one runner's checkpoints (thread-safe: tasks save from their own threads)."""

    def __init__(self, url: str, *, timeout_s: float = 60.0) -> None:
        self.url = url
        self._timeout_s = timeout_s
        self._admin: Admin | None = None
        self._lock = threading.Lock()

    def _client(self) -> Admin:
        with self._lock:
            if self._admin is None:
                self._admin = Admin(self.url, timeout=self._timeout_s)
            return self._admin

    def partition(self, connector: str) -> int:
        """The partition of ``__connect_offsets`` that holds the connector's checkpoints (what the admin sees)."""
        return partition_for_key(connector.encode(), CHECKPOINT_PARTITIONS)

    def load(self, connector: str) -> dict[str, dict[str, Any]]:
        """Every task's newest checkpoint of ``connector``: task key → document."""
        return self._client().connector_offsets(connector)

    def save(
        self, connector: str, task: str, document: dict[str, Any] | None, *, producer: ProducerIdentity | None = None
    ) -> None:
        """Write the checkpoint; returns once it is durable. A retriable failure (over quota, a partition
        moving, a server restarting) is retried for ``timeout_s``; then, or on any other error, raises.
        ``producer``: the task's named producer, so a fenced (zombie) task's checkpoint is refused. A
        ``document`` of None removes the task's checkpoint."""
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                self._client().save_connector_offsets(connector, task, document, producer=producer)
                return
            except (ApiError, TransportError) as exc:
                wait = getattr(exc, "retry_after", None) or _RETRY_S
                if not exc.retriable or time.monotonic() + wait > deadline:
                    raise
                time.sleep(wait)

    def close(self) -> None:
        with self._lock:
            admin, self._admin = self._admin, None
        if admin is not None:
            admin.close()
