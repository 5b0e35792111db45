"""REST and WebSocket for push subscriptions: ``/v1/subscriptions`` (make, list, describe, delete; and
``pull``/``settle``/``release``, which the servers relay to each other and which REST clients may use too)
and ``GET /v1/subscribe`` (the WebSocket, ``server.subscriptions.session``).

A subscription belongs to the tenant that made it (its state and dead-letter topics are that tenant's, and
so are the reads of its topic: billed to it, under its fetch quota). Only that tenant and the admin may use
it; to every other tenant it answers 404, as one that does not exist. Using it also needs the right to
consume its topic, checked at the coordinator on every pull and settle."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

import orjson
from fastapi import APIRouter, Request, WebSocket
from pydantic import BaseModel, Field, ValidationError
from starlette.responses import Response

from server.broker import Broker
from server.errors import ApiError
from server.http.bodies import body_schema, parse_body
from server.http.fastpath import read_body
from server.http.messages import INT64_MAX, int_param
from server.http.reply import answer_of, json_response
from server.security.access import Principal
from server.subscriptions.coordinator import SubscriptionCoordinator, new_holder
from server.subscriptions.link import CoordinatorLink, active_for, authorize
from server.subscriptions.records import STATE_PREFIX, SUBSCRIPTION_NAME, Settings, validate_subscription_name
from server.subscriptions.session import MAX_WINDOW, Session, error_frame

__all__ = ["router"]

_MAX_BODY = 1024 * 1024
_MAX_WAIT_MS = 30_000
router = APIRouter(tags=["subscriptions"])


class SubscriptionCreate(BaseModel):
    name: str = Field(
        description="1-200 of A-Z a-z 0-9 . _ -, not starting with . _ -",
        # Documented, not checked here: validate_subscription_name answers a bad name with its own error code.
        json_schema_extra={"pattern": SUBSCRIPTION_NAME.pattern},
    )
    topic: str
    ack_timeout_ms: int = Field(
        30_000, ge=100, le=12 * 3600 * 1000, description="unacknowledged this long: redelivered"
    )
    max_deliveries: int = Field(5, ge=0, le=1000, description="then dead-lettered (0: never)")
    key_ordered: bool = Field(False, description="a key's next message waits until the earlier one is settled")
    max_in_flight: int = Field(1000, ge=1, le=100_000, description="per partition: read but not yet settled")
    start: Literal["earliest", "latest"] = "latest"


class PullRequest(BaseModel):
    subscriber: str = Field(pattern=r"^[A-Za-z0-9._-]{1,64}$", description="the caller's name for itself")
    max_messages: int = Field(100, ge=1, le=MAX_WINDOW)
    wait_ms: int = Field(0, ge=0, le=_MAX_WAIT_MS)


class SettleItem(BaseModel):
    partition: int = Field(ge=0, le=INT64_MAX)
    offset: int = Field(ge=0, le=INT64_MAX)
    delivery: int = Field(ge=0, le=INT64_MAX)


class SettleRequest(BaseModel):
    subscriber: str = Field(pattern=r"^[A-Za-z0-9._-]{1,64}$")
    op: Literal["ack", "nack", "extend"]
    ms: int = Field(
        0, ge=0, le=7 * 24 * 3600 * 1000, description="nack: delay; extend: the lease's new length (0: the ack timeout)"
    )
    messages: list[SettleItem] = Field(min_length=1, max_length=MAX_WINDOW)


class ReleaseRequest(BaseModel):
    subscriber: str = Field(pattern=r"^[A-Za-z0-9._-]{1,64}$")


def _who(request: Request) -> Principal:
    from server.security.api import principal  # the security API imports the broker, as this module does

    return principal(request)


async def _at_coordinator(
    request: Request, name: str, handle: Callable[[Broker, SubscriptionCoordinator, bytes], Awaitable[Response]]
) -> Response:
    """``handle`` here if this server coordinates the subscription, else the request forwarded to the one that does."""
    validate_subscription_name(name)
    raw = await read_body(request.receive, _MAX_BODY, request.headers.get("content-length"))
    broker: Broker = request.app.state.broker
    coordinator: SubscriptionCoordinator = request.app.state.subscriptions
    owner = coordinator.owner(name)
    if owner.local:
        return await handle(broker, coordinator, raw)
    return await broker.forwarder.relay(owner, request, raw)


@router.post(
    "/v1/subscriptions",
    status_code=201,
    summary="Make a push subscription of a topic",
    openapi_extra=body_schema(SubscriptionCreate),
)
async def create_subscription(request: Request) -> Response:
    raw = await read_body(request.receive, _MAX_BODY, request.headers.get("content-length"))
    body = parse_body(SubscriptionCreate, raw)
    validate_subscription_name(body.name)
    broker: Broker = request.app.state.broker
    coordinator: SubscriptionCoordinator = request.app.state.subscriptions
    owner = coordinator.owner(body.name)
    if not owner.local:
        return await broker.forwarder.relay(owner, request, raw)
    who = _who(request)
    return json_response(await create(broker, coordinator, who, body), status=201)


async def create(
    broker: Broker, coordinator: SubscriptionCoordinator, who: Principal, body: SubscriptionCreate
) -> dict[str, object]:
    """Make the subscription (here, its coordinator), once ``who`` may consume the topic."""
    topic = broker.topic(body.topic)
    if broker.security.enabled:
        broker.security.authorize(who, topic, "consume")
        broker.security.limit_changes(who, "subscriptions")
    settings = Settings(
        topic=body.topic,
        ack_timeout_ms=body.ack_timeout_ms,
        max_deliveries=body.max_deliveries,
        key_ordered=body.key_ordered,
        max_in_flight=body.max_in_flight,
        start=body.start,
    )
    return await coordinator.create(body.name, settings, who.tenant)


@router.get("/v1/subscriptions", summary="List the subscriptions the caller may use")
async def list_subscriptions(request: Request) -> Response:
    broker: Broker = request.app.state.broker
    who = _who(request)
    names = sorted(
        t.name[len(STATE_PREFIX) :]
        for t in broker.list_topics()
        if t.name.startswith(STATE_PREFIX) and (not broker.security.enabled or who.admin or t.tenant == who.tenant)
    )
    return json_response({"subscriptions": names})


@router.get("/v1/subscriptions/{name}", summary="Describe: settings, subscribers, per partition what is settled")
async def describe_subscription(name: str, request: Request) -> Response:
    async def handle(broker: Broker, coordinator: SubscriptionCoordinator, _raw: bytes) -> Response:
        await active_for(broker, coordinator, _who(request), name)
        return json_response(await coordinator.describe(name))

    return await _at_coordinator(request, name, handle)


@router.delete("/v1/subscriptions/{name}", status_code=204, summary="Delete, with its state and dead letters")
async def delete_subscription(name: str, request: Request) -> Response:
    async def handle(broker: Broker, coordinator: SubscriptionCoordinator, _raw: bytes) -> Response:
        authorize(broker, coordinator, _who(request), name)
        await coordinator.delete(name)
        return Response(status_code=204)

    return await _at_coordinator(request, name, handle)


@router.post(
    "/v1/subscriptions/{name}/pull",
    summary="Lease up to max_messages messages to a subscriber (what the WebSocket pushes)",
    openapi_extra=body_schema(PullRequest),
)
async def pull(name: str, request: Request) -> Response:
    async def handle(broker: Broker, coordinator: SubscriptionCoordinator, raw: bytes) -> Response:
        active = await active_for(broker, coordinator, _who(request), name)  # first: others learn nothing
        body = parse_body(PullRequest, raw)
        found = await active.pull(body.subscriber, body.max_messages, body.wait_ms / 1000)
        return json_response({"messages": found})

    return await _at_coordinator(request, name, handle)


@router.post(
    "/v1/subscriptions/{name}/settle",
    summary="Acknowledge, give back (nack) or extend delivered messages",
    openapi_extra=body_schema(SettleRequest),
)
async def settle(name: str, request: Request) -> Response:
    async def handle(broker: Broker, coordinator: SubscriptionCoordinator, raw: bytes) -> Response:
        active = await active_for(broker, coordinator, _who(request), name)
        body = parse_body(SettleRequest, raw)
        items = [(m.partition, m.offset, m.delivery) for m in body.messages]
        return json_response({"results": await active.settle(body.subscriber, body.op, items, body.ms)})

    return await _at_coordinator(request, name, handle)


@router.post(
    "/v1/subscriptions/{name}/release",
    summary="A subscriber leaves: what it holds goes to the others at once",
    openapi_extra=body_schema(ReleaseRequest),
)
async def release(name: str, request: Request) -> Response:
    async def handle(broker: Broker, coordinator: SubscriptionCoordinator, raw: bytes) -> Response:
        active = await active_for(broker, coordinator, _who(request), name)
        body = parse_body(ReleaseRequest, raw)
        return json_response({"released": active.release(body.subscriber)})

    return await _at_coordinator(request, name, handle)


@router.websocket("/v1/subscribe")
async def subscribe(ws: WebSocket) -> None:
    """``GET /v1/subscribe?subscription=S[&window=N][&token=T]`` as a WebSocket; with ``topic=`` (and the
    settings of ``POST /v1/subscriptions`` as parameters) the subscription is made if it does not exist."""
    broker: Broker = ws.app.state.broker
    coordinator: SubscriptionCoordinator = ws.app.state.subscriptions
    params = ws.query_params
    headers = {k.lower(): v for k, v in ws.headers.items()}
    token = params.get("token")
    if token and "authorization" not in headers:  # browsers cannot set headers on a WebSocket
        headers["authorization"] = f"Bearer {token}"
    await ws.accept()
    try:
        who = await broker.security.authenticate(headers)
        name = validate_subscription_name(params.get("subscription") or "")
        window = int_param(params, "window", 100, low=1, high=MAX_WINDOW)
        link = CoordinatorLink(broker, coordinator, name, who, headers)
        if params.get("topic"):
            await _made(broker, coordinator, who, name, dict(params), headers)
        authorize(broker, coordinator, who, name)  # the right to consume its topic: checked by every pull
    except ApiError as exc:
        await ws.send_text(error_frame(exc).decode())
        await ws.close(code=4000 + exc.status if 400 <= exc.status < 600 else 1011)
        return
    holder = new_holder()
    owner = coordinator.owner(name)
    # Who coordinates it: a client that can reach that server may connect there instead and save a hop.
    hello = {"type": "hello", "subscriber": holder, "coordinator": owner.server_id, "coordinator_url": owner.url}
    await ws.send_text(orjson.dumps({**hello, "local": owner.local}).decode())
    await Session(ws, link, holder, window).run()


async def _made(
    broker: Broker,
    coordinator: SubscriptionCoordinator,
    who: Principal,
    name: str,
    params: dict[str, str],
    headers: dict[str, str],
) -> None:
    """Make the subscription from the WebSocket's parameters unless it exists."""
    try:
        coordinator.config_of(name)
        return
    except ApiError as exc:
        if exc.status != 404:
            raise
    fields: dict[str, object] = {"name": name, "topic": params["topic"]}
    for key in ("ack_timeout_ms", "max_deliveries", "max_in_flight"):
        if key in params:
            fields[key] = int_param(params, key, 0)
    if "key_ordered" in params:
        fields["key_ordered"] = params["key_ordered"].lower() in ("1", "true", "yes")
    if "start" in params:
        fields["start"] = params["start"]
    try:
        body = SubscriptionCreate.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ApiError(400, "INVALID_REQUEST", f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    owner = coordinator.owner(name)
    try:
        if owner.local:
            await create(broker, coordinator, who, body)
        else:
            reply = await broker.forwarder.send(
                owner,
                "POST",
                "/v1/subscriptions",
                query={},
                headers={**headers, "content-type": "application/json"},
                body=body.model_dump_json().encode(),
            )
            if reply.status != 201:
                answer_of(reply)
    except ApiError as exc:
        if exc.code != "SUBSCRIPTION_EXISTS":  # made by a racing subscriber: fine
            raise
