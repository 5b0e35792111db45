"""Key → partition, Swift style: 65536 slots, each partition serving one contiguous slot range."""

from __future__ import annotations

from talos._codec import crc32c

__all__ = ["SLOTS", "partition_for_key", "slot_for_key", "slot_range"]

SLOTS = 65536


def slot_for_key(key: bytes) -> int:
    return crc32c(key) % SLOTS


def slot_range(partition: int, partitions: int) -> tuple[int, int]:
    """The slots ``[start, end)`` partition ``partition`` of ``partitions`` serves."""
    return partition * SLOTS // partitions, (partition + 1) * SLOTS // partitions


def partition_for_key(key: bytes, partitions: int) -> int:
    # The inverse of slot_range: the p with start(p) <= slot < start(p + 1).
    return (slot_for_key(key) * partitions + partitions - 1) // SLOTS if partitions > 1 else 0
