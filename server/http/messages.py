"""Produce, fetch, offsets and fence over REST: parse the request, call the service layer
(``server.messaging``), encode the answer, as plain functions of (caller, query, body) → Reply.

The FastAPI routes (for OpenAPI and any request the fast path does not take) and the raw ASGI fast path
(``server.http.fastpath``) both call these, so there is one implementation. Raw body, ``orjson``, no model per
message; records are parsed only where JSON demands it (the binary batch path never parses records). A request
for another server's partition is relayed whole (``server.messaging.forwarder.call_partition``): the owner
answers it in the REST format, byte for byte what it answers its own clients.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import orjson

from server import metrics
from server.broker import Broker, NotOwnerError
from server.errors import ApiError
from server.messaging.caller import Caller
from server.messaging.fetch import (
    batch_headers,
    decompression_limit,
    holds_compressed,
    read_batches,
    read_batches_now,
    trace_delivered,
)
from server.messaging.forwarder import BATCH_CONTENT_TYPE, JSON, Reply, call_partition
from server.messaging.offsets import offsets_here
from server.messaging.produce import produce_records, produce_records_now, produce_value_now, store_batches
from server.messaging.records import message_json
from server.partition.loaded import FetchResult, GroupFuture, LoadedPartition, ProduceResult
from server.topics import TopicConfig
from server.web import INT64_MAX, int_param, isolation_param
from talos import (
    BatchError,
    DecodedBatch,
    RecordData,
    decode_batches,
    partition_for_key,
    validate_batch,
)

__all__ = [
    "BATCH_CONTENT_TYPE",
    "JSON",
    "PendingReply",
    "Reply",
    "batch_spans",
    "fence_fields",
    "fetch",
    "FetchWait",
    "fetch_now",
    "message_json",
    "offsets",
    "produce",
    "produce_now",
]

log = logging.getLogger(__name__)


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


def _one_value(doc: object, max_message: int) -> bytes | None:
    """The value of the common request, one message of one text value (what :func:`_parse_messages` makes a
    record of); None for any other."""
    if type(doc) is dict and len(doc) == 1:
        messages = doc.get("messages")
        if type(messages) is list and len(messages) == 1 and type(only := messages[0]) is dict and len(only) == 1:
            value = only.get("value")
            if type(value) is str and len(value) <= max_message:  # chars: at most 4 bytes each, checked below
                data = value.encode()
                if len(data) <= max_message:
                    return data
    return None


def _parse_messages(doc: object, max_message: int) -> tuple[list[tuple[int | None, RecordData]], bool]:
    one = _one_value(doc, max_message)
    if one is not None:
        return [(None, RecordData(one, None, [], None))], True
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


_Groups = dict[int, list[tuple[int, RecordData]]]


class _Routed(NamedTuple):
    groups: _Groups  # partition → (index in the request, record)
    producer: dict[str, int]  # the idempotent producer's fields (empty: none)
    durable: bool
    messages: int  # how many the request holds
    spread: bool  # a keyless message went to the round-robin partition


def _route(
    broker: Broker,
    topic: str,
    fixed_partition: int | None,
    body: bytes | bytearray,
    config: TopicConfig,
    *,
    take: bool = True,
) -> _Routed:
    """A JSON produce body parsed and its messages given their partitions. ``take=False``: the round-robin
    partition is only looked at (the caller takes it once it stores the messages)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, "INVALID_JSON", f"the body is not valid JSON: {exc}") from None
    messages, durable = _parse_messages(doc, broker.config.max_message_bytes)
    groups: _Groups = {}
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
                spread = broker.next_partition(config, take=take)
            partition = spread
        if not 0 <= partition < config.partitions:
            raise ApiError(404, "UNKNOWN_PARTITION", f"topic {topic!r} has partitions 0..{config.partitions - 1}")
        groups.setdefault(partition, []).append((index, record))
    producer = _idempotence(doc)
    if producer and len(groups) > 1:
        raise ApiError(400, "INVALID_REQUEST", "an idempotent request (producer_id) must go to one partition")
    return _Routed(groups, producer, durable, len(messages), spread >= 0)


def _json_answer(topic: str, routed: _Routed, answers: list[ProduceResult], size: int) -> Reply:
    results: list[dict[str, object] | None] = [None] * routed.messages
    for (partition, items), answer in zip(routed.groups.items(), answers, strict=True):
        base = answer.base_offset
        marks = answer.marks()
        for position, (index, _record) in enumerate(items):
            results[index] = {"partition": partition, "offset": base + position if base >= 0 else -1, **marks}
    metrics.produced(topic, routed.messages, size)
    return Reply(200, orjson.dumps({"results": results}))


