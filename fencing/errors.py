"""Errors of the storage layer.

Tree::

    talos.TalosError
     └── LogError
          ├── FencedError            a newer epoch owns the partition: this writer must stop (retriable
          │                          for clients: the partition moved)
          ├── StorageError           the filesystem failed; the log accepts no more writes
          ├── LogCorruptError        the directory's segments do not form one contiguous log
          └── OffsetOutOfRangeError  a read below the log start or beyond the durable end
"""

from __future__ import annotations

from talos import TalosError

__all__ = ["FencedError", "LogCorruptError", "LogError", "OffsetOutOfRangeError", "StorageError"]


class LogError(TalosError):
    """Base of the partition-log errors."""


class FencedError(LogError):
    """A writer with a newer epoch has taken the partition over; nothing more may be acknowledged."""


class StorageError(LogError):
    """The filesystem reported a failure."""


class LogCorruptError(LogError):
    """The segments of a partition directory do not form one contiguous log."""


class OffsetOutOfRangeError(LogError):
    def __init__(self, offset: int, earliest: int, latest: int) -> None:
        super().__init__(f"offset {offset} is outside [{earliest}, {latest}]")
        self.offset = offset
        self.earliest = earliest
        self.latest = latest
