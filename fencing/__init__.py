"""Partition storage: filesystem backends (POSIX, HDFS), the segment log and its single-writer protocol.

``PartitionLog.open`` is a fenced takeover: after it returns, no earlier owner of the directory can
acknowledge another write (see ``fencing.log`` and ARCHITECTURE.md, "Ownership and fencing").

Rooms: ``filesystem`` (the interface), ``errors``, ``local`` and ``hdfs`` (the backends), ``storage`` (the
factory that picks one from a URL, so the backends' common module imports neither), ``epochs``, ``segments``
and ``log``; ``bench`` and ``demo`` are command-line tools over them. May import ``talos`` (the codec); never
``server``.
"""

from __future__ import annotations

from fencing.epochs import DirectoryEpochSource, EpochSource, highest_epoch
from fencing.errors import FencedError, LogCorruptError, LogError, OffsetOutOfRangeError, StorageError
from fencing.filesystem import FileInfo, FileSystem, WritableFile
from fencing.log import LogConfig, PartitionLog, RecoveryReport, scan_valid_prefix
from fencing.segments import SegmentName
from fencing.storage import open_storage

__all__ = [
    "DirectoryEpochSource",
    "EpochSource",
    "FencedError",
    "FileInfo",
    "FileSystem",
    "LogConfig",
    "LogCorruptError",
    "LogError",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "RecoveryReport",
    "SegmentName",
    "StorageError",
    "WritableFile",
    "highest_epoch",
    "open_storage",
    "scan_valid_prefix",
]