async def _produce_json(
    broker: Broker,
    caller: Caller,
    topic: str,
    fixed_partition: int | None,
    body: bytes | bytearray,
    config: TopicConfig | None = None,
) -> Reply:
    routed = _route(broker, topic, fixed_partition, body, config or broker.topic(topic))
    answers = await produce_records(
        broker, caller, topic, routed.groups, producer=routed.producer, durable=routed.durable
    )
    return _json_answer(topic, routed, answers, len(body))


class PendingReply(NamedTuple):
    """A produce appended without an await (:func:`produce_now`): ``reply()`` once ``durable`` is done."""

    durable: GroupFuture
    reply: Callable[[], Reply]


def produce_now(
    broker: Broker,
    caller: Caller,
    config: TopicConfig,
    partition: int | None,
    content_type: str | None,
    body: bytes | bytearray,
) -> PendingReply | None:
    """:func:`produce` of a durable JSON request whose messages go to one partition loaded here, appended to
    its next flush without an await (``server.messaging.produce.produce_records_now``). None for anything
    else, an error included, and then nothing was stored or counted: :func:`produce` does it all."""
    if content_type is not None and not content_type.startswith(JSON):
        return None
    topic = config.name
    if partition is not None and 0 <= partition < config.partitions:  # the common request: one message, fixed
        try:
            value = _one_value(orjson.loads(body), broker.config.max_message_bytes)
        except orjson.JSONDecodeError:
            return None
        if value is not None:
            return _one_now(broker, caller, topic, partition, value, len(body))
    try:
        routed = _route(broker, topic, partition, body, config, take=False)
    except ApiError:
        return None
    if routed.producer or not routed.durable or len(routed.groups) != 1:
        return None
    ((target, items),) = routed.groups.items()
    if not broker.owns(topic, target):  # the ring moved it: the full path forwards it
        return None
    pending = produce_records_now(broker, caller, topic, target, [record for _, record in items])
    if pending is None:
        return None
    if routed.spread:
        broker.next_partition(config)
    size = len(body)

    def reply() -> Reply:
        return _json_answer(topic, routed, [pending.result()], size)

    return PendingReply(pending.durable, reply)


def _one_now(
    broker: Broker, caller: Caller, topic: str, partition: int, value: bytes, size: int
) -> PendingReply | None:
    """:func:`produce_now` of one message, a value alone, to a partition the request names."""
    if not broker.owns(topic, partition):
        return None
    pending = produce_value_now(broker, caller, topic, partition, value)
    if pending is None:
        return None

    def reply() -> Reply:
        durable = pending.durable_offset()
        metrics.produced(topic, 1, size)
        loaded = pending.stored.partition
        return Reply(
            200, _ONE_ANSWER % (partition, pending.stored.base_offset, durable, loaded.log.epoch, loaded.version)
        )

    return PendingReply(pending.durable, reply)


# What _json_answer makes of one stored message (not a duplicate: produce_now has no idempotent producer).
_ONE_ANSWER = (
    b'{"results":[{"partition":%d,"offset":%d,"durable_offset":%d,"session":%d,"duplicate":false,"version":%d}]}'
)


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


async def _produce_batches(
    broker: Broker,
    caller: Caller,
    topic: str,
    partition: int,
    query: Mapping[str, str],
    body: bytes | bytearray,
) -> Reply:
    try:
        loaded = await broker.partition(topic, partition)
    except NotOwnerError as exc:
        return await call_partition(
            broker.forwarder,
            caller,
            exc.owner,
            "POST",
            topic,
            partition,
            "messages",
            query=query,
            body=bytes(body),
            content_type=BATCH_CONTENT_TYPE,
        )
    durable = query.get("acks", "durable") != "accepted"
    _check_session(loaded, query)
    spans = batch_spans(body)
    if len(spans) == 1:  # the whole body is the batch: a bytearray (the hot path's) is stored as it is
        batches = [body if isinstance(body, bytearray) else bytearray(body)]
    else:
        view = memoryview(body)  # one copy per batch (into the bytearray the log patches), not two
        batches = [bytearray(view[p : p + n]) for p, n, _ in spans]
    records = sum(count for *_, count in spans)
    transactional_id = query.get("transactional_id")
    answers = await store_batches(
        broker, loaded, caller, batches, records=records, durable=durable, transactional_id=transactional_id
    )
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


