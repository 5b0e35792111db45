"""The REST API v1 (ARCHITECTURE.md, "Public surfaces").

Admin endpoints use FastAPI's models. Produce and fetch are lean: the raw body, ``orjson``, no model per
message; their request bodies are described in the OpenAPI schema by hand.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import gc
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from fencing import OffsetOutOfRangeError
from server import metrics
from server.broker import Broker
from server.config import ServerConfig
from server.errors import ApiError, error_response
from server.partition import ProduceResult
from server.topics import MAX_PARTITIONS, TopicConfig, validate_topic_name
from talos import RecordData, decode_records, encode_batch, iter_batches, partition_for_key

__all__ = ["BATCH_CONTENT_TYPE", "create_app"]

BATCH_CONTENT_TYPE = "application/vnd.talos.batch"
log = logging.getLogger("talos.server")


def _json(data: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(data), status_code=status, headers=headers, media_type="application/json")


class TopicCreate(BaseModel):
    name: str = Field(description="1-249 of A-Z a-z 0-9 . _ -, not starting with . _ -")
    partitions: int = Field(1, ge=1, le=MAX_PARTITIONS)
    retention_ms: int | None = Field(None, ge=0)
    retention_bytes: int | None = Field(None, ge=0)


class TopicPatch(BaseModel):
    partitions: int | None = Field(None, ge=1, le=MAX_PARTITIONS, description="only more partitions")
    retention_ms: int | None = Field(None, ge=0)
    retention_bytes: int | None = Field(None, ge=0)


_PRODUCE_SCHEMA: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["messages"],
                    "properties": {
                        "messages": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "key": {"type": "string"},
                                    "key_b64": {"type": "string", "format": "byte"},
                                    "value": {"type": "string", "nullable": True},
                                    "value_b64": {"type": "string", "format": "byte"},
                                    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                                    "partition": {"type": "integer"},
                                    "timestamp": {"type": "integer", "description": "ms since the epoch"},
                                },
                            },
                        },
                        "acks": {"type": "string", "enum": ["durable", "accepted"], "default": "durable"},
                    },
                }
            },
            BATCH_CONTENT_TYPE: {"schema": {"type": "string", "format": "binary"}},
        },
    }
}


async def _read_body(request: Request, limit: int) -> bytes:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise ApiError(413, "REQUEST_TOO_LARGE", f"request body of {length} bytes; the limit is {limit}")
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "REQUEST_TOO_LARGE", f"request body over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _int_param(request: Request, name: str, default: int | None, *, low: int = 0, high: int | None = None) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        if default is None:
            raise ApiError(400, "INVALID_REQUEST", f"query parameter {name!r} is required")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, "INVALID_REQUEST", f"{name} must be an integer, got {raw[:50]!r}") from None
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
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
        if timestamp is not None and (not isinstance(timestamp, int) or isinstance(timestamp, bool) or timestamp < 0):
            raise ApiError(400, "INVALID_REQUEST", f"messages[{index}].timestamp must be ms since the epoch")
        size = len(value or b"") + len(key or b"") + sum(len(k) + len(v or b"") for k, v in headers)
        if size > max_message:
            raise ApiError(413, "MESSAGE_TOO_LARGE", f"messages[{index}] has {size} bytes; the limit is {max_message}")
        out.append((partition, RecordData(value, key, headers, timestamp)))
    return out, acks == "durable"


def _text_or_b64(name: str, data: bytes | None, into: dict[str, object]) -> None:
    if data is None:
        into[name] = None
        return
    try:
        into[name] = data.decode()
    except UnicodeDecodeError:
        into[f"{name}_b64"] = base64.b64encode(data).decode()


def _messages_json(batches: list[bytes | bytearray], offset: int, max_messages: int) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for batch in batches:
        for position, _header in iter_batches(batch, verify=False):
            for record in decode_records(batch, position, verify=False):
                if record.offset < offset:
                    continue
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
                out.append(item)
                if len(out) >= max_messages:
                    return out
    return out


def create_app(config: ServerConfig) -> FastAPI:
    broker_holder: dict[str, Broker] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        broker = Broker(config)
        broker_holder["broker"] = broker
        app.state.broker = broker
        maintenance = asyncio.get_running_loop().create_task(_maintain(broker))
        gc.collect()
        gc.freeze()  # start-up objects never move again: far fewer long GC pauses (p99)
        log.info("talos serving storage %s", config.storage)
        try:
            yield
        finally:
            maintenance.cancel()
            await broker.close()

    app = FastAPI(
        title="Talos",
        version="0.1.0",
        summary="A message queue with compute separated from storage.",
        lifespan=lifespan,
    )

    def broker() -> Broker:
        return broker_holder["broker"]

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError) -> Response:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return error_response(ApiError(400, "INVALID_REQUEST", f"{where}: {first.get('msg', 'invalid request')}"))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(exc.status_code, "HTTP_ERROR")
        return error_response(ApiError(exc.status_code, code, str(exc.detail)))

    @app.exception_handler(OffsetOutOfRangeError)
    async def out_of_range(_request: Request, exc: OffsetOutOfRangeError) -> Response:
        return error_response(
            ApiError(416, "OFFSET_OUT_OF_RANGE", str(exc), details={"earliest": exc.earliest, "latest": exc.latest})
        )

    @app.exception_handler(Exception)
    async def unexpected(_request: Request, exc: Exception) -> Response:
        log.exception("unexpected error")
        return error_response(ApiError(500, "INTERNAL", f"internal error: {type(exc).__name__}", retriable=True))

    # ---------------------------------------------------------------- health

    @app.get("/healthz", tags=["health"], summary="Liveness")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], summary="Readiness: storage reachable")
    async def readyz() -> Response:
        try:
            await asyncio.get_running_loop().run_in_executor(broker().executor, broker().fs.exists, broker().root)
        except Exception as exc:
            return error_response(ApiError(503, "NOT_READY", f"storage unreachable: {exc}", retriable=True))
        return _json({"status": "ready"})

    @app.get("/metrics", tags=["health"], summary="Prometheus metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(broker()), media_type=metrics.CONTENT_TYPE)

    # ---------------------------------------------------------------- topics

    def topic_json(topic: TopicConfig) -> dict[str, object]:
        return topic.to_json()

    @app.post("/v1/topics", status_code=201, tags=["topics"], summary="Create a topic")
    async def create_topic(body: TopicCreate) -> Response:
        validate_topic_name(body.name)
        created = await broker().create_topic(
            TopicConfig(body.name, body.partitions, body.retention_ms, body.retention_bytes)
        )
        return _json(topic_json(created), 201)

    @app.get("/v1/topics", tags=["topics"], summary="List topics")
    async def list_topics() -> Response:
        return _json({"topics": [topic_json(t) for t in broker().list_topics()]})

    @app.get("/v1/topics/{topic}", tags=["topics"], summary="Describe a topic with its partitions' offsets")
    async def describe_topic(topic: str) -> Response:
        config = broker().topic(topic)
        partitions = []
        for index in range(config.partitions):
            loaded = await broker().partition(topic, index)
            partitions.append(
                {"partition": index, "earliest": loaded.log.start_offset, "latest": loaded.log.durable_offset}
            )
        return _json({**topic_json(config), "partitions_detail": partitions})

    @app.patch("/v1/topics/{topic}", tags=["topics"], summary="Add partitions or change retention")
    async def patch_topic(topic: str, body: TopicPatch) -> Response:
        current = broker().topic(topic)
        if body.partitions is not None and body.partitions < current.partitions:
            raise ApiError(400, "INVALID_REQUEST", f"partitions can only grow (now {current.partitions})")
        changes = body.model_dump(exclude_unset=True)
        updated = await broker().update_topic(topic, **changes)
        return _json(topic_json(updated))

    @app.delete("/v1/topics/{topic}", status_code=204, tags=["topics"], summary="Delete a topic and its data")
    async def delete_topic(topic: str) -> Response:
        await broker().delete_topic(topic)
        return Response(status_code=204)

    # ---------------------------------------------------------------- produce

    async def produce_json(topic: str, body: bytes, fixed_partition: int | None) -> Response:
        config = broker().topic(topic)
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, "INVALID_JSON", f"the body is not valid JSON: {exc}") from None
        messages, durable = _parse_messages(doc, broker().config.max_message_bytes)
        groups: dict[int, list[tuple[int, RecordData]]] = {}
        spread = broker().next_partition(config)
        for index, (requested, record) in enumerate(messages):
            if fixed_partition is not None:
                partition = fixed_partition
            elif requested is not None:
                partition = requested
            else:
                partition = partition_for_key(record.key, config.partitions) if record.key is not None else spread
            if not 0 <= partition < config.partitions:
                raise ApiError(404, "UNKNOWN_PARTITION", f"topic {topic!r} has partitions 0..{config.partitions - 1}")
            groups.setdefault(partition, []).append((index, record))
        loaded = {p: await broker().partition(topic, p) for p in groups}
        results: list[dict[str, int] | None] = [None] * len(messages)
        answers = await asyncio.gather(
            *(
                loaded[p].produce(bytearray(encode_batch([r for _, r in items])), durable=durable)
                for p, items in groups.items()
            )
        )
        for (partition, items), answer in zip(groups.items(), answers, strict=True):
            for position, (index, _record) in enumerate(items):
                results[index] = {
                    "partition": partition,
                    "offset": answer.base_offset + position,
                    "durable_offset": answer.durable_offset,
                }
        metrics.produced(topic, len(messages), len(body))
        return _json({"results": results})

    @app.post("/v1/topics/{topic}/messages", tags=["messages"], summary="Produce", openapi_extra=_PRODUCE_SCHEMA)
    async def produce(topic: str, request: Request) -> Response:
        body = await _read_body(request, broker().config.max_request_bytes)
        return await produce_json(topic, body, None)

    @app.post(
        "/v1/topics/{topic}/partitions/{partition}/messages",
        tags=["messages"],
        summary="Produce to one partition (JSON, or record batches as application/vnd.talos.batch)",
        openapi_extra=_PRODUCE_SCHEMA,
    )
    async def produce_partition(topic: str, partition: int, request: Request) -> Response:
        body = await _read_body(request, broker().config.max_request_bytes)
        if request.headers.get("content-type", "").split(";")[0].strip() != BATCH_CONTENT_TYPE:
            return await produce_json(topic, body, partition)
        loaded = await broker().partition(topic, partition)
        durable = request.query_params.get("acks", "durable") != "accepted"
        try:
            spans = [(pos, header.length, header.record_count) for pos, header in iter_batches(body, verify=False)]
        except Exception as exc:
            raise ApiError(400, "CORRUPT_BATCH", f"invalid record batch: {exc}") from None
        if not spans:
            raise ApiError(400, "INVALID_REQUEST", "the body holds no record batch")
        answers: list[ProduceResult] = await asyncio.gather(
            *(loaded.produce(bytearray(body[pos : pos + size]), durable=durable) for pos, size, _ in spans)
        )
        metrics.produced(topic, sum(count for *_, count in spans), len(body))
        return _json(
            {
                "results": [
                    {
                        "partition": partition,
                        "offset": a.base_offset,
                        "count": a.next_offset - a.base_offset,
                        "durable_offset": a.durable_offset,
                    }
                    for a in answers
                ]
            }
        )

    # ---------------------------------------------------------------- fetch

    @app.get(
        "/v1/topics/{topic}/partitions/{partition}/messages",
        tags=["messages"],
        summary="Fetch from an offset (JSON, or raw batches with Accept: application/vnd.talos.batch)",
    )
    async def fetch(topic: str, partition: int, request: Request) -> Response:
        offset = _int_param(request, "offset", None)
        max_messages = _int_param(request, "max_messages", 500, low=1, high=100_000)
        max_bytes = _int_param(request, "max_bytes", 1024 * 1024, low=1, high=64 * 1024 * 1024)
        wait_ms = _int_param(request, "wait_ms", 0, high=broker().config.max_wait_ms)
        loaded = await broker().partition(topic, partition)
        result = await loaded.fetch(offset, max_bytes, wait_ms)
        metrics.fetched(topic, sum(len(b) for b in result.batches))
        if BATCH_CONTENT_TYPE in request.headers.get("accept", ""):
            return Response(
                b"".join(result.batches),
                media_type=BATCH_CONTENT_TYPE,
                headers={
                    "X-Talos-High-Watermark": str(result.high_watermark),
                    "X-Talos-Start-Offset": str(result.start_offset),
                },
            )
        messages = _messages_json(result.batches, offset, max_messages)
        next_offset = int(messages[-1]["offset"]) + 1 if messages else offset  # type: ignore[call-overload]
        return _json({"messages": messages, "next_offset": next_offset, "high_watermark": result.high_watermark})

    @app.get("/v1/topics/{topic}/partitions/{partition}/offsets", tags=["messages"], summary="Offsets, by time")
    async def offsets(topic: str, partition: int, request: Request) -> Response:
        loaded = await broker().partition(topic, partition)
        answer: dict[str, int] = {
            "partition": partition,
            "earliest": loaded.log.start_offset,
            "latest": loaded.log.durable_offset,
        }
        if "timestamp" in request.query_params:
            timestamp = _int_param(request, "timestamp", None)
            answer["offset"] = await loaded.offset_for_timestamp(timestamp)
        return _json(answer)

    return app


async def _maintain(broker: Broker) -> None:
    while True:
        await asyncio.sleep(30)
        started = time.monotonic()
        try:
            await broker.maintain()
        except Exception:
            log.exception("maintenance failed")
        log.debug("maintenance took %.3fs", time.monotonic() - started)
