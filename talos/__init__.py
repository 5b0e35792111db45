"""Talos: a message queue with compute separated from storage.

The public SDK. Implementation lives in private modules; everything a user needs is re-exported here.
"""

from __future__ import annotations

from talos._codec import (
    HEADER_SIZE,
    BatchHeader,
    Record,
    RecordData,
    crc32c,
    decode_records,
    encode_batch,
    iter_batches,
    read_header,
    set_base_offset,
    verify_batch,
)
from talos._errors import BatchError, CorruptBatchError, TalosError, TruncatedBatchError

__version__ = "0.1.0"

__all__ = [
    "HEADER_SIZE",
    "BatchError",
    "BatchHeader",
    "CorruptBatchError",
    "Record",
    "RecordData",
    "TalosError",
    "TruncatedBatchError",
    "__version__",
    "crc32c",
    "decode_records",
    "encode_batch",
    "iter_batches",
    "read_header",
    "set_base_offset",
    "verify_batch",
]