async def produce(
    broker: Broker,
    caller: Caller,
    topic: str,
    partition: int | None,
    content_type: str | None,
    query: Mapping[str, str],
    body: bytes | bytearray,
) -> Reply:
    """``POST /v1/topics/{t}/messages`` (partition None) and ``.../partitions/{p}/messages``."""
    kind = (content_type or "").split(";")[0].strip()
    if partition is not None and kind == BATCH_CONTENT_TYPE:
        return await _produce_batches(broker, caller, topic, partition, query, body)
    config = None
    if partition is not None:
        config = broker.check_partition(topic, partition)
        owner = broker.owner(topic, partition)
        if not owner.local:
            return await call_partition(
                broker.forwarder,
                caller,
                owner,
                "POST",
                topic,
                partition,
                "messages",
                query=query,
                body=bytes(body),
                content_type=content_type,
            )
    return await _produce_json(broker, caller, topic, partition, body, config)


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
        if header.control:  # a transaction's marker: its offset counts, it is no message
            next_offset = header.next_offset
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


def _read_through(page: dict[str, object], batches: list[bytes | bytearray], offset: int) -> bool:
    """Whether a JSON page took every batch fetched (not cut by its message or byte limit): only then may it
    send the reader past batches it left out after them (an aborted transaction's)."""
    end = max((h.next_offset for h in batch_headers(batches)), default=offset)
    given: int = page["next_offset"]  # type: ignore[assignment]
    return given >= end


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


class _FetchAsked(NamedTuple):
    """A fetch's query parameters, checked."""

    offset: int
    max_messages: int
    max_bytes: int
    wait_ms: int
    committed: bool


def _fetch_asked(broker: Broker, query: Mapping[str, str]) -> _FetchAsked:
    return _FetchAsked(
        int_param(query, "offset", None),
        int_param(query, "max_messages", 500, low=1, high=100_000),
        int_param(query, "max_bytes", 1024 * 1024, low=1, high=64 * 1024 * 1024),
        int_param(query, "wait_ms", 0, high=broker.config.max_wait_ms),
        isolation_param(query),
    )


async def fetch(
    broker: Broker,
    caller: Caller,
    topic: str,
    partition: int,
    accept: str | None,
    query: Mapping[str, str],
    *,
    wait_until: float | None = None,
) -> Reply:
    """``GET /v1/topics/{t}/partitions/{p}/messages``; ``wait_until``: the latest end of its wait (the event
    loop's clock), for a long poll that waited already without a task and is then declined by it."""
    asked = _fetch_asked(broker, query)
    if wait_until is not None:
        left_ms = max(0, int((wait_until - asyncio.get_running_loop().time()) * 1000))
        asked = asked._replace(wait_ms=min(asked.wait_ms, left_ms))
        query = {**query, "wait_ms": str(asked.wait_ms)}  # forwarded as well, if the partition moved meanwhile
    try:
        loaded = await broker.partition(topic, partition)
    except NotOwnerError as exc:
        return await call_partition(
            broker.forwarder,
            caller,
            exc.owner,
            "GET",
            topic,
            partition,
            "messages",
            query=query,
            accept=accept,
            extra_timeout_s=asked.wait_ms / 1000,
        )
    result = await read_batches(
        broker,
        loaded,
        caller,
        asked.offset,
        asked.max_bytes,
        asked.wait_ms,
        committed=asked.committed,
        until=_until(accept, asked),
    )
    page = None
    if not _binary(accept) and holds_compressed(result.batches):
        # Decompressing (megabytes, maybe) off the event loop: the codecs release the GIL meanwhile.
        limit = decompression_limit(broker.config)
        page = await loaded.on_read_pool(
            _messages_json, result.batches, asked.offset, asked.max_messages, asked.max_bytes, limit
        )
    return _fetched(broker, topic, partition, accept, query, asked, result, page)


class FetchWait(NamedTuple):
    """A fetch with nothing yet at its offset that may wait (:func:`fetch_now`): ask again once ``partition`` has
    flushed (``LoadedPartition.when_data``), and at ``deadline`` (the event loop's clock) at the latest, as
    ``waited``: then it is answered with what there is."""

    partition: LoadedPartition
    deadline: float


