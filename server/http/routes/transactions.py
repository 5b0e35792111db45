"""REST for transactions: ``/v1/transactions/{transactional_id}/…``, what Kafka's InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn and EndTxn do. Any server answers; one that does not coordinate the id
forwards the call to the one that does (the owner of the id's ``__transaction_state`` partition).

A transactional id belongs to the caller's tenant (the id is kept per tenant: two tenants' ids of one name
are two ids). A transaction may take only partitions its tenant may produce to, and a group's offsets only of
a group its tenant may use."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from server.broker import Broker, NotOwnerError
from server.errors import ApiError
from server.groups.coordinator import validate_group_name
from server.groups.offsets import OFFSETS_TOPIC, offsets_partition
from server.http.forwarding import relay
from server.http.routes.security import principal
from server.messaging.authorization import authorize_message, may_use_group
from server.messaging.forwarder import answer_of
from server.tls import CERTIFICATE_HEADER
from server.topics import MAX_PARTITIONS
from server.transactions.coordinator import NAMED_TIMEOUT_MS, TransactionCoordinator, validate_transactional_id
from server.transactions.records import TRANSACTION_STATE_TOPIC
from server.usage.meter import TENANT_HEADER
from server.web import INT64_MAX, body_schema, json_response, parse_body, read_body

__all__ = ["claim_named", "router"]

_MAX_BODY = 1024 * 1024
router = APIRouter(prefix="/v1/transactions", tags=["transactions"])
# ``:path`` routes: a transactional id may hold "/" (a connector task's named producer is one), which arrives
# decoded from the client's %2F.


class Producer(BaseModel):
    producer_id: int = Field(ge=0, le=INT64_MAX, strict=True)
    producer_epoch: int = Field(ge=0, le=2**15 - 1, strict=True)


class InitRequest(BaseModel):
    timeout_ms: int = Field(
        60_000,
        strict=True,
        ge=1,
        le=2**31 - 1,
        description="a transaction open longer than this is aborted (at most the server's "
        "transaction_max_timeout_ms, 15 minutes by default)",
    )
    producer_id: int | None = Field(
        None,
        ge=0,
        le=INT64_MAX,
        strict=True,
        description="resume this instance (with producer_epoch) instead of a new one",
    )
    producer_epoch: int | None = Field(None, ge=0, le=2**15 - 1, strict=True)


class PartitionRef(BaseModel):
    topic: str
    partition: int = Field(ge=0, lt=MAX_PARTITIONS, strict=True)


class AddPartitionsRequest(Producer):
    partitions: list[PartitionRef] = Field(min_length=1, max_length=10_000)


class AddGroupRequest(Producer):
    group: str = Field(description="the consumer group whose offsets the transaction commits")


class EndRequest(Producer):
    commit: bool = Field(strict=True, description="true: commit; false: abort")


class VerifyRequest(Producer):
    tenant: str | None = None
    topic: str
    partition: int = Field(ge=0, lt=MAX_PARTITIONS, strict=True)


def _coordinator(request: Request) -> TransactionCoordinator:
    coordinator: TransactionCoordinator = request.app.state.transactions
    return coordinator


def _tenant(request: Request) -> str | None:
    broker: Broker = request.app.state.broker
    return principal(request).tenant if broker.security.enabled else None


async def _at_coordinator(
    request: Request,
    transactional_id: str,
    handle: Callable[[TransactionCoordinator, bytes, str | None], Awaitable[Response]],
    *,
    tenant: str | None = None,
    raw: bytes | None = None,
) -> Response:
    """Run ``handle`` here if this server coordinates the id, else forward the request (``raw``: its body, when
    the caller has read it) to the one that does."""
    validate_transactional_id(transactional_id)
    if raw is None:
        raw = await read_body(request.receive, _MAX_BODY, request.headers.get("content-length"))
    coordinator = _coordinator(request)
    tenant = tenant if tenant is not None else _tenant(request)
    owner = await coordinator.owner(tenant, transactional_id)
    if owner.local:
        return await handle(coordinator, raw, tenant)
    broker: Broker = request.app.state.broker
    return await relay(broker.forwarder, owner, request, raw)


@router.post(
    "/{transactional_id:path}/init",
    summary="Start (or take over) a transactional id: its producer id and a new epoch, which fences older ones",
    openapi_extra=body_schema(InitRequest),
)
async def init(transactional_id: str, request: Request) -> Response:
    async def handle(coordinator: TransactionCoordinator, raw: bytes, tenant: str | None) -> Response:
        body = parse_body(InitRequest, raw)
        expected = None
        if body.producer_id is not None and body.producer_epoch is not None:
            expected = (body.producer_id, body.producer_epoch)
        pid, epoch = await coordinator.init(tenant, transactional_id, timeout_ms=body.timeout_ms, expected=expected)
        return json_response({"producer_id": pid, "producer_epoch": epoch})

    return await _at_coordinator(request, transactional_id, handle)


async def claim_named(
    request: Request, raw: bytes, name: str, *, lease_ms: int, holder: tuple[int, int] | None
) -> Response:
    """``POST /v1/producers {"name"}`` (``raw``) at the name's coordinator: a named producer is the transactional
    id ``name`` with a lease. Without ``holder`` a new instance (a new epoch, which fences the older ones, and
    the lease), with it the holder's renewal (``lease_ms`` 0 releases)."""

    async def handle(coordinator: TransactionCoordinator, _raw: bytes, tenant: str | None) -> Response:
        if holder is None:
            broker: Broker = request.app.state.broker
            timeout_ms = min(NAMED_TIMEOUT_MS, broker.config.transaction_max_timeout_ms)
            pid, epoch = await coordinator.init(tenant, name, timeout_ms=timeout_ms, lease_ms=lease_ms)
        else:
            pid, epoch = await coordinator.renew(tenant, name, *holder, lease_ms=lease_ms)
        return json_response({"producer_id": pid, "producer_epoch": epoch, "lease_ms": lease_ms})

    return await _at_coordinator(request, name, handle, raw=raw)


