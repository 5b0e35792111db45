"""The REST API v1 (ARCHITECTURE.md, "Public surfaces").

Admin endpoints use FastAPI's models. Produce, fetch and offsets live in ``server.http.messages`` and are
served by the raw ASGI fast path (``server.http.fastpath``) in front of this app; their FastAPI routes here
carry the OpenAPI description (request bodies written by hand) and serve whatever the fast path passes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable
from typing import Annotated, Any

import orjson
from fastapi import FastAPI, Path, Request
from fastapi.exceptions import RequestValidationError
from kazoo.exceptions import KazooException
from pydantic import BaseModel, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from fencing import LogError, OffsetOutOfRangeError
from server import connect_offsets, metrics, portal
from server import partition_quota as partition_quotas
from server.bounded import until_deadline
from server.broker import Broker
from server.config import ServerConfig
from server.errors import ApiError, error_response, out_of_range
from server.groups import GroupCoordinator
from server.groups import api as groups_api
from server.http import connector_offsets, messages, openapi
from server.http.fastpath import FastPath, authorize_message, read_body
from server.http.messages import BATCH_CONTENT_TYPE, INT64_MAX
from server.http.readiness import StorageCheck
from server.http.reply import as_response, json_response
from server.kafka.listener import KafkaListener
from server.loop_watchdog import LoopWatchdog
from server.portal import pages as portal_pages
from server.portal.headers import PortalHeaders
from server.security import api as security_api
from server.security import audit
from server.security.access import Principal, actions_on, hidden
from server.security.api import principal
from server.security.state import QUOTA_FIELDS
from server.subscriptions import SubscriptionCoordinator
from server.subscriptions import api as subscriptions_api
from server.topics import MAX_PARTITIONS, TopicConfig, unknown_topic, validate_topic_name
from server.trace import api as trace_api
from server.trace.service import TraceService
from server.usage.emitter import UsageEmitter

__all__ = ["Shutdown", "StartupAborted", "create_app", "create_asgi"]

log = logging.getLogger("talos.server")


class Shutdown:
    """The process's stop, shared by the thread that takes its signals (server/__main__.py) and the lifespan below.

    The first SIGTERM or SIGINT starts the clock: the drain of open requests, flushing and sealing the partitions
    and leaving ZooKeeper are over by ``deadline`` (a ``time.monotonic()``), whatever the state the signal found
    (starting, serving, shutting down); a later signal changes nothing. ``phase`` and ``step`` say where the
    server is and ``abandoned`` what the deadline cut short: the report when the process has to be ended."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.deadline: float | None = None
        self.signal = ""
        self.phase = "starting"  # then serving, draining (open requests), closing (the lifespan), stopped
        self.step = ""
        self.abandoned: list[str] = []
        self.start_aborted = False  # the lifespan failed on purpose: uvicorn's "startup failed" is expected

    @property
    def begun(self) -> bool:
        return self.deadline is not None

    def begin(self, reason: str) -> bool:
        """Start the clock (from the signal-taking thread); False if it runs already: the deadline stays."""
        if self.deadline is not None:
            return False
        self.deadline = time.monotonic() + self.timeout_s
        self.signal = reason
        if self.phase == "serving":
            self.phase = "draining"
        return True

    def remaining(self) -> float:
        return math.inf if self.deadline is None else max(0.0, self.deadline - time.monotonic())


class StartupAborted(Exception):
    """A SIGTERM (or SIGINT) came during start-up: the server stopped before serving."""


class TopicCreate(BaseModel):
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


class TopicPatch(BaseModel):
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


def create_asgi(config: ServerConfig, shutdown: Shutdown | None = None) -> FastPath:
    """The application as served: the fast path for produce/fetch/offsets in front of FastAPI."""
    app = create_app(config, shutdown)
    return FastPath(PortalHeaders(app), app.state.broker_of)  # not app.state.broker: a State lookup per call


async def _start_broker(config: ServerConfig, shutdown: Shutdown | None) -> Broker:
    """``Broker.start``, unless a signal comes first (``shutdown`` begun): then the start-up is cancelled, what it
    opened is closed within the deadline, and the lifespan fails with :class:`StartupAborted` (uvicorn exits
    without serving). Start-up may wait long: for ZooKeeper, for our server id, for the storage."""
    if shutdown is None:
        return await Broker.start(config)
    if not shutdown.begun:
        starting = asyncio.ensure_future(Broker.start(config, deadline=lambda: shutdown.deadline))
        while not shutdown.begun:  # polled: the signal comes on another thread, maybe while the loop is stuck
            done, _ = await asyncio.wait({starting}, timeout=0.1)
            if done:
                return starting.result()
        shutdown.step = "cancelling the start-up"
        starting.cancel()
        await asyncio.wait({starting}, timeout=shutdown.remaining())
        if not starting.done():
            shutdown.abandoned.append("the cancelled start-up (closing what it had opened)")
        elif not starting.cancelled() and starting.exception() is None:  # it was done as the signal came
            shutdown.abandoned.extend(await starting.result().close(shutdown.deadline))
    shutdown.start_aborted = True
    log.info("%s during start-up: stopped before serving", shutdown.signal)
    raise StartupAborted(f"{shutdown.signal} during start-up")


