"""Fetch: stored batches read on the partition's owner as a caller (within its fetch quota, paid, metered), or
asked of the owner when the partition is another server's; what a fetch's batches hold."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from typing import NamedTuple

from server import metrics
from server.broker import Broker, NotOwnerError
from server.config import ServerConfig
from server.messaging.admission import Metered, admit
from server.messaging.caller import Caller
from server.messaging.forwarder import BATCH_CONTENT_TYPE, answer_of, call_partition
from server.partition.loaded import FetchResult, LoadedPartition
from server.security.guard import allowance, pay
from server.security.trim import trim_to_allowance
from talos import BatchError, BatchHeader, iter_batches

__all__ = [
    "Fetched",
    "batch_headers",
    "decompression_limit",
    "fetch_batches",
    "holds_compressed",
    "messages_from",
    "read_batches",
    "read_batches_now",
    "trace_delivered",
]


class Fetched(NamedTuple):
    """A fetch's stored batches as one buffer, wherever the partition is."""

    body: bytes
    high_watermark: int
    start_offset: int
    last_stable_offset: int = -1  # -1: a read-uncommitted fetch
    next_offset: int = -1  # where to go on from, when past the last batch given (read committed)


def decompression_limit(config: ServerConfig) -> int:
    """The most bytes of records the server decompresses from one batch (for a JSON answer or a quota's cut).

    The server stores compressed batches without decompressing them, so one of a few KiB can hold a
    decompression bomb; readers bound it (the SDK at 64 MiB, its own CPU). On the server the reader is one
    fetch, billed the batch's stored bytes, on behalf of every tenant's event loop: it gets twice the largest
    request the server takes (16 MiB by default), more than a producer's batch holds uncompressed."""
    return 2 * config.max_request_bytes


async def read_batches(
    broker: Broker,
    loaded: LoadedPartition,
    caller: Caller,
    offset: int,
    max_bytes: int,
    wait_ms: int,
    *,
    committed: bool = False,
    keep_aborted: bool = False,
    until: int | None = None,
) -> FetchResult:
    """Stored batches from ``offset`` on this partition's owner, as ``caller``: within its fetch quota (paid),
    metered; ``committed``: decided transactions only (``keep_aborted``, ``until``: see
    ``LoadedPartition.fetch``). One implementation for REST's fetch, the Kafka listener and the coordinators."""
    topic, partition = loaded.topic, loaded.index
    buckets = admit(broker, caller, topic, "fetch")
    if buckets:  # read no more than the quota has left
        max_bytes = max(1, min(max_bytes, allowance(buckets)))
    with Metered(broker, caller, topic, partition) as usage:
        result = await loaded.fetch(
            offset, max_bytes, wait_ms, committed=committed, keep_aborted=keep_aborted, until=until
        )
        batches = result.batches
        if buckets:  # a whole batch can be seconds of a small quota: serve only the records that fit
            batches = trim_to_allowance(batches, offset, allowance(buckets), decompression_limit(broker.config))
        size = sum(len(b) for b in batches)
        await pay(buckets, size)
        usage.update(bytes_out=size, messages_out=messages_from(batches, offset))
    metrics.fetched(topic, size)
    if batches is not result.batches:  # cut short: the reader goes on from the cut, not past what was left out
        result = dataclasses.replace(result, batches=batches, next_offset=-1)
    return result


def read_batches_now(
    broker: Broker,
    loaded: LoadedPartition,
    caller: Caller,
    offset: int,
    max_bytes: int,
    wait_ms: int,
    *,
    json: bool,
    until: int | None = None,
) -> FetchResult | None:
    """:func:`read_batches` (read-uncommitted) without an await: what the tail cache holds from ``offset``
    (``LoadedPartition.fetch_now``), metered. None, with nothing metered, if it needs an await: a rate quota on
    this server (paying may hold the fetch), a read of the storage, a wait for messages, or (``json``: the
    answer decodes the batches on the event loop) a compressed batch, decompressed on the read pool."""
    if broker.security.rates_limited:
        return None
    result = loaded.fetch_now(offset, max_bytes, wait_ms, until)
    if result is None or (json and holds_compressed(result.batches)):
        return None
    batches, topic = result.batches, loaded.topic
    size = sum(len(b) for b in batches)
    sizes = {"bytes_out": size, "messages_out": messages_from(batches, offset)}
    broker.usage.record((caller.billed, topic, loaded.index), started=time.monotonic(), sizes=sizes)
    metrics.fetched(topic, size)
    return result


async def fetch_batches(
    broker: Broker,
    caller: Caller,
    topic: str,
    partition: int,
    offset: int,
    max_bytes: int,
    wait_ms: int = 0,
    *,
    committed: bool = False,
) -> Fetched:
    """Stored batches from ``offset``, read here or asked of the partition's owner. Out of range: here
    :class:`fencing.OffsetOutOfRangeError`, from the owner the :class:`ApiError` it answered (416)."""
    try:
        loaded = await broker.partition(topic, partition)
    except NotOwnerError as exc:
        query = {"offset": str(offset), "max_bytes": str(max_bytes)}
        if wait_ms:
            query["wait_ms"] = str(wait_ms)
        if committed:
            query["isolation"] = "read_committed"
        reply = await call_partition(
            broker.forwarder,
            caller,
            exc.owner,
            "GET",
            topic,
            partition,
            "messages",
            query=query,
            accept=BATCH_CONTENT_TYPE,
            extra_timeout_s=wait_ms / 1000,
        )
        if reply.status != 200:
            answer_of(reply)  # raises the owner's error
        marks = reply.headers
        return Fetched(
            reply.body,
            int(marks.get("x-talos-high-watermark", -1)),
            int(marks.get("x-talos-start-offset", -1)),
            int(marks.get("x-talos-last-stable-offset", -1)),
            int(marks.get("x-talos-next-offset", -1)),
        )
    result = await read_batches(broker, loaded, caller, offset, max_bytes, wait_ms, committed=committed)
    return Fetched(
        b"".join(result.batches),
        result.high_watermark,
        result.start_offset,
        result.last_stable_offset,
        result.next_offset,
    )


def batch_headers(batches: list[bytes | bytearray]) -> Iterator[BatchHeader]:
    """The header of every batch of a fetch's buffers (a read from storage is one buffer of many batches, the
    tail cache gives one per batch). An unreadable header ends its buffer, as it ends a JSON answer there."""
    for buffer in batches:
        with contextlib.suppress(BatchError):
            for _, header in iter_batches(buffer, verify=False):
                yield header


def messages_from(batches: list[bytes | bytearray], offset: int) -> int:
    """How many messages at or after ``offset`` the fetched ``batches`` hold (what a fetch meters as
    ``messages_out``): the first batch may start before ``offset``, and its earlier messages are not sent on."""
    return sum(h.next_offset - max(h.base_offset, offset) for h in batch_headers(batches) if h.next_offset > offset)


def holds_compressed(batches: list[bytes | bytearray]) -> bool:
    """Whether a fetch's batches hold a compressed one."""
    return any(header.codec for header in batch_headers(batches))


def trace_delivered(
    broker: Broker, topic: str, partition: int, offset: int, next_offset: int, group: str | None, member: str | None
) -> None:
    """A consumer group's member got ``offset``..``next_offset - 1`` (a fetch that names its group and member,
    as the SDK's consumer does); other fetches are not deliveries to anyone."""
    if group is not None and next_offset > offset and broker.trace_sample(topic):
        broker.trace.record(topic, partition, offset, "delivered", last=next_offset - 1, group=group, member=member)
