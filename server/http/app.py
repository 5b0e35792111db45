"""The REST API v1 (ARCHITECTURE.md, "Public surfaces"), installed on the app by the assembly (``server.app``).

Admin endpoints use FastAPI's models and call the services (``server.messaging.topics``, ``producers``).
Produce, fetch and offsets live in ``server.http.messages`` and are served by the raw ASGI fast path
(``server.http.fastpath``) in front of this app; their FastAPI routes here carry the OpenAPI description
(request bodies written by hand) and serve whatever the fast path passes on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import FastAPI, Path, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from fencing import OffsetOutOfRangeError
from server import metrics
from server.broker import Broker
from server.config import ServerConfig
from server.errors import ApiError, error_response, out_of_range
from server.http import messages, openapi
from server.http.routes import compaction as compaction_routes
from server.http.routes import connect, connector_offsets, schema_registry
from server.http.routes import groups as groups_routes
from server.http.routes import security as security_routes
from server.http.routes import subscriptions as subscriptions_routes
from server.http.routes import trace as trace_routes
from server.http.routes import transactions as transactions_routes
from server.http.routes.security import principal
from server.messaging import producers as producer_service
from server.messaging import topics as topic_service
from server.messaging.authorization import authorize_message
from server.messaging.delete_records import authorize_delete_records, delete_records
from server.messaging.fence import fence
from server.messaging.forwarder import BATCH_CONTENT_TYPE
from server.messaging.markers import write_marker
from server.security.access import Principal
from server.topics import MAX_PARTITIONS, TopicConfig
from server.web import INT64_MAX, as_response, body_schema, caller_of, json_response, parse_body, read_body
from talos._control import ControlType, Marker

__all__ = ["install"]

log = logging.getLogger("talos.server")


class CompactionFields(BaseModel):
    """Compaction and segment settings (docs/compaction.md), the same at create and change."""

    cleanup_policy: str | None = Field(
        None,
        description="'delete' (retention only, the default), 'compact' (keep the last value of every key; a null "
        "value deletes the key), or 'compact,delete'",
    )
    min_compaction_lag_ms: int | None = Field(None, ge=0, le=INT64_MAX, description="never compact younger records")
    max_compaction_lag_ms: int | None = Field(
        None, ge=1, le=INT64_MAX, description="compact records older than this whatever the dirty ratio"
    )
    delete_retention_ms: int | None = Field(None, ge=0, le=INT64_MAX, description="how long a tombstone stays")
    min_cleanable_dirty_ratio: float | None = Field(
        None, ge=0.0, le=1.0, description="compact once this share of the log is not yet compacted"
    )
    segment_ms: int | None = Field(None, ge=1, le=INT64_MAX, description="roll the active segment at this age")
    segment_bytes: int | None = Field(None, ge=1024, le=INT64_MAX, description="roll it at this size")
    value_schema_validation: bool | None = Field(
        None,
        strict=True,
        description="refuse a record whose value does not carry (Confluent's framing: magic byte 0, 4-byte id) "
        "the id of a schema registered under the subject <topic>-value",
    )
    key_schema_validation: bool | None = Field(
        None, strict=True, description="the same for keys, under the subject <topic>-key"
    )


# Settings that have a value always: null in a change leaves them as they are.
_ALWAYS_SET = ("partitions", "trace_sample", "cleanup_policy", "min_compaction_lag_ms", "delete_retention_ms",
               "min_cleanable_dirty_ratio", "value_schema_validation", "key_schema_validation")  # fmt: skip


class TopicCreate(CompactionFields):
    name: str = Field(description="1-249 of A-Z a-z 0-9 . _ -, not starting with . _ -")
    partitions: int = Field(1, ge=1, le=MAX_PARTITIONS)
    retention_ms: int | None = Field(None, ge=0, le=INT64_MAX)
    retention_bytes: int | None = Field(None, ge=0, le=INT64_MAX)
    tenant: str | None = Field(None, description="the owner (the admin only; a tenant's topics are its own)")


MAX_LEASE_MS = 600_000


class ProducerInit(BaseModel):
    producer_id: int | None = Field(
        None,
        ge=0,
        le=INT64_MAX,
        strict=True,
        description="an id allocated before: its next epoch, which fences the older instance",
    )
    name: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        pattern=r"^[\x21-\x7e]+$",
        description="a named producer (one id per tenant and name, like Kafka's transactional.id): its next epoch "
        "and a lease; with producer_id and producer_epoch, the holder renews (lease_ms 0 releases)",
    )
    producer_epoch: int | None = Field(
        None, ge=0, le=2**15 - 1, strict=True, description="with name: the holder's epoch"
    )
    lease_ms: int = Field(0, ge=0, le=MAX_LEASE_MS, strict=True, description="with name: how long other claims wait")


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error.get("loc", ()))
    return f"{where}: {error['msg']}" if where else str(error["msg"])


class FenceRequest(BaseModel):
    producer_id: int = Field(ge=0, le=INT64_MAX, strict=True)
    producer_epoch: int = Field(ge=0, le=2**15 - 1, strict=True)


class MarkerRequest(BaseModel):
    producer_id: int = Field(ge=0, le=INT64_MAX, strict=True)
    producer_epoch: int = Field(ge=0, le=2**15 - 1, strict=True)
    commit: bool = Field(strict=True, description="true: the transaction commits; false: it aborts")
    coordinator_epoch: int = Field(ge=0, le=2**31 - 1, strict=True)
    bumped: bool = Field(
        False,
        strict=True,
        description="the transaction ended with an epoch bump: its marker's epoch is above its data's",
    )


class RecordsBelow(BaseModel):
    offset: int = Field(
        ge=-1,
        le=INT64_MAX,
        strict=True,
        description="delete every record below it; -1: every record (the high watermark)",
    )


class PartitionRecordsBelow(RecordsBelow):
    partition: int = Field(ge=0, le=MAX_PARTITIONS - 1, strict=True)


class DeleteRecords(BaseModel):
    partitions: list[PartitionRecordsBelow] = Field(min_length=1, max_length=MAX_PARTITIONS)


class TopicPatch(CompactionFields):
    partitions: int | None = Field(None, ge=1, le=MAX_PARTITIONS, description="only more partitions")
    retention_ms: int | None = Field(None, ge=0, le=INT64_MAX)
    retention_bytes: int | None = Field(None, ge=0, le=INT64_MAX)
    trace_sample: int | None = Field(
        None, ge=0, le=1_000_000, description="message trace: 0 off, 1 every message, N one message in N"
    )


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


# The fast path takes canonical indexes (ASCII digits); whatever it passes on is checked here, as a bounded int.
PartitionIndex = Annotated[int, Path(ge=0, le=MAX_PARTITIONS - 1, description="the partition's index")]


def _query(
    name: str, description: str, *, required: bool = False, low: int = 0, high: int = INT64_MAX
) -> dict[str, Any]:
    schema = {"type": "integer", "minimum": low, "maximum": high}
    return {"name": name, "in": "query", "required": required, "description": description, "schema": schema}


_FETCH_SCHEMA: dict[str, Any] = {
    "parameters": [
        _query("offset", "the first offset to read", required=True),
        _query("max_messages", "at most this many messages (JSON answers)", low=1, high=100_000),
        _query(
            "max_bytes",
            "at most about this many bytes of stored batches (a JSON answer: of keys and values too)",
            low=1,
            high=64 * 1024 * 1024,
        ),
        _query("wait_ms", "long poll: wait this long for data at offset (bounded by the server's max_wait_ms)"),
        {
            "name": "isolation",
            "in": "query",
            "required": False,
            "description": "read_committed: only decided transactions, below the last stable offset, without "
            "aborted ones (the answer then carries last_stable_offset, and next_offset steps over what was left "
            "out); read_uncommitted (the default): everything durable",
            "schema": {"type": "string", "enum": ["read_uncommitted", "read_committed"]},
        },
    ]
}
_OFFSETS_SCHEMA: dict[str, Any] = {
    "parameters": [
        _query("timestamp", "also answer the first offset at or after this time (ms since the epoch)"),
        _query("session", "also answer how far that load session got durable"),
    ]
}


async def read_request_body(request: Request, limit: int) -> bytes:
    return await read_body(request.receive, limit, request.headers.get("content-length"))


def install(app: FastAPI, config: ServerConfig, broker: Callable[[], Broker]) -> None:
    """The REST API's routes and error answers on ``app`` (``broker``: the running broker, once started)."""

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
    async def offset_out_of_range(_request: Request, exc: OffsetOutOfRangeError) -> Response:
        return error_response(out_of_range(exc))

    @app.exception_handler(Exception)
    async def unexpected(_request: Request, exc: Exception) -> Response:
        log.exception("unexpected error")
        return error_response(ApiError(500, "INTERNAL", f"internal error: {type(exc).__name__}", retriable=True))

    # ---------------------------------------------------------------- health

    @app.get("/healthz", tags=["health"], summary="Liveness")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], summary="Readiness: storage reachable (and registered, in a cluster)")
    async def readyz() -> Response:
        problem = await app.state.storage_check.problem()
        if problem is not None:
            return error_response(ApiError(503, "NOT_READY", problem, retriable=True))
        cluster = broker().cluster
        if cluster is not None and not (cluster.registered and cluster.zk.connected):
            return error_response(ApiError(503, "NOT_READY", "not registered in ZooKeeper", retriable=True))
        stepped_down = cluster.storage_problem() if cluster is not None else None
        if stepped_down is not None:
            return error_response(ApiError(503, "NOT_READY", stepped_down, retriable=True))
        return json_response({"status": "ready"})

    # ---------------------------------------------------------------- cluster

    @app.get("/v1/cluster", tags=["cluster"], summary="Servers, the ring's version and members")
    async def cluster() -> Response:
        member = broker().cluster
        if member is None:
            url = broker().config.url
            me = {"id": config.member_id, "url": url, "registered": True, "in_ring": True, "vnodes": None}
            return json_response({"mode": "standalone", "server_id": config.member_id, "url": url, "servers": [me]})
        return json_response(member.describe())

    @app.get("/v1/routes", tags=["cluster"], summary="Partition → owner URL (for client-side addressing)")
    async def routes(request: Request, topic: str | None = None) -> Response:
        b = broker()
        who = principal(request)
        topics = [readable_topic(who, topic)] if topic is not None else [t for t in b.list_topics() if visible(who, t)]
        table: dict[str, list[dict[str, object]]] = {}
        for described in topics:
            entries = []
            for index in range(described.partitions):
                owner = b.owner(described.name, index)
                entries.append({"partition": index, "owner": owner.server_id, "url": owner.url})
            table[described.name] = entries
        ring_version = b.cluster.ring.version if b.cluster is not None else 0
        mode = "cluster" if b.cluster is not None else "standalone"
        return json_response({"mode": mode, "ring_version": ring_version, "topics": table})

    @app.get("/metrics", tags=["health"], summary="Prometheus metrics")
    async def prometheus(request: Request) -> Response:
        return Response(metrics.render(labelled=await labelled_metrics(request)), media_type=metrics.CONTENT_TYPE)

    async def labelled_metrics(request: Request) -> bool:
        """Whether /metrics shows series by tenant and topic: to everyone with ``metrics_labels = "public"``
        or auth off; else only to the admin token (anyone else gets the totals: no tenant or topic names)."""
        b = broker()
        if b.config.metrics_labels == "public" or not b.security.enabled:
            return True
        scheme, _, token = request.headers.get("authorization", "").strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return False
        who = await b.security.principal_of(token.strip())
        return who is not None and who.admin

    # ---------------------------------------------------------------- topics

    def topic_json(topic: TopicConfig) -> dict[str, object]:
        return topic.to_json()

    def visible(who: Principal, topic: TopicConfig) -> bool:
        return topic_service.visible(broker(), who, topic)

    def readable_topic(who: Principal, name: str) -> TopicConfig:
        return topic_service.readable_topic(broker(), who, name)

    @app.post("/v1/topics", status_code=201, tags=["topics"], summary="Create a topic")
    async def create_topic(body: TopicCreate, request: Request) -> Response:
        settings = body.model_dump(exclude_none=True, exclude={"name", "partitions", "tenant"})
        created = await topic_service.create_topic(
            broker(), principal(request), body.name, body.partitions, settings, tenant=body.tenant
        )
        return json_response(topic_json(created), 201)

    @app.get("/v1/topics", tags=["topics"], summary="List topics (a tenant sees those it may use)")
    async def list_topics(request: Request) -> Response:
        who = principal(request)
        return json_response({"topics": [topic_json(t) for t in broker().list_topics() if visible(who, t)]})

    @app.get("/v1/topics/{topic}", tags=["topics"], summary="Describe a topic with its partitions' offsets")
    async def describe_topic(topic: str, request: Request) -> Response:
        config = readable_topic(principal(request), topic)
        partitions = await topic_service.describe_partitions(broker(), config)
        return json_response({**topic_json(config), "partitions_detail": partitions})

    @app.patch("/v1/topics/{topic}", tags=["topics"], summary="Add partitions or change retention or compaction")
    async def patch_topic(topic: str, body: TopicPatch, request: Request) -> Response:
        changes = body.model_dump(exclude_unset=True)
        for name in _ALWAYS_SET:
            if name in changes and changes[name] is None:  # null: unchanged
                del changes[name]
        updated = await topic_service.update_topic(broker(), principal(request), topic, changes)
        return json_response(topic_json(updated))

    @app.delete("/v1/topics/{topic}", status_code=204, tags=["topics"], summary="Delete a topic and its data")
    async def delete_topic(topic: str, request: Request) -> Response:
        await topic_service.delete_topic(broker(), principal(request), topic)
        return Response(status_code=204)

    @app.post(
        "/v1/topics/{topic}/delete-records",
        tags=["topics"],
        summary="Delete the records below an offset of each partition named (Kafka's DeleteRecords)",
    )
    async def delete_topic_records(topic: str, body: DeleteRecords, request: Request) -> Response:
        b, who = broker(), principal(request)
        authorize_delete_records(b, who, topic)
        indexes = [p.partition for p in body.partitions]
        if len(set(indexes)) != len(indexes):
            raise ApiError(400, "INVALID_REQUEST", "a partition is named twice")
        for index in indexes:
            b.check_partition(topic, index)
        caller = caller_of(request.headers)
        done = await asyncio.gather(
            *(delete_records(b, who, caller, topic, p.partition, p.offset) for p in body.partitions),
            return_exceptions=True,
        )
        for outcome in done:  # the first partition's refusal (its owner's, if forwarded) is the answer
            if isinstance(outcome, BaseException):
                raise outcome
        partitions = [{"partition": d["partition"], "low_watermark": d["low_watermark"]} for d in done]  # type: ignore[index]
        return json_response({"topic": topic, "partitions": partitions})

    @app.post(
        "/v1/topics/{topic}/partitions/{partition}/delete-records",
        tags=["topics"],
        summary="Delete the partition's records below an offset (durable when answered)",
    )
    async def delete_partition_records(
        topic: str, partition: PartitionIndex, body: RecordsBelow, request: Request
    ) -> Response:
        b, who = broker(), principal(request)
        authorize_delete_records(b, who, topic)
        b.check_partition(topic, partition)
        return json_response(await delete_records(b, who, caller_of(request.headers), topic, partition, body.offset))

    # ---------------------------------------------------------------- idempotent producers

    @app.post(
        "/v1/producers",
        tags=["producers"],
        summary="Allocate a producer id, or the next epoch of one",
        openapi_extra={"requestBody": {"content": {"application/json": {"schema": ProducerInit.model_json_schema()}}}},
    )
    async def init_producer(request: Request) -> Response:
        raw = await read_request_body(request, 4096)
        try:
            body = ProducerInit.model_validate_json(raw or b"{}")
        except ValidationError as exc:
            message = "expected {'producer_id'?, 'name'?, 'producer_epoch'?, 'lease_ms'?}: " + _first_error(exc)
            raise ApiError(400, "INVALID_REQUEST", message) from None
        who = principal(request)
        if body.name is None:
            if body.producer_epoch is not None or body.lease_ms:
                raise ApiError(400, "INVALID_REQUEST", "producer_epoch and lease_ms go with a name")
            producer_id, epoch = await producer_service.init_producer(broker(), who, body.producer_id)
            return json_response({"producer_id": producer_id, "producer_epoch": epoch})
        if (body.producer_id is None) != (body.producer_epoch is None):
            raise ApiError(400, "INVALID_REQUEST", "a renewal gives both producer_id and producer_epoch")
        holder = (
            None if body.producer_id is None or body.producer_epoch is None else (body.producer_id, body.producer_epoch)
        )
        return await transactions_routes.claim_named(request, raw, body.name, lease_ms=body.lease_ms, holder=holder)

    async def _fence_body(request: Request) -> FenceRequest:
        raw = await read_request_body(request, 4096)
        try:
            return FenceRequest.model_validate_json(raw or b"{}")
        except ValidationError as exc:
            message = "expected {'producer_id': int, 'producer_epoch': int}: " + _first_error(exc)
            raise ApiError(400, "INVALID_REQUEST", message) from None

    @app.post(
        "/v1/topics/{topic}/fence",
        tags=["producers"],
        summary="Fence a producer's older epochs on every partition of the topic",
        openapi_extra={"requestBody": {"content": {"application/json": {"schema": FenceRequest.model_json_schema()}}}},
    )
    async def fence_topic(topic: str, request: Request) -> Response:
        authorize_message(broker(), principal(request), topic, "produce")
        body = await _fence_body(request)
        b = broker()
        caller, partitions = caller_of(request.headers), b.topic(topic).partitions
        fenced = await asyncio.gather(
            *(fence(b, caller, topic, p, body.producer_id, body.producer_epoch) for p in range(partitions)),
            return_exceptions=True,
        )
        for outcome in fenced:  # the first partition's refusal (its owner's, if forwarded) is the answer
            if isinstance(outcome, BaseException):
                raise outcome
        return json_response({"topic": topic, "partitions": len(fenced), "producer_epoch": body.producer_epoch})

    @app.post(
        "/v1/topics/{topic}/partitions/{partition}/fence",
        tags=["producers"],
        summary="Fence a producer's older epochs on one partition (durable when answered)",
        openapi_extra={"requestBody": {"content": {"application/json": {"schema": FenceRequest.model_json_schema()}}}},
    )
    async def fence_partition(topic: str, partition: PartitionIndex, request: Request) -> Response:
        authorize_message(broker(), principal(request), topic, "produce")
        body = await _fence_body(request)
        broker().check_partition(topic, partition)
        caller = caller_of(request.headers)
        return json_response(await fence(broker(), caller, topic, partition, body.producer_id, body.producer_epoch))

    @app.post(
        "/v1/topics/{topic}/partitions/{partition}/txn-markers",
        tags=["transactions"],
        summary="Close a producer's transaction on one partition (its coordinator's commit or abort; admin only)",
        openapi_extra=body_schema(MarkerRequest),
    )
    async def txn_marker(topic: str, partition: PartitionIndex, request: Request) -> Response:
        b = broker()
        b.security.require_admin(principal(request))
        body = parse_body(MarkerRequest, await read_request_body(request, 4096))
        b.check_partition(topic, partition)
        kind = ControlType.COMMIT if body.commit else ControlType.ABORT
        marker = Marker(body.producer_id, body.producer_epoch, kind, body.coordinator_epoch)
        caller = caller_of(request.headers)
        return json_response(await write_marker(b, caller, topic, partition, marker, bumped=body.bumped))

    # ---------------------------------------------------------------- messages (also served by the fast path)

    @app.post("/v1/topics/{topic}/messages", tags=["messages"], summary="Produce", openapi_extra=_PRODUCE_SCHEMA)
    async def produce(topic: str, request: Request) -> Response:
        authorize_message(broker(), principal(request), topic, "produce")
        body = await read_request_body(request, broker().config.max_request_bytes)
        caller, content_type, query = (
            caller_of(request.headers),
            request.headers.get("content-type"),
            request.query_params,
        )
        return as_response(await messages.produce(broker(), caller, topic, None, content_type, query, body))

    @app.post(
        "/v1/topics/{topic}/partitions/{partition}/messages",
        tags=["messages"],
        summary="Produce to one partition (JSON, or record batches as application/vnd.talos.batch)",
        openapi_extra=_PRODUCE_SCHEMA,
    )
    async def produce_partition(topic: str, partition: PartitionIndex, request: Request) -> Response:
        authorize_message(broker(), principal(request), topic, "produce")
        body = await read_request_body(request, broker().config.max_request_bytes)
        caller, content_type, query = (
            caller_of(request.headers),
            request.headers.get("content-type"),
            request.query_params,
        )
        reply = await messages.produce(broker(), caller, topic, partition, content_type, query, body)
        return as_response(reply)

    @app.get(
        "/v1/topics/{topic}/partitions/{partition}/messages",
        tags=["messages"],
        summary="Fetch from an offset (JSON, or raw batches with Accept: application/vnd.talos.batch)",
        openapi_extra=_FETCH_SCHEMA,
    )
    async def fetch(topic: str, partition: PartitionIndex, request: Request) -> Response:
        authorize_message(broker(), principal(request), topic, "fetch")
        caller, accept = caller_of(request.headers), request.headers.get("accept")
        return as_response(await messages.fetch(broker(), caller, topic, partition, accept, request.query_params))

    @app.get(
        "/v1/topics/{topic}/partitions/{partition}/offsets",
        tags=["messages"],
        summary="Offsets, by time",
        openapi_extra=_OFFSETS_SCHEMA,
    )
    async def offsets(topic: str, partition: PartitionIndex, request: Request) -> Response:
        authorize_message(broker(), principal(request), topic, "offsets")
        caller = caller_of(request.headers)
        return as_response(await messages.offsets(broker(), caller, topic, partition, request.query_params))

    app.include_router(groups_routes.router)
    app.include_router(subscriptions_routes.router)
    app.include_router(security_routes.router)
    app.include_router(connector_offsets.router)
    app.include_router(trace_routes.router)
    app.include_router(compaction_routes.router)
    app.include_router(transactions_routes.router)
    app.include_router(schema_registry.router)
    app.include_router(connect.router)
    openapi.install(app)
