"""Producer ids for idempotent producers, allocated by the cluster, and their epochs.

``allocate(None)`` gives a new id at epoch 0; ``allocate(id)`` gives the same id at the next epoch, which
fences the id's earlier instance on every partition the new one writes to. Standalone keeps them as
empty files created exclusively in the storage (``<root>/_producers/<id>.<epoch>``); a cluster keeps them
in ZooKeeper (``server.coordination.producer_ids``).
"""

from __future__ import annotations

import posixpath
from typing import Protocol

from fencing import FileSystem
from server.errors import ApiError

__all__ = ["ProducerIds", "StorageProducerIds", "unknown_producer"]


class ProducerIds(Protocol):
    def allocate(self, producer_id: int | None) -> tuple[int, int]:
        """(producer id, epoch)."""


def unknown_producer(producer_id: int) -> ApiError:
    return ApiError(404, "UNKNOWN_PRODUCER", f"producer id {producer_id} was never allocated")


class StorageProducerIds:
    def __init__(self, fs: FileSystem, root: str) -> None:
        self._fs = fs
        self._dir = posixpath.join(root, "_producers")
        fs.mkdirs(self._dir)

    def _taken(self) -> list[tuple[int, int]]:
        out = []
        for entry in self._fs.list(self._dir):
            pid, _, epoch = entry.name.partition(".")
            if pid.isdigit() and epoch.isdigit():
                out.append((int(pid), int(epoch)))
        return out

    def allocate(self, producer_id: int | None) -> tuple[int, int]:
        for _attempt in range(100):
            taken = self._taken()
            if producer_id is None:
                candidate = (max((pid for pid, _ in taken), default=-1) + 1, 0)
            else:
                epochs = [epoch for pid, epoch in taken if pid == producer_id]
                if not epochs:
                    raise unknown_producer(producer_id)
                candidate = (producer_id, max(epochs) + 1)
            try:
                self._fs.write_file(posixpath.join(self._dir, f"{candidate[0]}.{candidate[1]}"), b"")
            except FileExistsError:
                continue  # another request took it: look again
            return candidate
        raise ApiError(503, "CONFLICT", "producer id allocation kept conflicting; retry", retriable=True)
