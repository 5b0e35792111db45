"""Producer ids in ZooKeeper: ``/talos/producers/<id>`` = ``{"epoch", "tenant"}``, ids random 63-bit.

A new id is a create of its node (a collision: another random id); the next epoch is a compare-and-set
on the node version, so any server can allocate. The tenant is set at creation and never changes.
"""

from __future__ import annotations

from typing import Any

import orjson
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from server.coordination import paths
from server.errors import ApiError
from server.partition.producer_ids import UNKNOWN, OwnerCache, new_producer_id, unknown_producer

__all__ = ["ZkProducerIds"]


class ZkProducerIds:
    def __init__(self, zk: KazooClient) -> None:
        self._zk = zk
        self.owners = OwnerCache()
        zk.ensure_path(paths.PRODUCERS)

    def _node(self, producer_id: int) -> tuple[dict[str, Any], Any]:
        try:
            data, stat = self._zk.get(f"{paths.PRODUCERS}/{producer_id}")
        except NoNodeError:
            raise unknown_producer(producer_id) from None
        return orjson.loads(data), stat

    def owner_of(self, producer_id: int) -> str | None:
        cached = self.owners.get(producer_id)
        if cached != UNKNOWN:
            return cached
        tenant = self._node(producer_id)[0].get("tenant")  # absent: allocated before ids had owners
        self.owners.put(producer_id, tenant)
        return tenant

    def allocate(self, producer_id: int | None, tenant: str | None) -> tuple[int, int]:
        if producer_id is None:
            for _attempt in range(100):
                new_id = new_producer_id()
                try:
                    self._zk.create(f"{paths.PRODUCERS}/{new_id}", orjson.dumps({"epoch": 0, "tenant": tenant}))
                except NodeExistsError:
                    continue
                self.owners.put(new_id, tenant)
                return new_id, 0
            raise ApiError(503, "CONFLICT", "producer id allocation kept conflicting; retry", retriable=True)
        if tenant is not None and self.owner_of(producer_id) != tenant:
            raise unknown_producer(producer_id)  # another tenant's: answered as if it did not exist
        while True:
            node, stat = self._node(producer_id)
            node["epoch"] = int(node["epoch"]) + 1
            try:
                self._zk.set(f"{paths.PRODUCERS}/{producer_id}", orjson.dumps(node), version=stat.version)
            except BadVersionError:
                continue
            return producer_id, int(node["epoch"])
