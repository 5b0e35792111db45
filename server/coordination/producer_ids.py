"""Producer ids in ZooKeeper: ``/talos/producers/next`` counts ids; ``/talos/producers/<id>`` = ``{"epoch"}``.

Both change by compare-and-set on the node version, so any server can allocate.
"""

from __future__ import annotations

import orjson
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from server.coordination import paths
from server.producer_ids import unknown_producer

__all__ = ["ZkProducerIds"]


class ZkProducerIds:
    def __init__(self, zk: KazooClient) -> None:
        self._zk = zk
        zk.ensure_path(paths.PRODUCERS)

    def _bump(self, path: str, field: str, initial: int) -> int:
        """Increment ``field`` of the JSON in ``path`` (creating it at ``initial``); returns the new value."""
        while True:
            try:
                data, stat = self._zk.get(path)
            except NoNodeError:
                try:
                    self._zk.create(path, orjson.dumps({field: initial}))
                except NodeExistsError:
                    continue
                return initial
            value = int(orjson.loads(data)[field]) + 1
            try:
                self._zk.set(path, orjson.dumps({field: value}), version=stat.version)
            except BadVersionError:
                continue
            return value

    def allocate(self, producer_id: int | None) -> tuple[int, int]:
        if producer_id is None:
            new_id = self._bump(f"{paths.PRODUCERS}/next", "id", 0)
            self._zk.create(f"{paths.PRODUCERS}/{new_id}", orjson.dumps({"epoch": 0}))
            return new_id, 0
        if not self._zk.exists(f"{paths.PRODUCERS}/{producer_id}"):
            raise unknown_producer(producer_id)
        return producer_id, self._bump(f"{paths.PRODUCERS}/{producer_id}", "epoch", 0)
