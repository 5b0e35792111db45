"""The effective ring in ``/talos/ring``: read it, and replace it only if nobody changed it since."""

from __future__ import annotations

import orjson
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from hashring import Ring
from server.coordination import paths

__all__ = ["RingStore"]


class RingStore:
    def __init__(self, zk: KazooClient) -> None:
        self._zk = zk

    def read(self) -> tuple[Ring, int]:
        """The ring and the ZooKeeper version to compare against (-1 when there is none yet)."""
        try:
            data, stat = self._zk.get(paths.RING)
        except NoNodeError:
            return Ring({}, 0), -1
        return Ring.from_json(orjson.loads(data)), int(stat.version)

    def publish(self, ring: Ring, expected: int) -> bool:
        """Store ``ring`` if ``/talos/ring`` is still at ZooKeeper version ``expected``; False if not."""
        data = orjson.dumps(ring.to_json())
        try:
            if expected < 0:
                self._zk.create(paths.RING, data, makepath=True)
            else:
                self._zk.set(paths.RING, data, version=expected)
        except (BadVersionError, NodeExistsError):
            return False
        return True
