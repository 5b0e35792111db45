"""Fetch and ListOffsets.

A partition's stored batches come from the same code as REST's fetch (:func:`server.messaging.fetch.read_batches`:
the tail cache or the segments, within the tenant's fetch quota, metered) and become Kafka record batches
(``server.kafka.records``). A Fetch with nothing to return waits, up to ``max_wait_ms``, for the first of its
partitions to get a message (a long poll over all of them), then reads again.

No fetch sessions (KIP-227): the answer's session id is 0, which tells a client to send full requests.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from fencing import OffsetOutOfRangeError
from server.broker import NotOwnerError
from server.errors import ApiError
from server.kafka.context import Context
from server.kafka.failures import error_code
from server.kafka.protocol.errors import ErrorCode
from server.kafka.records import KafkaRecordError, talos_to_kafka
from server.messaging.authorization import authorize_message
from server.messaging.fetch import read_batches
from server.partition.loaded import LoadedPartition

__all__ = ["fetch", "list_offsets"]

_MAX_FETCH_BYTES = 64 * 1024 * 1024  # what one answer reads at most, as REST's max_bytes (a client may ask 2 GiB)
_LATEST = -1
_EARLIEST = -2
_MAX_TIMESTAMP = -3


class _Read:
    """One partition of a Fetch: its answer so far, and the loaded partition to wait on."""

    __slots__ = ("answer", "committed", "loaded", "offset", "size", "topic")

    def __init__(self, topic: str, index: int, offset: int, committed: bool) -> None:
        self.topic = topic
        self.offset = offset
        self.committed = committed  # isolation level 1: below the last stable offset, aborted ones listed
        self.loaded: LoadedPartition | None = None
        self.size = 0
        self.answer: dict[str, Any] = {
            "partition_index": index,
            "error_code": 0,
            "high_watermark": -1,
            "last_stable_offset": -1,
            "log_start_offset": -1,
            "aborted_transactions": None,
            "preferred_read_replica": -1,
            "records": b"",
        }


async def _read(ctx: Context, read: _Read, max_bytes: int) -> None:
    broker = ctx.broker
    answer = read.answer
    index = answer["partition_index"]
    try:
        authorize_message(broker, ctx.session.principal, read.topic, "fetch")
        loaded = read.loaded = await broker.partition(read.topic, index)
        result = await read_batches(
            broker,
            loaded,
            ctx.session.caller,
            read.offset,
            max_bytes,
            0,
            committed=read.committed,
            keep_aborted=True,
        )
    except NotOwnerError:
        answer["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
        return
    except (ApiError, OffsetOutOfRangeError) as exc:
        answer["error_code"] = error_code(exc)
        return
    answer["high_watermark"] = result.high_watermark
    if read.committed:
        answer["last_stable_offset"] = result.last_stable_offset
        answer["aborted_transactions"] = [
            {"producer_id": t.producer_id, "first_offset": t.first_offset} for t in result.aborted or ()
        ]
    else:
        answer["last_stable_offset"] = loaded.last_stable_offset
    answer["log_start_offset"] = result.start_offset
    if result.batches:
        try:
            data = b"".join(result.batches)
            records = talos_to_kafka(data) if len(data) < 65536 else await loaded.on_read_pool(talos_to_kafka, data)
        except KafkaRecordError as exc:
            answer["error_code"] = exc.code
            return
        answer["records"] = records
        read.size = len(records)


async def fetch(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    config = ctx.broker.config
    wait_ms = max(0, min(body.get("max_wait_ms", 0), config.max_wait_ms))
    min_bytes = max(1, body.get("min_bytes", 1))
    budget = min(body.get("max_bytes") or _MAX_FETCH_BYTES, _MAX_FETCH_BYTES)
    committed = body.get("isolation_level", 0) == 1
    reads: list[tuple[_Read, int]] = [
        (
            _Read(topic["topic"], part["partition"], part["fetch_offset"], committed),
            max(1, min(part["partition_max_bytes"], _MAX_FETCH_BYTES)),
        )
        for topic in body.get("topics") or []
        for part in topic.get("partitions") or []
    ]
    await _read_all(ctx, reads, budget)
    if wait_ms and sum(r.size for r, _ in reads) < min_bytes and all(r.answer["error_code"] == 0 for r, _ in reads):
        waiting = [
            asyncio.ensure_future(r.loaded.wait_for_data(r.offset, wait_ms, committed=committed))
            for r, _ in reads
            if r.loaded is not None
        ]
        if waiting:
            done, pending = await asyncio.wait(waiting, timeout=wait_ms / 1000, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            for task in done:
                with contextlib.suppress(Exception):
                    task.result()
            if done:
                await _read_all(ctx, [(r, m) for r, m in reads if r.size == 0], budget)
    responses: dict[str, list[dict[str, Any]]] = {}
    for read, _ in reads:
        responses.setdefault(read.topic, []).append(read.answer)
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [{"topic": topic, "partitions": parts} for topic, parts in responses.items()],
    }


async def _read_all(ctx: Context, reads: list[tuple[_Read, int]], budget: int) -> None:
    """Read each partition, at most ``budget`` bytes in all (but the first batch, as Kafka does)."""
    if len(reads) == 1:
        read, limit = reads[0]
        await _read(ctx, read, min(limit, budget))
        return
    share = max(1, budget // max(1, len(reads)))
    await asyncio.gather(*(_read(ctx, read, min(limit, share)) for read, limit in reads))


async def list_offsets(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    topics = []
    for topic in body.get("topics") or []:
        committed = body.get("isolation_level", 0) == 1
        parts = [await _offset(ctx, topic["name"], part, committed) for part in topic.get("partitions") or []]
        topics.append({"name": topic["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


async def _offset(ctx: Context, topic: str, part: dict[str, Any], committed: bool) -> dict[str, Any]:
    """One partition's offset at a time; ``committed`` (isolation level 1): none at or past the last stable
    offset (the latest is the last stable offset)."""
    broker = ctx.broker
    index, timestamp = part["partition_index"], part["timestamp"]
    answer: dict[str, Any] = {
        "partition_index": index,
        "error_code": 0,
        "timestamp": -1,
        "offset": -1,
        "leader_epoch": -1,
    }
    try:
        authorize_message(broker, ctx.session.principal, topic, "offsets")
        loaded = await broker.partition(topic, index)
    except NotOwnerError:
        answer["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
        return answer
    except ApiError as exc:
        answer["error_code"] = error_code(exc)
        return answer
    log = loaded.log
    end = loaded.last_stable_offset if committed else log.durable_offset
    if timestamp == _EARLIEST:
        answer["offset"] = log.start_offset
    elif timestamp in (_LATEST, _MAX_TIMESTAMP):
        answer["offset"] = end
    else:
        found = await loaded.offset_for_timestamp(timestamp)
        if found < end:
            answer.update(offset=found, timestamp=timestamp)
    answer["old_style_offsets"] = [answer["offset"]]
    return answer
