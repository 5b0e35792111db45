"""Producer ids in ZooKeeper: ``/talos/producers/<id>`` = ``{"epoch", "tenant"}``, ids random 63-bit.

A new id is a create of its node (a collision: another random id); the next epoch is a compare-and-set
on the node version, so any server can allocate. The tenant is set at creation and never changes.

Named producers are transactional ids with a lease, kept by the transaction coordinator, which raises the
id's epoch here at each claim. ``/talos/producer_names/<key>`` = ``{"tenant", "name", "producer_id", "epoch",
"until_ms"}`` holds the named producers of before that: the coordinator takes one over at its next claim
(:meth:`ZkProducerIds.named`), and nothing writes them any more.
"""

from __future__ import annotations

from typing import Any

import orjson
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from server.coordination import paths
from server.errors import ApiError
from server.partition.producer_ids import (
    UNKNOWN,
    Lease,
    OwnerCache,
    name_key,
    new_producer_id,
    unknown_producer,
)

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

    def newer_epoch(self, producer_id: int, epoch: int) -> int | None:
        try:
            current = int(self._node(producer_id)[0]["epoch"])
        except ApiError:
            return None  # not allocated by this cluster (e.g. the servers' own usage producer of an old data dir)
        return current if current > epoch else None

    def raise_epoch(self, producer_id: int, epoch: int) -> None:
        while True:
            node, stat = self._node(producer_id)
            if int(node["epoch"]) >= epoch:
                return
            node["epoch"] = epoch
            try:
                self._zk.set(f"{paths.PRODUCERS}/{producer_id}", orjson.dumps(node), version=stat.version)
            except BadVersionError:
                continue
            return

    def named(self, tenant: str | None, name: str) -> tuple[int, int, Lease | None] | None:
        try:
            data, _stat = self._zk.get(f"{paths.PRODUCER_NAMES}/{name_key(tenant, name)}")
        except NoNodeError:
            return None
        record = orjson.loads(data)
        producer_id = int(record["producer_id"])
        current = int(self._node(producer_id)[0]["epoch"])
        return producer_id, current, Lease(int(record["epoch"]), int(record["until_ms"]))
