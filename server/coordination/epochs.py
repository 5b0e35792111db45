"""Partition epochs by compare-and-set on ``/talos/partitions/<topic>/<p>`` (a ``fencing.EpochSource``).

Step 1 of a takeover (ARCHITECTURE.md): bump the epoch and name the new owner, but refuse if the node
was last written under a newer ring than the taker's: a server acting on an old ring must not steal the
partition back from the owner that a newer ring chose.
"""

from __future__ import annotations

import orjson
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from fencing import FencedError
from server.coordination import paths

__all__ = ["StaleRingError", "ZkEpochSource"]


class StaleRingError(FencedError):
    """The partition was assigned under a newer ring than the one this server acts on."""


class ZkEpochSource:
    def __init__(self, zk: KazooClient, topic: str, partition: int, *, owner: str, ring_version: int) -> None:
        self._zk = zk
        self._path = paths.partition(topic, partition)
        self._owner = owner
        self._ring_version = ring_version

    def current(self) -> dict[str, object] | None:
        try:
            data, _stat = self._zk.get(self._path)
        except NoNodeError:
            return None
        value = orjson.loads(data)
        return value if isinstance(value, dict) else None

    def next_epoch(self) -> int:
        while True:
            try:
                data, stat = self._zk.get(self._path)
            except NoNodeError:
                record = {"epoch": 1, "owner": self._owner, "ring_version": self._ring_version}
                try:
                    self._zk.create(self._path, orjson.dumps(record), makepath=True)
                except NodeExistsError:
                    continue  # another server created it first: read it and try again
                return 1
            stored = orjson.loads(data)
            if int(stored.get("ring_version", 0)) > self._ring_version:
                raise StaleRingError(
                    f"{self._path} was assigned under ring version {stored['ring_version']}, "
                    f"newer than this server's {self._ring_version}"
                )
            epoch = int(stored.get("epoch", 0)) + 1
            record = {"epoch": epoch, "owner": self._owner, "ring_version": self._ring_version}
            try:
                self._zk.set(self._path, orjson.dumps(record), version=stat.version)
            except BadVersionError:
                continue  # lost the race: the next read sees the winner's epoch
            return epoch
