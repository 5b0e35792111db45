"""REST for push subscriptions: ``/v1/subscriptions`` (make, list, describe, delete; and ``pull``/``settle``/
``release``, which the servers relay to each other and which REST clients may use too). The WebSocket,
``GET /v1/subscribe``, is an edge of its own (``server.push``).

A subscription belongs to the tenant that made it (its state and dead-letter topics are that tenant's, and
so are the reads of its topic: billed to it, under its fetch quota). Only that tenant and the admin may use
it; to every other tenant it answers 404, as one that does not exist. Using it also needs the right to
consume its topic, checked at the coordinator on every pull and settle."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from server.broker import Broker
from server.http.forwarding import relay
from server.http.routes.security import principal
from server.security.access import Principal
from server.subscriptions.coordinator import SubscriptionCoordinator
from server.subscriptions.link import active_for, authorize
from server.subscriptions.making import MAX_WINDOW, SubscriptionCreate, create
from server.subscriptions.records import STATE_PREFIX, validate_subscription_name
from server.web import INT64_MAX, body_schema, json_response, parse_body, read_body

__all__ = ["router"]

_MAX_BODY = 1024 * 1024
_MAX_WAIT_MS = 30_000
router = APIRouter(tags=["subscriptions"])


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
    return await relay(broker.forwarder, owner, request, raw)


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
        return await relay(broker.forwarder, owner, request, raw)
    who = _who(request)
    return json_response(await create(broker, coordinator, who, body), status=201)


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
