"""Produce, fetch and offsets: the hot endpoints, as plain functions of (query, headers, body) → Reply.

The FastAPI routes (for OpenAPI and any request the fast path does not take) and the raw ASGI fast path
(``server.http.fastpath``) both call these, so there is one implementation. Raw body, ``orjson``, no model per
message; records are parsed only where JSON demands it (the binary batch path never parses records).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import re
import time
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

import orjson

from server import metrics
from server.broker import Broker, NotOwnerError
from server.cluster import Owner
from server.config import ServerConfig
from server.errors import ApiError
from server.http.forwarding import HOPS_HEADER
from server.http.reply import JSON, Reply, answer_of
from server.partition.loaded import FetchResult, LoadedPartition, ProduceResult
from server.partition.producer_ids import UNKNOWN
from server.security.buckets import TokenBucket
from server.security.guard import allowance, pay
from server.security.trim import trim_to_allowance
from server.topics import TopicConfig
from server.trace.recorder import CLIENT_HEADER, SIDE_PREFIXES
from server.usage.meter import TENANT_HEADER, tenant_of
from talos import (
    BatchError,
    BatchHeader,
    DecodedBatch,
    Record,
    RecordData,
    decode_batches,
    encode_batch,
    iter_batches,
    partition_for_key,
    read_header,
    validate_batch,
)

__all__ = [
    "BATCH_CONTENT_TYPE",
    "JSON",
    "Reply",
    "batch_spans",
    "decompression_limit",
    "fetch",
    "message_json",
    "offsets",
    "partition_path",
    "produce",
    "read_batches",
    "store_batches",
]

BATCH_CONTENT_TYPE = "application/vnd.talos.batch"

log = logging.getLogger(__name__)
# Every integer a client sends ends in a signed 64-bit field (batch header, JSON documents via orjson).
INT64_MAX = 2**63 - 1
_INTEGER = re.compile(r"-?[0-9]{1,19}")


def int_param(
    query: Mapping[str, str], name: str, default: int | None, *, low: int = 0, high: int | None = None
) -> int:
    raw = query.get(name)
    if raw is None:
        if default is None:
            raise ApiError(400, "INVALID_REQUEST", f"query parameter {name!r} is required")
        return default
    if not _INTEGER.fullmatch(raw):  # int() also takes "٣", " 5", "1_0" and thousands of digits
        raise ApiError(400, "INVALID_REQUEST", f"{name} must be an integer, got {raw[:50]!r}")
    value = int(raw)
    if value < low or value > (high if high is not None else INT64_MAX):
        bound = f"between {low} and {high if high is not None else INT64_MAX}"
        raise ApiError(400, "INVALID_REQUEST", f"{name} must be {bound}, got {value}")
    return value


def _bytes_field(message: dict[str, Any], name: str, index: int) -> bytes | None:
    """``name`` as a UTF-8 string or ``name_b64`` as base64; None when neither is there."""
    text = message.get(name)
    encoded = message.get(f"{name}_b64")
    if text is not None and encoded is not None:
        raise ApiError(400, "INVALID_REQUEST", f"messages[{index}]: give {name} or {name}_b64, not both")
    if encoded is not None:
        if not isinstance(encoded, str):
            raise ApiError(400, "INVALID_REQUEST", f"messages[{index}].{name}_b64 must be a base64 string")
        try:
            return base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(400, "INVALID_REQUEST", f"messages[{index}].{name}_b64 is not valid base64") from None
    if text is None:
        return None
    if not isinstance(text, str):
        raise ApiError(400, "INVALID_REQUEST", f"messages[{index}].{name} must be a string (binary: {name}_b64)")
    return text.encode()


def _parse_messages(doc: object, max_message: int) -> tuple[list[tuple[int | None, RecordData]], bool]:
    if type(doc) is dict and len(doc) == 1:  # the common call, one text value: what the loop below makes of it
        messages = doc.get("messages")
        if type(messages) is list and len(messages) == 1 and type(only := messages[0]) is dict and len(only) == 1:
            value = only.get("value")
            if type(value) is str and len(value) <= max_message:  # chars: at most 4 bytes each, checked below
                data = value.encode()
                if len(data) <= max_message:
                    return [(None, RecordData(data, None, [], None))], True
    if not isinstance(doc, dict):
        raise ApiError(400, "INVALID_REQUEST", "the body must be a JSON object with a 'messages' array")
    messages = doc.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "INVALID_REQUEST", "'messages' must be a non-empty array")
    acks = doc.get("acks", "durable")
    if acks not in ("durable", "accepted"):
        raise ApiError(400, "INVALID_REQUEST", "'acks' must be 'durable' or 'accepted'")
    out: list[tuple[int | None, RecordData]] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ApiError(400, "INVALID_REQUEST", f"messages[{index}] must be an object")
        if "value" not in message and "value_b64" not in message:
            raise ApiError(400, "INVALID_REQUEST", f"messages[{index}] needs 'value' or 'value_b64'")
        value = _bytes_field(message, "value", index)
        key = _bytes_field(message, "key", index)
        headers_in = message.get("headers") or {}
        if not isinstance(headers_in, dict) or not all(isinstance(v, str) or v is None for v in headers_in.values()):
            raise ApiError(400, "INVALID_REQUEST", f"messages[{index}].headers must map names to strings")
        headers = [(str(k), None if v is None else v.encode()) for k, v in headers_in.items()]
        partition = message.get("partition")
        if partition is not None and (not isinstance(partition, int) or isinstance(partition, bool)):
            raise ApiError(400, "INVALID_REQUEST", f"messages[{index}].partition must be an integer")
        timestamp = message.get("timestamp")
        if timestamp is not None and (
            not isinstance(timestamp, int) or isinstance(timestamp, bool) or not 0 <= timestamp <= INT64_MAX
        ):
            raise ApiError(400, "INVALID_REQUEST", f"messages[{index}].timestamp must be ms since the epoch")
        size = len(value or b"") + len(key or b"") + sum(len(k) + len(v or b"") for k, v in headers)
        if size > max_message:
            raise ApiError(413, "MESSAGE_TOO_LARGE", f"messages[{index}] has {size} bytes; the limit is {max_message}")
        out.append((partition, RecordData(value, key, headers, timestamp)))
    return out, acks == "durable"


def _check_session(loaded: LoadedPartition, query: Mapping[str, str]) -> None:
    """Swift's write protocol: a write that names a load session other than the current one is refused,
    with how far that session got durable, so the producer can resend exactly what was lost."""
    raw = query.get("session")
    if raw is None:
        return
    session = int_param(query, "session", None)
    if session != loaded.log.epoch:
        raise ApiError(
            409,
            "SESSION_CHANGED",
            f"the partition was reloaded (session {session} → {loaded.log.epoch}); resend what is not durable",
            retriable=True,
            details={
                "session": loaded.log.epoch,
                "session_end": loaded.log.durable_end_of(session),
                "checkpoint": loaded.log.durable_offset,
            },
        )


def _idempotence(doc: dict[str, Any]) -> dict[str, int]:
    """``producer_id``, ``producer_epoch`` and ``sequence`` (of the first message) of an idempotent request."""
    if doc.get("producer_id") is None:
        return {}
    fields: dict[str, int] = {}
    for public, name, default, high in (
        ("producer_id", "producer_id", None, 2**63 - 1),
        ("producer_epoch", "producer_epoch", 0, 2**15 - 1),
        ("sequence", "base_sequence", None, 2**31 - 1),
    ):
        value = doc.get(public, default)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= high:
            raise ApiError(400, "INVALID_REQUEST", f"{public} must be an integer in 0..{high} (with producer_id)")
        fields[name] = value
    return fields


async def _authorize_producers(broker: Broker, tenant: str, producer_ids: set[int]) -> None:
    """403 unless ``tenant`` owns every idempotent producer id it writes with: another tenant's id would
    let it fence that producer or make its next write look like a duplicate (acknowledged, never stored).
    Checked on the partition's owner before the sequence state is touched. An unknown id gets the same
    answer, so the check does not tell whether an id exists."""
    ids = broker.producer_ids
    for producer_id in producer_ids:
        if producer_id < 0:
            continue  # not idempotent
        owner = ids.owners.get(producer_id)
        if owner == UNKNOWN:
            with contextlib.suppress(ApiError):  # never allocated: stays UNKNOWN, refused below
                owner = await broker.io(ids.owner_of, producer_id)
        if owner != tenant:
            metrics.denied(403)
            raise ApiError(403, "FORBIDDEN", f"producer id {producer_id} does not belong to tenant {tenant!r}")


async def _forward_batch(
    broker: Broker,
    owner: Owner,
    topic: str,
    partition: int,
    batch: bytearray,
    durable: bool,
    headers: Mapping[str, str],
) -> ProduceResult:
    passed = {k: v for k, v in headers.items() if k in (HOPS_HEADER, TENANT_HEADER, CLIENT_HEADER, "authorization")}
    passed["content-type"] = BATCH_CONTENT_TYPE
    query = {"acks": "durable" if durable else "accepted"}
    reply = await _forward(broker, owner, "POST", topic, partition, "messages", passed, query, bytes(batch))
    results = answer_of(reply).get("results")
    if not results:
        raise ApiError(502, "FORWARD_FAILED", f"the owner's answer holds no result: {reply.body[:200]!r}")
    return ProduceResult.from_wire(results[0])


class _Metered:
    """Counts a request served here (the partition's owner) for metering; the body fills in ``sizes``. A class,
    not a generator-based context manager: it is on every produce and fetch."""

    __slots__ = ("_broker", "_key", "_started", "sizes")

    def __init__(self, broker: Broker, headers: Mapping[str, str], topic: str, partition: int) -> None:
        self._broker = broker
        self._key = (tenant_of(headers), topic, partition)
        self._started = time.monotonic()
        self.sizes: dict[str, int] = {}

    def __enter__(self) -> dict[str, int]:
        return self.sizes

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            self._broker.usage.record(self._key, started=self._started, sizes=self.sizes)
        else:
            self._broker.usage.record(self._key, started=self._started, error=True)


def _admit(broker: Broker, headers: Mapping[str, str], topic: str, kind: str) -> list[TokenBucket]:
    """Rate quotas, on the partition's owner (429 when over); the byte buckets to pay once sizes are known.
    Every byte a tenant causes counts, on internal topics (a group's retry and dead-letter topics) too; only
    the servers' own requests on their topics (the admin principal, no tenant named) are not limited."""
    if topic.startswith("__") and TENANT_HEADER not in headers:
        return []
    return broker.security.admit(tenant_of(headers), topic, kind)


def partition_path(topic: str, partition: int, leaf: str) -> str:
    return f"/v1/topics/{quote(topic, safe='')}/partitions/{partition}/{leaf}"


async def _forward(
    broker: Broker,
    owner: Owner,
    method: str,
    topic: str,
    partition: int,
    leaf: str,
    headers: Mapping[str, str],
    query: Mapping[str, str],
    body: bytes | None = None,
    extra_timeout_s: float = 0.0,
) -> Reply:
    return await broker.forwarder.send(
        owner,
        method,
        partition_path(topic, partition, leaf),
        query=query,
        headers=headers,
        body=body,
        extra_timeout_s=extra_timeout_s,
    )


async def _produce_json(
    broker: Broker,
    topic: str,
    fixed_partition: int | None,
    headers: Mapping[str, str],
    body: bytes | bytearray,
    config: TopicConfig | None = None,
) -> Reply:
    config = config or broker.topic(topic)
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, "INVALID_JSON", f"the body is not valid JSON: {exc}") from None
    messages, durable = _parse_messages(doc, broker.config.max_message_bytes)
    groups: dict[int, list[tuple[int, RecordData]]] = {}
    spread = -1  # the round-robin partition of messages with neither a partition nor a key, taken once
    for index, (requested, record) in enumerate(messages):
        if fixed_partition is not None:
            partition = fixed_partition
        elif requested is not None:
            partition = requested
        elif record.key is not None:
            partition = partition_for_key(record.key, config.partitions)
        else:
            if spread < 0:
                spread = broker.next_partition(config)
            partition = spread
        if not 0 <= partition < config.partitions:
            raise ApiError(404, "UNKNOWN_PARTITION", f"topic {topic!r} has partitions 0..{config.partitions - 1}")
        groups.setdefault(partition, []).append((index, record))
    producer = _idempotence(doc)
    if producer and len(groups) > 1:
        raise ApiError(400, "INVALID_REQUEST", "an idempotent request (producer_id) must go to one partition")
    # Admitted once, before any partition is written: a 429 must not leave part of the request stored.
    buckets = _admit(broker, headers, topic, "produce") if any(broker.owns(topic, p) for p in groups) else []

    async def commit(partition: int, items: list[tuple[int, RecordData]]) -> ProduceResult:
        # Encoded here, so the log need not check the CRC a second time.
        batch = bytearray(encode_batch([record for _, record in items], **producer))
        try:
            loaded = await broker.partition(topic, partition)
        except NotOwnerError as exc:  # another server's partition: hand it the batch, already encoded
            return await _forward_batch(broker, exc.owner, topic, partition, batch, durable, headers)
        if producer and broker.security.enabled and TENANT_HEADER in headers:
            await _authorize_producers(broker, headers[TENANT_HEADER], {producer["producer_id"]})
        with _Metered(broker, headers, topic, partition) as usage:
            usage.update(bytes_in=len(batch), messages_in=len(items))
            if buckets:
                await pay(buckets, len(batch))
            answer = await loaded.produce(batch, durable=durable, verify=False)
        _trace_produced(broker, topic, partition, [batch], [answer], headers, durable)
        return answer

    if len(groups) == 1:  # the common case: no gather
        answers = [await commit(*next(iter(groups.items())))]
    else:
        answers = await asyncio.gather(*(commit(p, items) for p, items in groups.items()))
    results: list[dict[str, object] | None] = [None] * len(messages)
    for (partition, items), answer in zip(groups.items(), answers, strict=True):
        base = answer.base_offset
        marks = answer.marks()
        for position, (index, _record) in enumerate(items):
            results[index] = {"partition": partition, "offset": base + position if base >= 0 else -1, **marks}
    metrics.produced(topic, len(messages), len(body))
    return Reply(200, orjson.dumps({"results": results}))


def batch_spans(body: bytes | bytearray) -> list[tuple[int, int, int]]:
    """``(position, length, record_count)`` of each batch of a binary produce body, every batch validated
    (CRC, header, each record's framing and the count) before anything of the request is queued: a batch
    that does not decode would make fetches of the partition fail, and a false count moves its offsets."""
    spans: list[tuple[int, int, int]] = []
    pos = 0
    try:
        while pos < len(body):
            header = validate_batch(body, pos)
            spans.append((pos, header.length, header.record_count))
            pos += header.length
    except BatchError as exc:
        raise ApiError(400, "CORRUPT_BATCH", f"invalid record batch at byte {pos}: {exc}") from None
    if not spans:
        raise ApiError(400, "INVALID_REQUEST", "the body holds no record batch")
    return spans


async def store_batches(
    broker: Broker,
    loaded: LoadedPartition,
    headers: Mapping[str, str],
    batches: list[bytearray],
    *,
    records: int,
    durable: bool,
    appended: asyncio.Future[None] | None = None,
) -> list[ProduceResult]:
    """Store validated batches on this partition's owner, as the tenant named in ``headers``: its idempotent
    producer ids checked, its quotas admitted and paid, metered, traced. One implementation for REST's binary
    produce and the Kafka listener. With ``appended`` (the Kafka listener's pipelined requests, which must reach
    the log in the order they were sent), each batch is appended before the next is handed over, and
    ``appended`` is resolved once the last one is (or the request failed); else all are handed over at once."""
    topic, partition = loaded.topic, loaded.index
    size = sum(len(b) for b in batches)
    if broker.security.enabled and TENANT_HEADER in headers:
        producer_ids = {read_header(b, 0).producer_id for b in batches}
        await _authorize_producers(broker, headers[TENANT_HEADER], producer_ids)
    buckets = _admit(broker, headers, topic, "produce")
    with _Metered(broker, headers, topic, partition) as usage:
        usage.update(bytes_in=size, messages_in=records)
        if buckets:
            await pay(buckets, size)
        # Validated before (batch_spans, the Kafka codec): the log need not check the CRC a second time.
        if appended is not None:
            answers = await _in_order(loaded, batches, durable, appended)
        elif len(batches) == 1:
            answers = [await loaded.produce(batches[0], durable=durable, verify=False)]
        else:
            answers = list(await asyncio.gather(*(loaded.produce(b, durable=durable, verify=False) for b in batches)))
    _trace_produced(broker, topic, partition, batches, answers, headers, durable)
    metrics.produced(topic, records, size)
    return answers


async def _in_order(
    loaded: LoadedPartition, batches: list[bytearray], durable: bool, appended: asyncio.Future[None]
) -> list[ProduceResult]:
    stores: list[asyncio.Future[ProduceResult]] = []
    try:
        for batch in batches:
            each: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            stores.append(asyncio.ensure_future(loaded.produce(batch, durable=durable, verify=False, appended=each)))
            await asyncio.wait((each, stores[-1]), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not appended.done():
            appended.set_result(None)
    return list(await asyncio.gather(*stores))


async def _produce_batches(
    broker: Broker,
    topic: str,
    partition: int,
    headers: Mapping[str, str],
    query: Mapping[str, str],
    body: bytes | bytearray,
) -> Reply:
    try:
        loaded = await broker.partition(topic, partition)
    except NotOwnerError as exc:
        return await _forward(broker, exc.owner, "POST", topic, partition, "messages", headers, query, bytes(body))
    durable = query.get("acks", "durable") != "accepted"
    _check_session(loaded, query)
    spans = batch_spans(body)
    if len(spans) == 1:  # the whole body is the batch: a bytearray (the hot path's) is stored as it is
        batches = [body if isinstance(body, bytearray) else bytearray(body)]
    else:
        view = memoryview(body)  # one copy per batch (into the bytearray the log patches), not two
        batches = [bytearray(view[p : p + n]) for p, n, _ in spans]
    records = sum(count for *_, count in spans)
    answers = await store_batches(broker, loaded, headers, batches, records=records, durable=durable)
    results = [
        {
            "partition": partition,
            "offset": a.base_offset,
            "count": a.next_offset - a.base_offset,
            **a.marks(),
        }
        for a in answers
    ]
    return Reply(200, orjson.dumps({"results": results}))


def _trace_produced(
    broker: Broker,
    topic: str,
    partition: int,
    batches: list[bytearray],
    answers: list[ProduceResult],
    headers: Mapping[str, str],
    durable: bool,
) -> None:
    """Hand stored batches to the message trace (``server.trace.recorder``): of a traced topic, or of a group's
    retry and dead-letter topics (they retry messages of traced topics). Off, this is one dict lookup."""
    sample = broker.trace_sample(topic)
    if sample:
        for batch, answer in zip(batches, answers, strict=True):
            broker.trace.produced(
                topic,
                partition,
                answer.base_offset,
                answer.next_offset,
                batch,
                sample=sample,
                tenant=tenant_of(headers),
                client=headers.get(CLIENT_HEADER),
                durable=durable,
            )
    elif topic.startswith(SIDE_PREFIXES):
        for batch, answer in zip(batches, answers, strict=True):
            broker.trace.side_record(topic, partition, answer.base_offset, batch, tenant=tenant_of(headers))


def _trace_delivered(
    broker: Broker, topic: str, partition: int, offset: int, next_offset: int, query: Mapping[str, str]
) -> None:
    """A consumer group's member got ``offset``..``next_offset - 1``: the SDK's consumer names its group and
    member in the fetch's query (``group``, ``member``); other fetches are not deliveries to anyone."""
    group = query.get("group")
    if group is not None and next_offset > offset and broker.trace_sample(topic):
        member = query.get("member")
        broker.trace.record(topic, partition, offset, "delivered", last=next_offset - 1, group=group, member=member)


async def produce(
    broker: Broker,
    topic: str,
    partition: int | None,
    headers: Mapping[str, str],
    query: Mapping[str, str],
    body: bytes | bytearray,
) -> Reply:
    """``POST /v1/topics/{t}/messages`` (partition None) and ``.../partitions/{p}/messages``."""
    content_type = headers.get("content-type", "").split(";")[0].strip()
    if partition is not None and content_type == BATCH_CONTENT_TYPE:
        return await _produce_batches(broker, topic, partition, headers, query, body)
    config = None
    if partition is not None:
        config = broker.check_partition(topic, partition)
        owner = broker.owner(topic, partition)
        if not owner.local:
            return await _forward(broker, owner, "POST", topic, partition, "messages", headers, query, bytes(body))
    return await _produce_json(broker, topic, partition, headers, body, config)


def _text_or_b64(name: str, data: bytes | None, into: dict[str, object]) -> None:
    if data is None:
        into[name] = None
        return
    try:
        into[name] = data.decode()
    except UnicodeDecodeError:
        into[f"{name}_b64"] = base64.b64encode(data).decode()


def decompression_limit(config: ServerConfig) -> int:
    """The most bytes of records the server decompresses from one batch (for a JSON answer or a quota's cut).

    The server stores compressed batches without decompressing them, so one of a few KiB can hold a
    decompression bomb; readers bound it (the SDK at 64 MiB, its own CPU). On the server the reader is one
    fetch, billed the batch's stored bytes, on behalf of every tenant's event loop: it gets twice the largest
    request the server takes (16 MiB by default), more than a producer's batch holds uncompressed."""
    return 2 * config.max_request_bytes


def _messages_json(
    batches: list[bytes | bytearray], offset: int, max_messages: int, max_bytes: int, max_decompressed: int
) -> dict[str, object]:
    """The JSON fetch answer's records from ``offset`` and its ``next_offset``. Pure.

    A stored batch that does not decode (written before the produce path validated records, or damaged on
    disk, or compressed records over ``max_decompressed``) is stepped over, never a 500: its offsets go into
    ``skipped`` with the reason, and ``next_offset`` moves past it so a consumer is not stuck on it. The
    answer ends once its keys and values reach ``max_bytes`` (after one record at least): the fetch's
    ``max_bytes`` counts stored bytes, which a compressed batch multiplies."""
    out: list[dict[str, object]] = []
    skipped: list[dict[str, object]] = []
    next_offset = offset
    size = 0
    for decoded in _stored_batches(batches, max_decompressed):
        header = decoded.header
        if header.next_offset <= offset:
            continue
        if decoded.error is not None:
            error = str(decoded.error)
            skipped.append({"base_offset": header.base_offset, "next_offset": header.next_offset, "error": error})
            next_offset = header.next_offset
            continue
        for record in decoded.records:
            if record.offset < offset:
                continue
            out.append(message_json(record))
            next_offset = record.offset + 1
            size += len(record.value or b"") + len(record.key or b"")
            if len(out) >= max_messages or size >= max_bytes:
                return _page(out, next_offset, skipped)
    return _page(out, next_offset, skipped)


def _headers(batches: list[bytes | bytearray]) -> Iterator[BatchHeader]:
    """The header of every batch of a fetch's buffers (a read from storage is one buffer of many batches, the
    tail cache gives one per batch). An unreadable header ends its buffer, as it ends the answer there
    (:func:`_stored_batches`)."""
    for buffer in batches:
        with contextlib.suppress(BatchError):
            for _, header in iter_batches(buffer, verify=False):
                yield header


def messages_from(batches: list[bytes | bytearray], offset: int) -> int:
    """How many messages at or after ``offset`` the fetched ``batches`` hold (what a fetch meters as
    ``messages_out``): the first batch may start before ``offset``, and its earlier messages are not sent on."""
    return sum(h.next_offset - max(h.base_offset, offset) for h in _headers(batches) if h.next_offset > offset)


def _holds_compressed(batches: list[bytes | bytearray]) -> bool:
    """Whether a fetch's batches hold a compressed one."""
    return any(header.flags for header in _headers(batches))


def _stored_batches(batches: list[bytes | bytearray], max_decompressed: int) -> Iterator[DecodedBatch]:
    for batch in batches:
        try:
            yield from decode_batches(batch, verify=False, max_decompressed=max_decompressed)
        except BatchError:
            # An unreadable header hides where the next batch starts. The log hands out only batches whose
            # headers it has read and the tail cache only validated ones, so this just ends the answer early.
            return


def _page(messages: list[dict[str, object]], next_offset: int, skipped: list[dict[str, object]]) -> dict[str, object]:
    answer: dict[str, object] = {"messages": messages, "next_offset": next_offset}
    if skipped:
        answer["skipped"] = skipped
    return answer


def message_json(record: Record) -> dict[str, object]:
    item: dict[str, object] = {"offset": record.offset, "timestamp": record.timestamp}
    _text_or_b64("key", record.key, item)
    _text_or_b64("value", record.value, item)
    headers: dict[str, str | None] = {}
    for name, value in record.headers:
        try:
            headers[name] = None if value is None else value.decode()
        except UnicodeDecodeError:
            headers[name] = base64.b64encode(value or b"").decode()
    item["headers"] = headers
    return item


async def read_batches(
    broker: Broker, loaded: LoadedPartition, headers: Mapping[str, str], offset: int, max_bytes: int, wait_ms: int
) -> FetchResult:
    """Stored batches from ``offset`` on this partition's owner, as the tenant named in ``headers``: within
    its fetch quota (paid), metered. One implementation for REST's fetch and the Kafka listener."""
    topic, partition = loaded.topic, loaded.index
    buckets = _admit(broker, headers, topic, "fetch")
    if buckets:  # read no more than the quota has left
        max_bytes = max(1, min(max_bytes, allowance(buckets)))
    with _Metered(broker, headers, topic, partition) as usage:
        result = await loaded.fetch(offset, max_bytes, wait_ms)
        batches = result.batches
        if buckets:  # a whole batch can be seconds of a small quota: serve only the records that fit
            batches = trim_to_allowance(batches, offset, allowance(buckets), decompression_limit(broker.config))
        size = sum(len(b) for b in batches)
        await pay(buckets, size)
        usage.update(bytes_out=size, messages_out=messages_from(batches, offset))
    metrics.fetched(topic, size)
    if batches is not result.batches:
        result = FetchResult(batches, result.high_watermark, result.start_offset)
    return result


async def fetch(
    broker: Broker, topic: str, partition: int, headers: Mapping[str, str], query: Mapping[str, str]
) -> Reply:
    """``GET /v1/topics/{t}/partitions/{p}/messages``."""
    offset = int_param(query, "offset", None)
    max_messages = int_param(query, "max_messages", 500, low=1, high=100_000)
    max_bytes = int_param(query, "max_bytes", 1024 * 1024, low=1, high=64 * 1024 * 1024)
    wait_ms = int_param(query, "wait_ms", 0, high=broker.config.max_wait_ms)
    try:
        loaded = await broker.partition(topic, partition)
    except NotOwnerError as exc:
        owner = exc.owner
        return await _forward(broker, owner, "GET", topic, partition, "messages", headers, query, None, wait_ms / 1000)
    result = await read_batches(broker, loaded, headers, offset, max_bytes, wait_ms)
    batches = result.batches
    limit = decompression_limit(broker.config)
    if BATCH_CONTENT_TYPE in headers.get("accept", ""):
        if "group" in query and broker.trace_sample(topic):  # off: no walk over the batches' headers
            delivered_to = max((h.next_offset for h in _headers(batches)), default=0)
            _trace_delivered(broker, topic, partition, offset, delivered_to, query)
        marks = {"x-talos-high-watermark": str(result.high_watermark), "x-talos-start-offset": str(result.start_offset)}
        return Reply(200, b"".join(batches), BATCH_CONTENT_TYPE, marks)
    if _holds_compressed(batches):
        # Decompressing (megabytes, maybe) off the event loop: the codecs release the GIL meanwhile.
        body = await loaded.on_read_pool(_messages_json, batches, offset, max_messages, max_bytes, limit)
    else:
        body = _messages_json(batches, offset, max_messages, max_bytes, limit)
    if "skipped" in body:
        log.warning("%s/%d: stepped over corrupt stored batches: %s", topic, partition, body["skipped"])
    if "group" in query:
        _trace_delivered(broker, topic, partition, offset, int(body["next_offset"]), query)  # type: ignore[call-overload]
    body["high_watermark"] = result.high_watermark
    return Reply(200, orjson.dumps(body))


async def offsets(
    broker: Broker, topic: str, partition: int, headers: Mapping[str, str], query: Mapping[str, str]
) -> Reply:
    """``GET /v1/topics/{t}/partitions/{p}/offsets[?timestamp=]``."""
    try:
        loaded = await broker.partition(topic, partition)
    except NotOwnerError as exc:
        return await _forward(broker, exc.owner, "GET", topic, partition, "offsets", headers, query)
    _admit(broker, headers, topic, "offsets")
    answer = {
        "partition": partition,
        "earliest": loaded.log.start_offset,
        "latest": loaded.log.durable_offset,
        "session": loaded.log.epoch,
    }
    if "session" in query:  # how far an earlier load session got durable (Swift's resend point)
        answer["session_end"] = loaded.log.durable_end_of(int_param(query, "session", None))
    if "timestamp" in query:
        answer["offset"] = await loaded.offset_for_timestamp(int_param(query, "timestamp", None))
    return Reply(200, orjson.dumps(answer))


def fence_fields(doc: object) -> tuple[int, int]:
    """``producer_id`` and ``producer_epoch`` of a fence request's JSON body."""
    if not isinstance(doc, dict):
        raise ApiError(400, "INVALID_REQUEST", "expected {'producer_id': int, 'producer_epoch': int}")
    fields = _idempotence({**doc, "sequence": 0})
    if not fields:
        raise ApiError(400, "INVALID_REQUEST", "producer_id is required")
    return fields["producer_id"], fields["producer_epoch"]


async def fence(
    broker: Broker, topic: str, partition: int, headers: Mapping[str, str], producer_id: int, epoch: int
) -> Reply:
    """``POST /v1/topics/{t}/partitions/{p}/fence``: the partition refuses the producer's older epochs from
    now on, and everything it accepted from them before is durable when this answers."""
    try:
        loaded = await broker.partition(topic, partition)
    except NotOwnerError as exc:
        body = orjson.dumps({"producer_id": producer_id, "producer_epoch": epoch})
        passed = {k: v for k, v in headers.items() if k in (HOPS_HEADER, TENANT_HEADER, "authorization")}
        passed["content-type"] = "application/json"
        return await _forward(broker, exc.owner, "POST", topic, partition, "fence", passed, {}, body)
    if broker.security.enabled and TENANT_HEADER in headers:
        await _authorize_producers(broker, headers[TENANT_HEADER], {producer_id})
    _admit(broker, headers, topic, "produce")  # a request like a produce, of no bytes
    result = await loaded.fence(producer_id, epoch)
    return Reply(200, orjson.dumps({"partition": partition, "producer_epoch": epoch, **result.marks()}))