def fetch_now(
    broker: Broker,
    caller: Caller,
    topic: str,
    partition: int,
    accept: str | None,
    query: Mapping[str, str],
    *,
    waited: bool = False,
) -> Reply | FetchWait | None:
    """:func:`fetch` without an await, of a partition loaded here: what its tail cache holds (a consumer that
    keeps up reads there); at its end, nothing if the fetch does not wait (or ``waited``: its wait is over), or
    :class:`FetchWait` (a long poll, waiting without a task). None for anything else, an error included (a read
    of the storage, read-committed, a rate quota on this server, a compressed batch to decode, a partition
    elsewhere), and then nothing was metered: :func:`fetch` does it."""
    try:
        asked = _fetch_asked(broker, query)
    except ApiError:
        return None
    if asked.committed or not broker.owns(topic, partition):
        return None
    loaded = broker.loaded_now(topic, partition)
    if loaded is None:
        return None
    wait_ms = 0 if waited else asked.wait_ms
    if wait_ms and asked.offset == loaded.log.durable_offset and not broker.security.rates_limited:
        return FetchWait(loaded, asyncio.get_running_loop().time() + wait_ms / 1000)
    result = read_batches_now(
        broker,
        loaded,
        caller,
        asked.offset,
        asked.max_bytes,
        wait_ms,
        json=not _binary(accept),
        until=_until(accept, asked),
    )
    return None if result is None else _fetched(broker, topic, partition, accept, query, asked, result, None)


def _binary(accept: str | None) -> bool:
    return accept is not None and BATCH_CONTENT_TYPE in accept


def _until(accept: str | None, asked: _FetchAsked) -> int | None:
    """A JSON page holds ``max_messages`` at most: the batches after the one holding its last are not read (nor
    billed). The binary answer is the batches themselves, up to ``max_bytes``."""
    return None if _binary(accept) else asked.offset + asked.max_messages


def _fetched(
    broker: Broker,
    topic: str,
    partition: int,
    accept: str | None,
    query: Mapping[str, str],
    asked: _FetchAsked,
    result: FetchResult,
    page: dict[str, object] | None,
) -> Reply:
    """A fetch's answer from the batches read: the batches themselves, or (``page``, unless made already) their
    messages as JSON."""
    batches, offset = result.batches, asked.offset
    if _binary(accept):
        if "group" in query and broker.trace_sample(topic):  # off: no walk over the batches' headers
            delivered_to = max((h.next_offset for h in batch_headers(batches)), default=0)
            trace_delivered(broker, topic, partition, offset, delivered_to, query["group"], query.get("member"))
        marks = {"x-talos-high-watermark": str(result.high_watermark), "x-talos-start-offset": str(result.start_offset)}
        if asked.committed:
            marks["x-talos-last-stable-offset"] = str(result.last_stable_offset)
        if result.next_offset >= 0:
            marks["x-talos-next-offset"] = str(result.next_offset)
        return Reply(200, b"".join(batches), BATCH_CONTENT_TYPE, marks)
    body = page
    if body is None:
        limit = decompression_limit(broker.config)
        body = _messages_json(batches, offset, asked.max_messages, asked.max_bytes, limit)
    if result.next_offset >= 0 and _read_through(body, batches, offset):
        body["next_offset"] = max(result.next_offset, int(body["next_offset"]))  # type: ignore[call-overload]
    if asked.committed:
        body["last_stable_offset"] = result.last_stable_offset
    if "skipped" in body:
        log.warning("%s/%d: stepped over corrupt stored batches: %s", topic, partition, body["skipped"])
    if "group" in query:
        next_offset = int(body["next_offset"])  # type: ignore[call-overload]
        trace_delivered(broker, topic, partition, offset, next_offset, query["group"], query.get("member"))
    body["high_watermark"] = result.high_watermark
    return Reply(200, orjson.dumps(body))


async def offsets(broker: Broker, caller: Caller, topic: str, partition: int, query: Mapping[str, str]) -> Reply:
    """``GET /v1/topics/{t}/partitions/{p}/offsets[?timestamp=]``."""
    try:
        loaded = await broker.partition(topic, partition)
    except NotOwnerError as exc:
        return await call_partition(
            broker.forwarder, caller, exc.owner, "GET", topic, partition, "offsets", query=query
        )
    session = int_param(query, "session", None) if "session" in query else None
    timestamp = int_param(query, "timestamp", None) if "timestamp" in query else None
    answer = await offsets_here(broker, loaded, caller, session=session, timestamp=timestamp)
    return Reply(200, orjson.dumps(answer))


def fence_fields(doc: object) -> tuple[int, int]:
    """``producer_id`` and ``producer_epoch`` of a fence request's JSON body."""
    if not isinstance(doc, dict):
        raise ApiError(400, "INVALID_REQUEST", "expected {'producer_id': int, 'producer_epoch': int}")
    fields = _idempotence({**doc, "sequence": 0})
    if not fields:
        raise ApiError(400, "INVALID_REQUEST", "producer_id is required")
    return fields["producer_id"], fields["producer_epoch"]
