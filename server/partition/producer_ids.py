"""Producer ids for idempotent producers, allocated by the cluster, and their epochs and owners.

``allocate(None, tenant)`` gives a new id at epoch 0, owned by ``tenant`` (None: the admin, or auth is
off); ``allocate(id, tenant)`` gives the same id at the next epoch, which fences the id's earlier instance
on every partition the new one writes to. Ids are random 63-bit numbers, so one tenant cannot guess
another's, and an id never changes owner, so servers cache the owner once looked up. Standalone keeps
them as files created exclusively in the storage (``<root>/_producers/<id>.<epoch>``, the owner as JSON
in epoch 0's); a cluster keeps them in ZooKeeper (``server.coordination.producer_ids``).

A **named** producer (a connector task's) is a transactional id with a lease: the transaction coordinator keeps
its producer id and epoch (``server.transactions``), and raises the id's epoch here at each claim
(:meth:`ProducerIds.raise_epoch`), so that a partition that loads afterwards fences the older instances from this
record alone. Named producers of before that (``named``) are taken over by the coordinator at their next claim,
with their id, epoch and lease.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import posixpath
import secrets
from typing import Final, Protocol

import orjson

from fencing import FileSystem
from server.errors import ApiError

__all__ = [
    "Lease",
    "OwnerCache",
    "ProducerIds",
    "StorageProducerIds",
    "UNKNOWN",
    "name_key",
    "new_producer_id",
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

    def raise_epoch(self, producer_id: int, epoch: int) -> None:
        """The id's epoch is at least ``epoch`` from now on (the coordinator's newest, for :meth:`newer_epoch`).
        Does I/O."""

    def named(self, tenant: str | None, name: str) -> tuple[int, int, Lease | None] | None:
        """A named producer claimed before the coordinator kept them: (its id, that id's epoch, its lease if
        kept), or None. Does I/O."""


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

    def raise_epoch(self, producer_id: int, epoch: int) -> None:
        epochs = self._epochs(producer_id)
        if not epochs:
            raise unknown_producer(producer_id)
        top = max(epochs)
        # The next epoch's file too: newer_epoch(e) looks for e + 1, so every epoch up to ``top`` finds it.
        for wanted in sorted({top + 1, epoch}):
            if top < wanted <= epoch:
                with contextlib.suppress(FileExistsError):
                    self._fs.publish(self._path(producer_id, wanted), b"{}")

    def named(self, tenant: str | None, name: str) -> tuple[int, int, Lease | None] | None:
        # Leases lived in the memory of the one process a standalone storage has: none survives.
        try:
            data = self._fs.read(posixpath.join(self._dir, "named", name_key(tenant, name)))
        except FileNotFoundError:
            return None
        producer_id = int(orjson.loads(data)["producer_id"])
        epochs = self._epochs(producer_id)
        return (producer_id, max(epochs), None) if epochs else None