def create_app(config: ServerConfig, shutdown: Shutdown | None = None) -> FastAPI:
    """The FastAPI application; ``shutdown`` (``python -m server``) bounds its start-up and shutdown by the
    signals' deadline (else the shutdown gets ``shutdown_timeout_s`` from its start)."""
    broker_holder: dict[str, Broker] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        watchdog = LoopWatchdog().start()  # logs what blocks the event loop, with its stack (issue 35)
        try:
            broker = await _start_broker(config, shutdown)
        except BaseException:  # a failed or cancelled start-up: no lifespan shutdown follows
            watchdog.stop()
            raise
        broker_holder["broker"] = broker
        app.state.broker = broker
        app.state.storage_check = StorageCheck(lambda: broker.fs.exists(broker.root))
        app.state.coordinator = coordinator = GroupCoordinator(broker)
        app.state.subscriptions = subscriptions = SubscriptionCoordinator(broker)
        maintenance = asyncio.get_running_loop().create_task(_maintain(broker, coordinator, subscriptions))
        refreshing = asyncio.get_running_loop().create_task(broker.security.run())
        emitter = UsageEmitter(broker, broker.usage)
        emitting = asyncio.get_running_loop().create_task(emitter.run()) if config.metering_interval_s > 0 else None
        app.state.trace = tracing = TraceService(broker)
        tracing.start()
        kafka = KafkaListener(broker, coordinator) if config.kafka_port else None
        if kafka is not None:
            await kafka.start()
        gc.collect()
        gc.freeze()  # start-up objects never move again: far fewer long GC pauses (p99)
        if config.gc_threshold > 0:
            gc.set_threshold(config.gc_threshold, *gc.get_threshold()[1:])
        if broker.cluster is not None:
            log.info("server %s at %s: storage %s, zk %s", config.member_id, config.url, config.storage, config.zk)
        else:
            log.info("talos serving storage %s", config.storage)
        if shutdown is not None:
            shutdown.phase = "draining" if shutdown.begun else "serving"
        try:
            yield
        finally:
            # Every step is over by the deadline; one still running then (storage or ZooKeeper hung) is given up.
            end = shutdown.deadline if shutdown is not None and shutdown.deadline is not None else None
            if end is None:
                end = time.monotonic() + config.shutdown_timeout_s
            end -= min(1.0, 0.1 * config.shutdown_timeout_s)  # left for uvicorn and the process to end
            services_end = time.monotonic() + max(0.0, end - time.monotonic()) * 0.3  # the broker gets the rest
            abandoned: list[str] = []
            if shutdown is not None:
                shutdown.phase = "closing"

            async def step(what: str, closing: Awaitable[object]) -> None:
                if shutdown is not None:
                    shutdown.step = what
                await until_deadline(what, closing, services_end, abandoned)

            if kafka is not None:
                await step("closing the Kafka listener", kafka.close())
            maintenance.cancel()
            refreshing.cancel()
            if emitting is not None:
                emitting.cancel()
                await step("writing the last usage records", emitter.close())
            await step("closing push subscriptions", subscriptions.close())
            await step("writing the last trace events", tracing.close())
            if shutdown is not None:
                shutdown.step = "closing the broker (partitions, ZooKeeper, I/O threads)"
            abandoned += await broker.close(end)
            if shutdown is not None:
                shutdown.abandoned += abandoned
                shutdown.phase, shutdown.step = "stopped", ""
            watchdog.stop()

    app = FastAPI(
        title="Talos",
        version="0.1.0",
        summary="A message queue with compute separated from storage.",
        lifespan=lifespan,
    )

    def broker() -> Broker:
        return broker_holder["broker"]

    app.state.broker_of = broker

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> Response:
        if request.url.path.startswith("/portal"):
            return portal_pages.error_page(exc)
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

    def check_partition_quota(tenant: str | None, topic: str | None, partitions: int) -> None:
        partition_quotas.check_partition_quota(broker(), tenant, topic, partitions)

    def visible(who: Principal, topic: TopicConfig) -> bool:
        security = broker().security
        return not security.enabled or bool(actions_on(who, security.state, topic.name, topic.tenant))

    def readable_topic(who: Principal, name: str) -> TopicConfig:
        config = broker().topic(name)
        if not visible(who, config):
            if hidden(name, frozenset()):  # as if it did not exist: no tenant learns others' topic names
                raise unknown_topic(name)
            raise ApiError(403, "FORBIDDEN", f"tenant {who.name!r} may not see topic {name[:300]!r}")
        return config

    @app.post("/v1/topics", status_code=201, tags=["topics"], summary="Create a topic")
    async def create_topic(body: TopicCreate, request: Request) -> Response:
        who = principal(request)
        validate_topic_name(body.name)
        if body.tenant is not None and not who.admin:
            raise ApiError(403, "FORBIDDEN", "only the admin names a topic's tenant; a tenant's topics are its own")
        security = broker().security
        if body.name.startswith("__"):  # a shared internal topic clients may create: nobody's
            tenant = None
            security.authorize(who, body.name, "produce")
        else:
            tenant = who.tenant if who.tenant is not None else body.tenant
            if tenant is not None:
                security.state.tenant(tenant)  # 404 for an unknown tenant
        check_partition_quota(tenant, None, body.partitions)
        created = await broker().create_topic(
            TopicConfig(body.name, body.partitions, body.retention_ms, body.retention_bytes, tenant=tenant)
        )
        await audit.record(
            broker(), who, "topic.create", body.name, tenant=tenant, detail=f"{body.partitions} partitions"
        )
        return json_response(topic_json(created), 201)

    @app.get("/v1/topics", tags=["topics"], summary="List topics (a tenant sees those it may use)")
    async def list_topics(request: Request) -> Response:
        who = principal(request)
        return json_response({"topics": [topic_json(t) for t in broker().list_topics() if visible(who, t)]})

    @app.get("/v1/topics/{topic}", tags=["topics"], summary="Describe a topic with its partitions' offsets")
    async def describe_topic(topic: str, request: Request) -> Response:
        config = readable_topic(principal(request), topic)

        async def detail(index: int) -> dict[str, object]:
            reply = await messages.offsets(broker(), topic, index, {}, {})
            owner = broker().owner(topic, index)
            if reply.status != 200:  # another server's partition whose owner cannot answer now
                return {"partition": index, "earliest": None, "latest": None, "owner": owner.server_id}
            answer = orjson.loads(reply.body)
            return {
                "partition": index,
                "earliest": answer["earliest"],
                "latest": answer["latest"],
                "owner": owner.server_id,
            }

        partitions = await asyncio.gather(*(detail(index) for index in range(config.partitions)))
        return json_response({**topic_json(config), "partitions_detail": partitions})

    @app.patch("/v1/topics/{topic}", tags=["topics"], summary="Add partitions or change retention")
    async def patch_topic(topic: str, body: TopicPatch, request: Request) -> Response:
        who = principal(request)
        current = broker().topic(topic)
        broker().security.authorize(who, current, "admin")
        if body.partitions is not None and body.partitions < current.partitions:
            raise ApiError(400, "INVALID_REQUEST", f"partitions can only grow (now {current.partitions})")
        if body.partitions is not None:
            check_partition_quota(current.tenant, topic, body.partitions)
        changes = body.model_dump(exclude_unset=True)
        if "partitions" in changes and changes["partitions"] is None:  # null: unchanged (it stored None)
            del changes["partitions"]
        if "trace_sample" in changes and changes["trace_sample"] is None:  # null: unchanged
            del changes["trace_sample"]
        updated = await broker().update_topic(topic, **changes)
        detail = ", ".join(f"{k}={v}" for k, v in changes.items())
        await audit.record(broker(), who, "topic.update", topic, tenant=current.tenant, detail=detail)
        return json_response(topic_json(updated))

    @app.delete("/v1/topics/{topic}", status_code=204, tags=["topics"], summary="Delete a topic and its data")
    async def delete_topic(topic: str, request: Request) -> Response:
        who = principal(request)
        current = broker().topic(topic)
        broker().security.authorize(who, current, "admin")
        # Its grants go first: a deletion that stops half-way leaves a topic nobody else reads, never a grant
        # that a topic made later under the name would inherit.
        await broker().security.change(lambda s: s.forget_topic_grants(topic))
        await broker().delete_topic(topic)
        if topic in broker().security.state.topic_quotas:  # a new topic of the same name starts unlimited
            await broker().security.change(lambda s: s.set_quota(None, topic, dict.fromkeys(QUOTA_FIELDS)))
        await audit.record(broker(), who, "topic.delete", topic, tenant=current.tenant)
        return Response(status_code=204)

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
        b = broker()
        tenant = principal(request).tenant if b.security.enabled else None  # the id's owner (None: the admin)
        loop = asyncio.get_running_loop()
        if body.name is None:
            if body.producer_epoch is not None or body.lease_ms:
                raise ApiError(400, "INVALID_REQUEST", "producer_epoch and lease_ms go with a name")
            producer_id, epoch = await loop.run_in_executor(
                b.executor, b.producer_ids.allocate, body.producer_id, tenant
            )
            return json_response({"producer_id": producer_id, "producer_epoch": epoch})
        if (body.producer_id is None) != (body.producer_epoch is None):
            raise ApiError(400, "INVALID_REQUEST", "a renewal gives both producer_id and producer_epoch")
        holder = (
            None if body.producer_id is None or body.producer_epoch is None else (body.producer_id, body.producer_epoch)
        )
        producer_id, epoch = await loop.run_in_executor(
            b.executor, b.producer_ids.claim, body.name, tenant, body.lease_ms, holder
        )
        return json_response({"producer_id": producer_id, "producer_epoch": epoch, "lease_ms": body.lease_ms})

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
        replies = await asyncio.gather(
            *(
                messages.fence(b, topic, p, request.headers, body.producer_id, body.producer_epoch)
                for p in range(b.topic(topic).partitions)
            )
        )
        for reply in replies:
            if reply.status != 200:
                return as_response(reply)
        return json_response({"topic": topic, "partitions": len(replies), "producer_epoch": body.producer_epoch})

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
        reply = await messages.fence(broker(), topic, partition, request.headers, body.producer_id, body.producer_epoch)
        return as_response(reply)

    # ---------------------------------------------------------------- messages (also served by the fast path)

    @app.post("/v1/topics/{topic}/messages", tags=["messages"], summary="Produce", openapi_extra=_PRODUCE_SCHEMA)
    async def produce(topic: str, request: Request) -> Response:
        authorize_message(broker(), principal(request), topic, "produce")
        body = await read_request_body(request, broker().config.max_request_bytes)
        return as_response(await messages.produce(broker(), topic, None, request.headers, request.query_params, body))

    @app.post(
        "/v1/topics/{topic}/partitions/{partition}/messages",
        tags=["messages"],
        summary="Produce to one partition (JSON, or record batches as application/vnd.talos.batch)",
        openapi_extra=_PRODUCE_SCHEMA,
    )
    async def produce_partition(topic: str, partition: PartitionIndex, request: Request) -> Response:
        authorize_message(broker(), principal(request), topic, "produce")
        body = await read_request_body(request, broker().config.max_request_bytes)
        reply = await messages.produce(broker(), topic, partition, request.headers, request.query_params, body)
        return as_response(reply)

    @app.get(
        "/v1/topics/{topic}/partitions/{partition}/messages",
        tags=["messages"],
        summary="Fetch from an offset (JSON, or raw batches with Accept: application/vnd.talos.batch)",
        openapi_extra=_FETCH_SCHEMA,
    )
    async def fetch(topic: str, partition: PartitionIndex, request: Request) -> Response:
        authorize_message(broker(), principal(request), topic, "fetch")
        return as_response(await messages.fetch(broker(), topic, partition, request.headers, request.query_params))

    @app.get(
        "/v1/topics/{topic}/partitions/{partition}/offsets",
        tags=["messages"],
        summary="Offsets, by time",
        openapi_extra=_OFFSETS_SCHEMA,
    )
    async def offsets(topic: str, partition: PartitionIndex, request: Request) -> Response:
        authorize_message(broker(), principal(request), topic, "offsets")
        return as_response(await messages.offsets(broker(), topic, partition, request.headers, request.query_params))

    app.include_router(groups_api.router)
    app.include_router(subscriptions_api.router)
    app.include_router(security_api.router)
    app.include_router(connector_offsets.router)
    app.include_router(trace_api.router)
    openapi.install(app)
    app.include_router(portal.router)
    return app


async def _maintain(broker: Broker, coordinator: GroupCoordinator, subscriptions: SubscriptionCoordinator) -> None:
    while True:
        await asyncio.sleep(broker.config.maintenance_interval_s)
        started = time.monotonic()
        try:
            await connect_offsets.index_of(broker).maintain()  # first: snapshots are due before retention runs
            await broker.maintain()
            await coordinator.maintain()
            await subscriptions.maintain()
        except (KazooException, ApiError, LogError) as exc:  # ZooKeeper or the storage away: next time
            log.warning("maintenance stopped early, retried in %g s: %r", broker.config.maintenance_interval_s, exc)
        except Exception:
            log.exception("maintenance failed")
        log.debug("maintenance took %.3fs", time.monotonic() - started)
