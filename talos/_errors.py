"""The SDK's exceptions.

Tree::

    TalosError
     └── BatchError                 a record batch cannot be used
          ├── CorruptBatchError     bad magic, CRC mismatch, impossible lengths or fields
          └── TruncatedBatchError   the buffer ends inside the batch (a torn write)
"""

from __future__ import annotations

__all__ = ["BatchError", "CorruptBatchError", "TalosError", "TruncatedBatchError"]


class TalosError(Exception):
    """Base class of every error Talos raises."""


class BatchError(TalosError):
    """A record batch cannot be used."""


class CorruptBatchError(BatchError):
    """The batch's bytes are damaged: bad magic, CRC mismatch, impossible lengths or fields."""


class TruncatedBatchError(BatchError):
    """The buffer ends inside the batch, as after a torn write."""
