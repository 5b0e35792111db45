"""REST for consumer groups: ``/v1/groups/{group}/…``. Any server answers; a server that is not the
group's coordinator forwards the call to the one that is (the ring's owner of ``"__group:<name>"``).

With auth on, a group belongs to the tenant whose join, commit or reset first used it (the admin's join
claims it for the admin), recorded in the security document; its owner, the tenants it granted the group
to and the admin may use it, and to everyone else it answers 404, as a group that does not exist. Claims
are made at the coordinator, and the document's compare-and-swap settles two tenants claiming one new
name at once: the loser gets the 404."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from server.broker import Broker
from server.errors import ApiError
from server.groups.coordinator import GroupCoordinator, validate_group_name
from server.http.forwarding import relay
from server.http.routes.security import principal
from server.messaging.authorization import Claim, may_use_group
from server.topics import MAX_PARTITIONS
from server.web import INT64_MAX, body_schema, json_response, parse_body, read_body

__all__ = ["router"]

_MAX_BODY = 1024 * 1024
router = APIRouter(prefix="/v1/groups", tags=["groups"])


class PartitionRef(BaseModel):
    topic: str
    partition: int = Field(ge=0, lt=MAX_PARTITIONS)


class JoinRequest(BaseModel):
    topics: list[str] = Field(min_length=1, max_length=1000, description="topics to consume")
    session_timeout_ms: int = Field(
        10_000, ge=0, le=INT64_MAX, description="locks expire this long after the last heartbeat"
    )
    mode: Literal["exclusive", "broadcast"] = Field(
        "exclusive", description="exclusive: each partition to one member; broadcast: every member gets all"
    )
    instance: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$",
        description="a stable name of this consumer (broadcast mode keeps offsets per instance)",
    )
    owned: list[PartitionRef] = Field(
        default_factory=list, description="partitions this consumer still holds (rejoining a new coordinator)"
    )


class HeartbeatRequest(BaseModel):
    owned: list[PartitionRef] = Field(default_factory=list, description="partitions the member holds now")


class CommitItem(PartitionRef):
    offset: int = Field(ge=0, le=INT64_MAX, description="the next offset to consume")
    generation: int | None = Field(None, ge=0, le=INT64_MAX, description="the generation the partition was granted in")


class InTransaction(BaseModel):
    transactional_id: str = Field(min_length=1, max_length=249)
    producer_id: int = Field(ge=0, le=INT64_MAX, strict=True)
    producer_epoch: int = Field(ge=0, le=2**15 - 1, strict=True)


class CommitRequest(BaseModel):
    member_id: str | None = Field(None, description="omit only for a group without active members")
    offsets: list[CommitItem] = Field(min_length=1, max_length=100_000)
    transaction: InTransaction | None = Field(
        None,
        description="commit in this producer's open transaction (which added the group): the offsets take "
        "effect if it commits, and are dropped if it aborts",
    )


class ResetRequest(BaseModel):
    topic: str
    partition: int | None = Field(None, ge=0, lt=MAX_PARTITIONS, description="omit: every partition of the topic")
    to: Literal["earliest", "latest", "offset", "timestamp"]
    offset: int | None = Field(
        None, ge=0, le=INT64_MAX, description="with to=offset (clamped to the partition's range)"
    )
    timestamp: int | None = Field(None, ge=0, le=INT64_MAX, description="with to=timestamp: ms since the epoch")


def _may_consume(request: Request, topics: list[str]) -> None:
    """A member consumes, commits or resets only topics its tenant may consume (checked at the coordinator)."""
    broker: Broker = request.app.state.broker
    if broker.security.enabled:
        who = principal(request)
        for topic in dict.fromkeys(topics):
            broker.security.authorize(who, broker.topic(topic), "consume")


async def _may_use(request: Request, group: str, claim: Claim) -> str | None:
    security = request.app.state.broker.security
    if not security.enabled:
        return None
    return await may_use_group(security, principal(request), group, claim)


async def _at_coordinator(
    request: Request,
    group: str,
    handle: Callable[[GroupCoordinator, bytes, str | None], Awaitable[Response]],
    *,
    claim: Claim = "never",
) -> Response:
    """Run ``handle`` here if this server coordinates the group (once the caller may use it: ``handle``
    gets the group's tenant); else forward the request to the one that does."""
    validate_group_name(group)
    raw = await read_body(request.receive, _MAX_BODY, request.headers.get("content-length"))
    coordinator: GroupCoordinator = request.app.state.coordinator
    owner = coordinator.owner(group)
    if owner.local:
        tenant = await _may_use(request, group, claim)
        return await handle(coordinator, raw, tenant)
    broker: Broker = request.app.state.broker
    return await relay(broker.forwarder, owner, request, raw)


@router.get("", summary="List groups")
async def list_groups(request: Request) -> Response:
    coordinator: GroupCoordinator = request.app.state.coordinator
    groups = await coordinator.list()
    security = request.app.state.broker.security
    if security.enabled:
        tenant, state = principal(request).tenant, security.state
        groups = [g for g in groups if state.may_use_group(tenant, g)]
    return json_response({"groups": groups})


@router.get("/{group}", summary="Describe: members, assignment, committed offsets, high watermarks, lag")
async def describe_group(group: str, request: Request) -> Response:
    async def handle(coordinator: GroupCoordinator, _raw: bytes, _tenant: str | None) -> Response:
        return json_response(await coordinator.describe(group))

    return await _at_coordinator(request, group, handle)


@router.post(
    "/{group}/members",
    summary="Join: get a member id and the partitions granted",
    openapi_extra=body_schema(JoinRequest),
)
async def join_group(group: str, request: Request) -> Response:
    async def handle(coordinator: GroupCoordinator, raw: bytes, tenant: str | None) -> Response:
        body = parse_body(JoinRequest, raw)
        _may_consume(request, body.topics)
        answer = await coordinator.join(
            group,
            tenant=tenant,
            topics=body.topics,
            session_s=body.session_timeout_ms / 1000,
            mode=body.mode,
            instance=body.instance,
            owned=[(p.topic, p.partition) for p in body.owned],
        )
        return json_response(answer)

    return await _at_coordinator(request, group, handle, claim="anyone")


@router.post(
    "/{group}/members/{member_id}/heartbeat",
    summary="Renew the member's locks; learn grants and revocations",
    openapi_extra=body_schema(HeartbeatRequest),
)
async def heartbeat(group: str, member_id: str, request: Request) -> Response:
    async def handle(coordinator: GroupCoordinator, raw: bytes, _tenant: str | None) -> Response:
        body = parse_body(HeartbeatRequest, raw)
        return json_response(
            await coordinator.heartbeat(group, member_id, [(p.topic, p.partition) for p in body.owned])
        )

    return await _at_coordinator(request, group, handle, claim="tenant")  # a group from before claims


@router.delete("/{group}/members/{member_id}", status_code=204, summary="Leave: the member's partitions are free")
async def leave_group(group: str, member_id: str, request: Request) -> Response:
    async def handle(coordinator: GroupCoordinator, _raw: bytes, _tenant: str | None) -> Response:
        await coordinator.leave(group, member_id)
        return Response(status_code=204)

    return await _at_coordinator(request, group, handle, claim="tenant")  # a group from before claims


@router.post(
    "/{group}/offsets",
    summary="Commit offsets (the holder of each partition)",
    openapi_extra=body_schema(CommitRequest),
)
async def commit(group: str, request: Request) -> Response:
    async def handle(coordinator: GroupCoordinator, raw: bytes, _tenant: str | None) -> Response:
        body = parse_body(CommitRequest, raw)
        _may_consume(request, [o.topic for o in body.offsets])
        items = [((o.topic, o.partition), o.offset, o.generation) for o in body.offsets]
        txn = body.transaction
        if txn is None:
            return json_response(await coordinator.commit(group, body.member_id, items))
        broker: Broker = request.app.state.broker
        tenant = principal(request).tenant if broker.security.enabled else None
        answer = await coordinator.commit_in_transaction(
            group,
            body.member_id,
            items,
            producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch,
            transactional_id=txn.transactional_id,
            tenant=tenant,
        )
        return json_response(answer)

    return await _at_coordinator(request, group, handle, claim="tenant")


@router.get("/{group}/offsets", summary="Committed offsets")
async def committed(
    group: str, request: Request, instance: str | None = None, require_stable: bool = False
) -> Response:
    """``require_stable``: 409 UNSTABLE_OFFSET_COMMIT (retriable) while offsets committed in a transaction
    are undecided (Kafka's OffsetFetch ``require_stable``: a read-committed consumer starts from them)."""

    async def handle(coordinator: GroupCoordinator, _raw: bytes, _tenant: str | None) -> Response:
        if require_stable and (unstable := await coordinator.unstable_offsets(group)):
            raise ApiError(
                409,
                "UNSTABLE_OFFSET_COMMIT",
                f"group {group!r} has offsets of {len(unstable)} partition(s) committed in a transaction not "
                "decided yet; retry",
                retriable=True,
            )
        return json_response(await coordinator.offsets(group, instance))

    return await _at_coordinator(request, group, handle)


@router.post(
    "/{group}/offsets/reset",
    summary="Move committed offsets to earliest, latest, an offset or a time (no active members)",
    openapi_extra=body_schema(ResetRequest),
)
async def reset_offsets(group: str, request: Request) -> Response:
    async def handle(coordinator: GroupCoordinator, raw: bytes, _tenant: str | None) -> Response:
        body = parse_body(ResetRequest, raw)
        _may_consume(request, [body.topic])
        if body.to == "offset" and body.offset is None:
            raise ApiError(400, "INVALID_REQUEST", "to=offset needs offset")
        if body.to == "timestamp" and body.timestamp is None:
            raise ApiError(400, "INVALID_REQUEST", "to=timestamp needs timestamp")
        answer = await coordinator.reset(
            group, topic=body.topic, partition=body.partition, to=body.to, offset=body.offset, timestamp=body.timestamp
        )
        return json_response(answer)

    return await _at_coordinator(request, group, handle, claim="tenant")
