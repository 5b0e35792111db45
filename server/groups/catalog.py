"""The names of the groups that ever joined (for ``GET /v1/groups``): ZooKeeper children in a cluster,
directories in the storage when standalone. Their state is in ``__consumer_offsets``, not here."""

from __future__ import annotations

import contextlib
import posixpath
from typing import Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from fencing import FileSystem
from server.coordination import paths

__all__ = ["GroupCatalog", "StorageGroupCatalog", "ZkGroupCatalog"]


class GroupCatalog(Protocol):
    def register(self, name: str) -> None: ...

    def unregister(self, name: str) -> None: ...

    def list(self) -> list[str]: ...


class StorageGroupCatalog:
    def __init__(self, fs: FileSystem, root: str) -> None:
        self._fs = fs
        self._dir = posixpath.join(root, "groups")

    def register(self, name: str) -> None:
        self._fs.mkdirs(posixpath.join(self._dir, name))

    def unregister(self, name: str) -> None:
        self._fs.delete(posixpath.join(self._dir, name), recursive=True)

    def list(self) -> list[str]:
        if not self._fs.exists(self._dir):
            return []
        return [info.name for info in self._fs.list(self._dir) if info.is_dir]


class ZkGroupCatalog:
    def __init__(self, zk: KazooClient) -> None:
        self._zk = zk

    def register(self, name: str) -> None:
        self._zk.ensure_path(f"{paths.GROUPS}/{name}")

    def unregister(self, name: str) -> None:
        with contextlib.suppress(NoNodeError):
            self._zk.delete(f"{paths.GROUPS}/{name}", recursive=True)

    def list(self) -> list[str]:
        return sorted(self._zk.get_children(paths.GROUPS)) if self._zk.exists(paths.GROUPS) else []
