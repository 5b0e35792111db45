"""Where a new owner's epoch comes from.

The takeover protocol only needs a number higher than any epoch handed out before for the partition.
In a cluster that is the CAS on ``/talos/partitions/<topic>/<p>`` in ZooKeeper; on one node (or in tests)
the markers already in the directory are enough, because creating the marker is exclusive.
"""

from __future__ import annotations

import posixpath
from typing import Protocol

from fencing.filesystem import FileSystem
from fencing.segments import EPOCH_DIR, parse_epoch_marker

__all__ = ["DirectoryEpochSource", "EpochSource", "highest_epoch"]


class EpochSource(Protocol):
    def next_epoch(self) -> int:
        """An epoch higher than every epoch granted before for this partition."""


def highest_epoch(fs: FileSystem, partition_dir: str) -> int:
    """The highest epoch marker in the directory, 0 if none."""
    try:
        entries = fs.list(posixpath.join(partition_dir, EPOCH_DIR))
    except FileNotFoundError:
        return 0
    return max((e for e in (parse_epoch_marker(i.name) for i in entries) if e is not None), default=0)


class DirectoryEpochSource:
    """The next epoch after the highest marker in the partition directory."""

    def __init__(self, fs: FileSystem, partition_dir: str) -> None:
        self._fs = fs
        self._dir = partition_dir

    def next_epoch(self) -> int:
        return highest_epoch(self._fs, self._dir) + 1
