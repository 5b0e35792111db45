"""The security document in the storage every server shares: ``<root>/_security/<version>.json``.

A change reads the newest version, applies a pure function to it and writes the next version aside,
then renames it into place; the rename refuses to replace a file, so of two servers changing it at once
one wins and the other applies its change again to the winner's version. Old versions are pruned (a
writer that stalled past the pruning sees that its base is gone and applies its change again).
Other servers see a change when they next re-read the newest version (``Security.refresh``).
"""

from __future__ import annotations

import dataclasses
import posixpath
import random
import time
from collections.abc import Callable

import orjson

from fencing import FileSystem
from server.errors import ApiError
from server.security.state import SecurityState

__all__ = ["SecurityStore"]

_KEEP = 10
_ATTEMPTS = 50


class SecurityStore:
    def __init__(self, fs: FileSystem, root: str) -> None:
        self._fs = fs
        self._dir = posixpath.join(root, "_security")
        self._fs.mkdirs(self._dir)

    def _versions(self) -> list[int]:
        names = [entry.name for entry in self._fs.list(self._dir)]
        return sorted(int(n.split(".")[0]) for n in names if n.endswith(".json") and n.split(".")[0].isdigit())

    def _path(self, version: int) -> str:
        return posixpath.join(self._dir, f"{version:010d}.json")

    def load(self) -> SecurityState:
        for version in reversed(self._versions()):
            try:
                return SecurityState.from_json(orjson.loads(self._fs.read(self._path(version))))
            except FileNotFoundError:
                continue  # pruned while we listed: the next newest
        return SecurityState()

    def change(self, apply: Callable[[SecurityState], SecurityState]) -> SecurityState:
        """Apply ``apply`` to the newest version and store the result as the next one."""
        for attempt in range(_ATTEMPTS):
            current = self.load()
            changed = dataclasses.replace(apply(current), version=current.version + 1)
            path = self._path(changed.version)
            try:
                self._fs.publish(path, orjson.dumps(changed.to_json()))
            except FileExistsError:
                time.sleep(random.uniform(0, 0.005 * (attempt + 1)))  # another server's change won: apply ours to it
                continue
            if self._stale(current.version, changed.version):
                self._fs.delete(path)
                continue
            self._prune(changed.version)
            return changed
        raise ApiError(409, "CONFLICT", "the security settings changed concurrently; retry", retriable=True)

    def _stale(self, base: int, written: int) -> bool:
        """Whether ``written`` landed below versions written since: a writer that stalled while others
        wrote and pruned more than ``_KEEP`` versions. Pruning deletes in ascending order, so if the
        version ours was based on is gone, so was the one ours re-created."""
        if base > 0:
            return not self._fs.exists(self._path(base))
        return max(self._versions(), default=written) >= written + _KEEP

    def _prune(self, newest: int) -> None:
        for version in self._versions():
            if version <= newest - _KEEP:
                self._fs.delete(self._path(version))
