"""Producer ids for idempotent producers, allocated by the cluster, and their epochs and owners.

``allocate(None, tenant)`` gives a new id at epoch 0, owned by ``tenant`` (None: the admin, or auth is
off); ``allocate(id, tenant)`` gives the same id at the next epoch, which fences the id's earlier instance
on every partition the new one writes to. Ids are random 63-bit numbers, so one tenant cannot guess
another's, and an id never changes owner, so servers cache the owner once looked up. Standalone keeps
them as files created exclusively in the storage (``<root>/_producers/<id>.<epoch>``, the owner as JSON
in epoch 0's); a cluster keeps them in ZooKeeper (``server.coordination.producer_ids``).

A **named** producer (``claim(name, tenant, ...)``, Kafka's ``transactional.id``) is one id per (tenant,
name) that every instance of it shares: a connector task's. Each claim bumps the epoch, and the claimer
holds a time-limited lease on the name: while a live instance renews it, another claim is refused with
409 ``PRODUCER_BUSY`` (retriable, ``retry_after_ms`` = what is left of the lease), so a second runner waits
instead of fencing the first; once the lease lapses (the holder died or paused), the next claim fences it.
The lease only decides who works; correctness comes from the epoch: a paused holder that wakes after a
takeover is refused by every partition (``PRODUCER_FENCED``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import posixpath
import secrets
import threading
import time
from typing import Final, Protocol

import orjson

from fencing import FileSystem
from server.errors import ApiError
from server.partition.producers import fenced

__all__ = [
    "Lease",
    "OwnerCache",
    "ProducerIds",
    "StorageProducerIds",
    "UNKNOWN",
    "name_key",
    "new_producer_id",
    "take_lease",
    "unknown_producer",
]

UNKNOWN: Final = "\0unknown"  # OwnerCache.get's answer for an id not cached (no tenant name has a NUL)
_CACHED_IDS = 100_000  # one entry per producer instance that wrote here; past this the cache starts over


class ProducerIds(Protocol):
    owners: OwnerCache

    def allocate(self, producer_id: int | None, tenant: str | None) -> tuple[int, int]:
        """(producer id, epoch); 404 for an id unknown or owned by another tenant (the same answer)."""

    def owner_of(self, producer_id: int) -> str | None:
        """The tenant that owns the id (None: the admin); 404 if it was never allocated. Does I/O."""

    def newer_epoch(self, producer_id: int, epoch: int) -> int | None:
        """The id's current epoch if it is newer than ``epoch`` (None: ``epoch`` is current, or the id is
        unknown here). Does I/O: asked once per loaded partition and producer."""

    def claim(self, name: str, tenant: str | None, lease_ms: int, holder: tuple[int, int] | None) -> tuple[int, int]:
        """The named producer's (id, epoch). Without ``holder``: a new epoch and the lease, or 409
        ``PRODUCER_BUSY`` while another instance's lease lasts. With ``holder`` (its id and epoch): the lease
        renewed for ``lease_ms`` (0 releases it), or 409 ``PRODUCER_FENCED`` if a newer epoch took over."""


class OwnerCache:
    """producer id → owning tenant. Ids are immutable once allocated, so an entry is never stale."""

    def __init__(self) -> None:
        self._owners: dict[int, str | None] = {}

    def get(self, producer_id: int) -> str | None:
        """The owner, or :data:`UNKNOWN` when not cached."""
        return self._owners.get(producer_id, UNKNOWN)

    def put(self, producer_id: int, tenant: str | None) -> None:
        if len(self._owners) >= _CACHED_IDS:
            self._owners.clear()
        self._owners[producer_id] = tenant


@dataclasses.dataclass(frozen=True, slots=True)
class Lease:
    """Who holds a named producer: its epoch, until when (wall-clock ms: the servers share one clock source)."""

    epoch: int
    until_ms: int


def name_key(tenant: str | None, name: str) -> str:
    """A storage- and ZooKeeper-safe key of (tenant, name): names hold ``/`` and tenants any character."""
    return hashlib.sha256(f"{tenant or ''}\0{name}".encode()).hexdigest()[:40]


def take_lease(lease: Lease | None, current_epoch: int, now_ms: int) -> None:
    """Raise 409 ``PRODUCER_BUSY`` while ``lease`` is held by the current epoch's instance."""
    if lease is not None and lease.epoch == current_epoch and lease.until_ms > now_ms:
        left = lease.until_ms - now_ms
        raise ApiError(
            409,
            "PRODUCER_BUSY",
            f"another instance holds this producer for {left / 1000:.1f} s more (it renews while it runs)",
            retriable=True,
            details={"retry_after_ms": left},
            headers={"Retry-After": str(max(1, -(-left // 1000)))},
        )


def new_producer_id() -> int:
    """A random id in 1..2**63-1 (0 and the sequential ids of old data directories are unlikely, not
    excluded: allocation retries on any collision)."""
    return secrets.randbits(63) or 1


def unknown_producer(producer_id: int) -> ApiError:
    return ApiError(404, "UNKNOWN_PRODUCER", f"producer id {producer_id} was never allocated")


class StorageProducerIds:
    def __init__(self, fs: FileSystem, root: str) -> None:
        self._fs = fs
        self._dir = posixpath.join(root, "_producers")
        self.owners = OwnerCache()
        self._claims = threading.Lock()
        self._leases: dict[str, Lease] = {}
        fs.mkdirs(self._dir)

    def _path(self, producer_id: int, epoch: int) -> str:
        return posixpath.join(self._dir, f"{producer_id}.{epoch}")

    def _epochs(self, producer_id: int) -> list[int]:
        prefix = f"{producer_id}."
        return [
            int(entry.name[len(prefix) :])
            for entry in self._fs.list(self._dir)
            if entry.name.startswith(prefix) and entry.name[len(prefix) :].isdigit()
        ]

    def owner_of(self, producer_id: int) -> str | None:
        cached = self.owners.get(producer_id)
        if cached != UNKNOWN:
            return cached
        try:
            data = self._fs.read(self._path(producer_id, 0))
        except FileNotFoundError:
            raise unknown_producer(producer_id) from None
        # Empty: an id allocated before ids had owners, which only the admin may use.
        tenant = orjson.loads(data).get("tenant") if data else None
        self.owners.put(producer_id, tenant)
        return tenant

    def allocate(self, producer_id: int | None, tenant: str | None) -> tuple[int, int]:
        record = orjson.dumps({"tenant": tenant})
        for _attempt in range(100):
            if producer_id is None:
                candidate = (new_producer_id(), 0)
            else:
                if tenant is not None and self.owner_of(producer_id) != tenant:
                    raise unknown_producer(producer_id)  # another tenant's: answered as if it did not exist
                epochs = self._epochs(producer_id)
                if not epochs:
                    raise unknown_producer(producer_id)
                candidate = (producer_id, max(epochs) + 1)
            try:
                # Published whole (write aside, rename): a reader never sees an epoch-0 file without its owner.
                self._fs.publish(self._path(*candidate), record)
            except FileExistsError:
                continue  # a collision, or another request took this epoch: look again
            if producer_id is None:
                self.owners.put(candidate[0], tenant)
            return candidate
        raise ApiError(503, "CONFLICT", "producer id allocation kept conflicting; retry", retriable=True)

    def newer_epoch(self, producer_id: int, epoch: int) -> int | None:
        if not self._fs.exists(self._path(producer_id, epoch + 1)):
            return None
        return max(self._epochs(producer_id))

    def claim(self, name: str, tenant: str | None, lease_ms: int, holder: tuple[int, int] | None) -> tuple[int, int]:
        # One process serves a standalone storage, so the leases live in its memory (a restart forgets them:
        # the next claim then fences whoever was working, who waits for its lease like any second instance).
        key = name_key(tenant, name)
        path = posixpath.join(self._dir, "named", key)
        with self._claims:
            try:
                producer_id = int(orjson.loads(self._fs.read(path))["producer_id"])
            except FileNotFoundError:
                if holder is not None:
                    raise unknown_producer(holder[0]) from None
                producer_id, epoch = self.allocate(None, tenant)
                self._fs.mkdirs(posixpath.dirname(path))
                self._fs.publish(path, orjson.dumps({"tenant": tenant, "name": name, "producer_id": producer_id}))
                self._leases[key] = Lease(epoch, _now_ms() + lease_ms)
                return producer_id, epoch
            current = max(self._epochs(producer_id))
            now = _now_ms()
            if holder is not None:
                if holder != (producer_id, current):
                    raise fenced(holder[0], holder[1], current)
                self._leases[key] = Lease(current, now + lease_ms)
                return holder
            take_lease(self._leases.get(key), current, now)
            producer_id, epoch = self.allocate(producer_id, tenant)
            self._leases[key] = Lease(epoch, now + lease_ms)
            return producer_id, epoch


def _now_ms() -> int:
    return int(time.time() * 1000)
