"""Cutting a fetch answer down to what a fetch quota has left. Pure.

Batches are what the log stores and serves whole; a producer's batch can hold a megabyte, many seconds
of a small quota. Served whole, one batch would make the admitted rate jump in steps that size. So when
an answer is over the allowance, the whole batches that fit are kept and the next one is re-encoded with
only as many of its records as fit (at least one record, so a consumer always moves on).
"""

from __future__ import annotations

from collections.abc import Sequence

from talos import BatchError, decode_records, read_header
from talos._codec import rebatch

__all__ = ["trim_to_allowance"]


def trim_to_allowance(
    batches: Sequence[bytes | bytearray], offset: int, allowance: int, max_decompressed: int
) -> list[bytes | bytearray]:
    """The batches, from ``offset``, holding at most ``allowance`` bytes (but at least one record). A
    compressed batch is decompressed up to ``max_decompressed`` bytes to cut it; one that takes more is
    served whole, as a corrupt one is, for its reader to decode or step over."""
    out: list[bytes | bytearray] = []
    used = 0
    for batch in batches:
        if used + len(batch) <= allowance:
            out.append(batch)
            used += len(batch)
            continue
        try:
            decoded = decode_records(batch, verify=False, max_decompressed=max_decompressed)
        except BatchError:  # a corrupt stored batch: served as it is, for the reader to step over
            out.append(batch)
            break
        records = [r for r in decoded if r.offset >= offset]
        kept = 0
        size = 0
        for record in records:
            cost = len(record.value or b"") + len(record.key or b"") + 16
            if (kept or out) and used + size + cost > allowance:
                break
            kept += 1
            size += cost
        if kept:  # with the batch's producer fields and flags: a reader filters a transaction's by them
            out.append(rebatch(read_header(batch), records[:kept]))
        break
    return out if out else list(batches[:1])
