"""Server registration: one ephemeral node per live server, gone when its ZooKeeper session ends.

The node holds the server's URL, its Kafka address, and its storage health (``server.coordination.stepdown``):
whether it can write (False once it stepped down), since when it can again, and its last successful storage
operation, which its peers take as evidence that the storage works for somebody.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from server.coordination import paths
from server.coordination.stepdown import PeerStorage

__all__ = ["LiveServer", "ServerRegistry", "registration"]


@dataclass(frozen=True)
class LiveServer:
    server_id: str
    url: str
    # When it registered (ZooKeeper's ctime, seconds), or when it could write again after a step-down: the
    # clock join_delay counts on.
    since: float
    kafka: str = ""  # HOST:PORT of its (first) Kafka listener ("" when off)
    storage: PeerStorage = field(default_factory=lambda: PeerStorage(True, 0))
    kafka_listeners: Mapping[str, str] = field(default_factory=dict)  # listener name -> HOST:PORT, when several

    def kafka_address(self, listener: str | None) -> str:
        """HOST:PORT of its Kafka listener ``listener`` (its first one for None, or if it has no such listener)."""
        return self.kafka_listeners.get(listener, self.kafka) if listener is not None else self.kafka


def registration(
    url: str,
    kafka: str,
    *,
    writable: bool = True,
    since_ms: int = 0,
    storage: PeerStorage | None = None,
    kafka_listeners: Mapping[str, str] | None = None,
) -> bytes:
    """A server's registration node: its URL, its Kafka address when that listener is on (and every listener's,
    by name, when it has several), its storage health."""
    doc: dict[str, object] = {"url": url, "writable": writable}
    if kafka_listeners and len(kafka_listeners) > 1:
        doc["kafka_listeners"] = dict(kafka_listeners)
    if storage is not None:
        doc["storage_ok_ms"] = storage.last_ok_ms
        doc["storage_ok_since_ms"] = storage.ok_since_ms
    if kafka:
        doc["kafka"] = kafka
    if since_ms:
        doc["writable_since_ms"] = since_ms
    return orjson.dumps(doc)


class ServerRegistry:
    def __init__(self, zk: KazooClient) -> None:
        self._zk = zk
        zk.ensure_path(paths.SERVERS)

    def register(self, server_id: str, url: str, kafka: str = "") -> None:
        """Announce this server; refuses an id another live session holds."""
        try:
            self._zk.create(f"{paths.SERVERS}/{server_id}", registration(url, kafka), ephemeral=True)
        except NodeExistsError:
            raise RuntimeError(f"server id {server_id!r} is registered by another live server") from None

    def deregister(self, server_id: str) -> None:
        with contextlib.suppress(NoNodeError):
            self._zk.delete(f"{paths.SERVERS}/{server_id}")

    def live(self) -> dict[str, LiveServer]:
        out = {}
        for child in self._zk.get_children(paths.SERVERS):
            try:
                data, stat = self._zk.get(f"{paths.SERVERS}/{child}")
            except NoNodeError:
                continue  # its session ended while we listed
            doc = orjson.loads(data)
            since = max(stat.ctime, int(doc.get("writable_since_ms") or 0)) / 1000
            storage = PeerStorage(
                bool(doc.get("writable", True)),
                int(doc.get("storage_ok_ms") or 0),
                int(doc.get("storage_ok_since_ms") or 0),
            )
            listeners = doc.get("kafka_listeners")
            named = {str(k): str(v) for k, v in listeners.items()} if isinstance(listeners, dict) else {}
            out[child] = LiveServer(child, str(doc["url"]), since, str(doc.get("kafka") or ""), storage, named)
        return out
