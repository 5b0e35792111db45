"""Producer ids in ZooKeeper: ``/talos/producers/<id>`` = ``{"epoch", "tenant"}``, ids random 63-bit.

A new id is a create of its node (a collision: another random id); the next epoch is a compare-and-set
on the node version, so any server can allocate. The tenant is set at creation and never changes.

Named producers: ``/talos/producer_names/<key>`` = ``{"tenant", "name", "producer_id", "epoch", "until_ms"}``
(the lease). Taking a lease bumps the id's epoch and writes the lease in one ZooKeeper transaction, so two
servers claiming at once cannot both win, and the winner's epoch is the id's newest.
"""

from __future__ import annotations

import time
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
    take_lease,
    unknown_producer,
)
from server.partition.producers import fenced

__all__ = ["ZkProducerIds"]


class ZkProducerIds:
    def __init__(self, zk: KazooClient) -> None:
        self._zk = zk
        self.owners = OwnerCache()
        zk.ensure_path(paths.PRODUCERS)
        zk.ensure_path(paths.PRODUCER_NAMES)

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

    def claim(self, name: str, tenant: str | None, lease_ms: int, holder: tuple[int, int] | None) -> tuple[int, int]:
        path = f"{paths.PRODUCER_NAMES}/{name_key(tenant, name)}"
        while True:
            try:
                data, name_stat = self._zk.get(path)
            except NoNodeError:
                if holder is not None:
                    raise unknown_producer(holder[0]) from None
                producer_id, epoch = self.allocate(None, tenant)
                lease = {"tenant": tenant, "name": name, "producer_id": producer_id, "epoch": epoch}
                try:
                    self._zk.create(path, orjson.dumps({**lease, "until_ms": _now_ms() + lease_ms}))
                except NodeExistsError:
                    continue  # another server named it first: the id just allocated is never used
                return producer_id, epoch
            record = orjson.loads(data)
            producer_id = int(record["producer_id"])
            node, id_stat = self._node(producer_id)
            current, now = int(node["epoch"]), _now_ms()
            if holder is not None:
                if holder != (producer_id, current):
                    raise fenced(holder[0], holder[1], current)
                try:
                    self._zk.set(path, orjson.dumps({**record, "until_ms": now + lease_ms}), version=name_stat.version)
                except BadVersionError:
                    continue
                return holder
            take_lease(Lease(int(record["epoch"]), int(record["until_ms"])), current, now)
            node["epoch"] = current + 1
            transaction = self._zk.transaction()
            transaction.set_data(f"{paths.PRODUCERS}/{producer_id}", orjson.dumps(node), version=id_stat.version)
            lease_record = {**record, "epoch": current + 1, "until_ms": now + lease_ms}
            transaction.set_data(path, orjson.dumps(lease_record), version=name_stat.version)
            if all(not isinstance(result, Exception) for result in transaction.commit()):
                return producer_id, current + 1


def _now_ms() -> int:
    return int(time.time() * 1000)
