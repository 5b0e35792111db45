"""Reading a fixed offset range of one partition: the runner's checkpoints, a source's recovery scan, the Spark
source's splits. Committed transactions only (what a read-committed consumer sees): the range may end in
offsets that hold no message (markers, aborted transactions), which the reader steps over."""

from __future__ import annotations

import time
from collections.abc import Iterator

from talos import Admin, Consumer, Message

__all__ = ["read_range", "read_to_end"]


def read_range(
    url: str, topic: str, partition: int, start: int, end: int, *, timeout_s: float = 120.0
) -> Iterator[Message]:
    """The messages at offsets ``[start, end)`` (from the earliest kept, if retention removed ``start``), of
    committed transactions. Raises TimeoutError if ``timeout_s`` pass without one."""
    if start >= end:
        return
    deadline = time.monotonic() + timeout_s
    following = start  # the offset after the last message yielded
    with Consumer(url, partitions=[(topic, partition)], wait_ms=200, isolation="read_committed") as consumer:
        consumer.seek(topic, partition, start)
        # Count what was yielded, not the consumer's position: that is where it fetches next, past all it
        # has buffered and not handed out yet.
        while following < end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic}/{partition} [{start}, {end}): nothing for {timeout_s:.0f}s")
            messages = consumer.poll(timeout=1.0, max_messages=10_000)
            if not messages and consumer.position(topic, partition) >= end:
                return  # the rest of the range holds no message (markers, aborted transactions, compacted)
            for message in messages:
                deadline = time.monotonic() + timeout_s
                if message.offset >= end:
                    return
                following = message.offset + 1
                yield message


def read_to_end(url: str, topic: str, partition: int, start: int | None = None) -> Iterator[Message]:
    """Everything from ``start`` (default: the earliest offset) to the high watermark of now."""
    with Admin(url) as admin:
        bounds = admin.offsets(topic, partition)
    end = bounds.get("last_stable", bounds["latest"])  # a read-committed reader's end: below it all is decided
    yield from read_range(url, topic, partition, bounds["earliest"] if start is None else start, end)
