"""Server registration: one ephemeral node per live server, gone when its ZooKeeper session ends."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import orjson
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from server.coordination import paths

__all__ = ["LiveServer", "ServerRegistry", "registration"]


@dataclass(frozen=True)
class LiveServer:
    server_id: str
    url: str
    since: float  # when it registered (ZooKeeper's ctime, seconds): the clock join_delay counts on
    kafka: str = ""  # HOST:PORT of its Kafka listener ("" when off)


def registration(url: str, kafka: str) -> bytes:
    """A server's registration node: its URL and, when its Kafka listener is on, that address."""
    return orjson.dumps({"url": url, **({"kafka": kafka} if kafka else {})})


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
            out[child] = LiveServer(child, str(doc["url"]), stat.ctime / 1000, str(doc.get("kafka") or ""))
        return out
