"""Producer ids for idempotent producers, allocated by the cluster, and their epochs and owners.

``allocate(None, tenant)`` gives a new id at epoch 0, owned by ``tenant`` (None: the admin, or auth is
off); ``allocate(id, tenant)`` gives the same id at the next epoch, which fences the id's earlier instance
on every partition the new one writes to. Ids are random 63-bit numbers, so one tenant cannot guess
another's, and an id never changes owner, so servers cache the owner once looked up. Standalone keeps
them as files created exclusively in the storage (``<root>/_producers/<id>.<epoch>``, the owner as JSON
in epoch 0's); a cluster keeps them in ZooKeeper (``server.coordination.producer_ids``).
"""

from __future__ import annotations

import posixpath
import secrets
from typing import Final, Protocol

import orjson

from fencing import FileSystem
from server.errors import ApiError

__all__ = ["OwnerCache", "ProducerIds", "StorageProducerIds", "UNKNOWN", "new_producer_id", "unknown_producer"]

UNKNOWN: Final = "\0unknown"  # OwnerCache.get's answer for an id not cached (no tenant name has a NUL)
_CACHED_IDS = 100_000  # one entry per producer instance that wrote here; past this the cache starts over


class ProducerIds(Protocol):
    owners: OwnerCache

    def allocate(self, producer_id: int | None, tenant: str | None) -> tuple[int, int]:
        """(producer id, epoch); 404 for an id unknown or owned by another tenant (the same answer)."""

    def owner_of(self, producer_id: int) -> str | None:
        """The tenant that owns the id (None: the admin); 404 if it was never allocated. Does I/O."""


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
            data = self._fs.read(posixpath.join(self._dir, f"{producer_id}.0"))
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
                self._fs.publish(posixpath.join(self._dir, f"{candidate[0]}.{candidate[1]}"), record)
            except FileExistsError:
                continue  # a collision, or another request took this epoch: look again
            if producer_id is None:
                self.owners.put(candidate[0], tenant)
            return candidate
        raise ApiError(503, "CONFLICT", "producer id allocation kept conflicting; retry", retriable=True)