@router.post(
    "/{transactional_id:path}/partitions",
    summary="Add partitions to the open transaction (before producing to them)",
    openapi_extra=body_schema(AddPartitionsRequest),
)
async def add_partitions(transactional_id: str, request: Request) -> Response:
    async def handle(coordinator: TransactionCoordinator, raw: bytes, tenant: str | None) -> Response:
        body = parse_body(AddPartitionsRequest, raw)
        broker: Broker = request.app.state.broker
        who = principal(request)
        for ref in body.partitions:
            authorize_message(broker, who, ref.topic, "produce")
            broker.check_partition(ref.topic, ref.partition)
        wanted = [(ref.topic, ref.partition) for ref in body.partitions]
        await coordinator.add_partitions(tenant, transactional_id, body.producer_id, body.producer_epoch, wanted)
        return json_response({"partitions": len(wanted)})

    return await _at_coordinator(request, transactional_id, handle)


@router.post(
    "/{transactional_id:path}/groups",
    summary="Add a consumer group's offsets to the open transaction (before committing them in it)",
    openapi_extra=body_schema(AddGroupRequest),
)
async def add_group(transactional_id: str, request: Request) -> Response:
    async def handle(coordinator: TransactionCoordinator, raw: bytes, tenant: str | None) -> Response:
        body = parse_body(AddGroupRequest, raw)
        validate_group_name(body.group)
        broker: Broker = request.app.state.broker
        await may_use_group(broker.security, principal(request), body.group, "tenant")
        partitions = broker.config.group_offsets_partitions
        offsets = (OFFSETS_TOPIC, offsets_partition(body.group, partitions))
        await coordinator.add_partitions(tenant, transactional_id, body.producer_id, body.producer_epoch, [offsets])
        return json_response({"group": body.group})

    return await _at_coordinator(request, transactional_id, handle)


@router.post(
    "/{transactional_id:path}/end",
    summary="Commit or abort the open transaction: decided when answered; the next epoch to use is returned",
    openapi_extra=body_schema(EndRequest),
)
async def end(transactional_id: str, request: Request) -> Response:
    async def handle(coordinator: TransactionCoordinator, raw: bytes, tenant: str | None) -> Response:
        body = parse_body(EndRequest, raw)
        pid, epoch = await coordinator.end(
            tenant, transactional_id, body.producer_id, body.producer_epoch, commit=body.commit, bump=True
        )
        return json_response({"producer_id": pid, "producer_epoch": epoch, "committed": body.commit})

    return await _at_coordinator(request, transactional_id, handle)


@router.post(
    "/{transactional_id:path}/verify",
    summary="Whether a partition is in the producer's open transaction (a partition's owner asks; admin only)",
    openapi_extra=body_schema(VerifyRequest),
)
async def verify(transactional_id: str, request: Request) -> Response:
    broker: Broker = request.app.state.broker
    broker.security.require_admin(principal(request))
    raw = await read_body(request.receive, _MAX_BODY, request.headers.get("content-length"))
    body = parse_body(VerifyRequest, raw)
    coordinator = _coordinator(request)
    found = await coordinator.in_transaction(
        body.tenant, transactional_id, body.producer_id, body.producer_epoch, body.topic, body.partition
    )
    return json_response({"in_transaction": found})


@router.get("/{transactional_id:path}", summary="Describe: state, producer id and epoch, partitions, start time")
async def describe(transactional_id: str, request: Request) -> Response:
    async def handle(coordinator: TransactionCoordinator, _raw: bytes, tenant: str | None) -> Response:
        return json_response(await coordinator.describe(tenant, transactional_id))

    return await _at_coordinator(request, transactional_id, handle)


@router.get("", summary="Transactional ids and their state (the caller's tenant's; the admin: everyone's)")
async def list_transactions(request: Request, partition: int | None = None) -> Response:
    """Every shard (``__transaction_state`` partition) asked at its owner, or (``partition``) one shard here."""
    coordinator = _coordinator(request)
    broker: Broker = request.app.state.broker
    tenant = _tenant(request)
    count = await coordinator.state_partitions()
    if partition is not None:
        if not 0 <= partition < count:
            raise ApiError(400, "INVALID_REQUEST", f"partition must be 0..{count - 1}")
        try:
            return json_response({"transactions": await coordinator.listed(tenant, partition)})
        except NotOwnerError as exc:
            return await relay(broker.forwarder, exc.owner, request, b"")
    headers = {k: v for k, v in request.headers.items() if k in ("authorization", CERTIFICATE_HEADER, TENANT_HEADER)}

    async def shard(index: int) -> list[dict[str, Any]]:
        owner = broker.owner(TRANSACTION_STATE_TOPIC, index)
        if owner.local:
            with contextlib.suppress(NotOwnerError):
                return await coordinator.listed(tenant, index)
        reply = await broker.forwarder.send(
            owner, "GET", "/v1/transactions", query={"partition": str(index)}, headers=headers, body=None
        )
        listed: list[dict[str, Any]] = answer_of(reply)["transactions"]
        return listed

    shards = await asyncio.gather(*(shard(i) for i in range(count)))
    everything = sorted((t for s in shards for t in s), key=lambda t: str(t["transactional_id"]))
    return json_response({"transactions": everything})
