"""Small helpers shared by the storage tests."""

from __future__ import annotations

from fencing import PartitionLog
from talos import decode_records, iter_batches


def decoded(data: bytes) -> list[tuple[int, bytes | None]]:
    """``(offset, value)`` of every record in a buffer of batches."""
    return [(r.offset, r.value) for pos, _ in iter_batches(data) for r in decode_records(data, pos)]


def read_all(plog: PartitionLog) -> list[tuple[int, bytes | None]]:
    """Every durable record from the start of the log (a read stays inside one segment: loop)."""
    out: list[tuple[int, bytes | None]] = []
    offset = plog.start_offset
    while offset < plog.durable_offset:
        chunk = [item for item in decoded(plog.read(offset, 1 << 20)) if item[0] >= offset]
        out.extend(chunk)
        offset = chunk[-1][0] + 1
    return out
