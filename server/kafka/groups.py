"""The group APIs: FindCoordinator (of transactional ids too), JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups and OffsetDelete, on Talos consumer groups.

A Kafka group is a Talos group: one name space, one coordinator (the ring owner of ``__group:<name>``),
one owner tenant (claimed by its first use, as on REST, and checked the same way), one offsets store
(``__consumer_offsets``, under the group's shared offsets). Kafka members are assigned by their leader
(``server.kafka.group_state``) rather than by the coordinator, so a group is used by Kafka members or by
Talos members at a time: a Kafka commit while Talos members hold the group is refused.

Deleting a group (its committed offsets and its listing) is for its owner tenant or the admin, once it has no
members of either kind; a tenant it was only granted to is refused, as is one that may not see it. Deleting some
of its offsets (OffsetDelete) is for whoever may use the group and consume the topic, but not for a topic its
members consume now.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from server.errors import ApiError
from server.groups.coordinator import GroupCoordinator, validate_group_name
from server.kafka.context import Context
from server.kafka.failures import error_code
from server.kafka.group_state import KafkaGroup
from server.kafka.nodes import node_of
from server.kafka.protocol.errors import ErrorCode
from server.kafka.protocol.primitives import ProtocolError, Reader
from server.messaging.authorization import authorize_message, may_use_group
from server.transactions.coordinator import validate_transactional_id

__all__ = [
    "delete_groups",
    "describe_groups",
    "find_coordinator",
    "group_here",
    "heartbeat",
    "join_group",
    "leave_group",
    "list_groups",
    "offset_commit",
    "offset_delete",
    "offset_fetch",
    "sync_group",
]

log = logging.getLogger("talos.kafka")

_GROUP_KEY, _TRANSACTION_KEY = 0, 1


async def _locate(ctx: Context, key: str, key_type: int) -> dict[str, Any]:
    """Where a group's coordinator is (the ring owner of ``__group:<name>``), or a transactional id's (the owner
    of its ``__transaction_state`` partition, the id taken as the connection's tenant's)."""
    answer: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": 0, "error_message": None}
    if key_type not in (_GROUP_KEY, _TRANSACTION_KEY):
        answer.update(error_code=ErrorCode.INVALID_REQUEST, error_message=f"key type {key_type} is not served")
        return answer
    try:
        if key_type == _GROUP_KEY:
            validate_group_name(key)
        else:
            validate_transactional_id(key)
    except ApiError as exc:
        invalid = ErrorCode.INVALID_GROUP_ID if key_type == _GROUP_KEY else ErrorCode.INVALID_REQUEST
        answer.update(error_code=invalid, error_message=exc.message)
        return answer
    if key_type == _TRANSACTION_KEY and not _may_use_transactional_ids(ctx):
        answer.update(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, error_message="not authenticated")
        return answer
    try:
        if key_type == _GROUP_KEY:
            owner = ctx.coordinator.owner(key)
        else:
            owner = await ctx.transactions.owner(ctx.session.principal.tenant, key)
        node = node_of(ctx.broker, owner, ctx.session.listener)
    except ApiError as exc:  # no server in the ring yet (or the transaction state topic not made yet)
        answer.update(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=exc.message)
        return answer
    if node is None:
        answer.update(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="the coordinator is not registered")
    else:
        answer.update(node_id=node.node_id, host=node.host, port=node.port)
    return answer


def _may_use_transactional_ids(ctx: Context) -> bool:
    """Every authenticated principal may: a tenant's ids are its own (the coordinator keeps them per tenant),
    so no id needs a grant. With auth on, only a connection that has not authenticated may not."""
    return not ctx.broker.security.enabled or ctx.session.authenticated


async def find_coordinator(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    key_type = body.get("key_type", _GROUP_KEY)
    if ctx.header.api_version >= 4:
        keys = body.get("coordinator_keys") or []
        return {"throttle_time_ms": 0, "coordinators": [await _locate(ctx, key, key_type) for key in keys]}
    answer = await _locate(ctx, body.get("key", ""), key_type)
    answer.pop("key")
    return {"throttle_time_ms": 0, **answer}


async def group_here(ctx: Context, name: str, *, claim: bool = True) -> KafkaGroup | ErrorCode:
    """The group here, once the caller may use it; else the error to answer."""
    try:
        validate_group_name(name)
    except ApiError:
        return ErrorCode.INVALID_GROUP_ID
    try:
        if not ctx.coordinator.owner(name).local:
            return ErrorCode.NOT_COORDINATOR
    except ApiError:  # no server in the ring yet
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    try:
        await may_use_group(ctx.broker.security, ctx.session.principal, name, "tenant" if claim else "never")
    except ApiError:
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    group = ctx.memberships.groups.get(name)
    if group is not None:
        return group
    try:  # none in memory here: the members recorded before this server restarted, or before the ring moved it
        recorded = await ctx.coordinator.kafka_membership(name)
    except ApiError as exc:
        if exc.status != 404:  # 404: a group never used
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if exc.retriable else error_code(exc)
        recorded = None
    return ctx.memberships.restore(name, recorded, time.monotonic())


async def record_memberships(ctx: Context) -> None:
    """Record the Kafka groups whose rebalance completed or whose last member left (``KafkaGroup.changed``)."""
    for group in ctx.memberships.changed():
        await record_membership(ctx.coordinator, group)


async def record_membership(coordinator: GroupCoordinator, group: KafkaGroup) -> None:
    try:
        await coordinator.record_kafka_membership(group.name, group.membership())
    except ApiError as exc:  # a restart then finds older members, who rejoin: as before it was recorded
        log.warning("group %s: its Kafka members were not recorded: %s", group.name, exc)


async def join_group(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    group = await group_here(ctx, body["group_id"])
    failed = {
        "throttle_time_ms": 0,
        "generation_id": -1,
        "protocol_name": "",
        "leader": "",
        "member_id": body.get("member_id", ""),
        "members": [],
    }
    if isinstance(group, ErrorCode):
        return {**failed, "error_code": group}
    config = ctx.broker.config
    session_ms = body["session_timeout_ms"]
    if not config.group_min_session_s * 1000 <= session_ms <= config.group_max_session_s * 1000:
        return {**failed, "error_code": ErrorCode.INVALID_SESSION_TIMEOUT}
    rebalance_ms = body.get("rebalance_timeout_ms", -1)
    if rebalance_ms <= 0:
        rebalance_ms = session_ms
    future = group.join(
        time.monotonic(),
        member_id=body.get("member_id") or "",
        instance_id=body.get("group_instance_id"),
        client_id=ctx.header.client_id or "",
        client_host=ctx.session.peer,
        session_s=session_ms / 1000,
        rebalance_s=min(rebalance_ms, config.group_max_session_s * 1000) / 1000,
        protocol_type=body.get("protocol_type") or "",
        protocols=[(p["name"], bytes(p["metadata"] or b"")) for p in body.get("protocols") or []],
    )
    await ctx.coordinator.register(group.name)
    result = await future
    return {
        "throttle_time_ms": 0,
        "error_code": result.error,
        "generation_id": result.generation,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol or "",
        "leader": result.leader,
        "member_id": result.member_id,
        "members": [{"member_id": m, "group_instance_id": i, "metadata": d} for m, i, d in result.members],
    }


async def sync_group(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    group = await group_here(ctx, body["group_id"], claim=False)
    if isinstance(group, ErrorCode):
        return {"throttle_time_ms": 0, "error_code": group, "assignment": b""}
    assignments = {a["member_id"]: bytes(a["assignment"] or b"") for a in body.get("assignments") or []}
    code, assignment = await group.sync(time.monotonic(), body["member_id"], body["generation_id"], assignments)
    await record_memberships(ctx)  # before the leader hears its assignment went out, as Kafka's coordinator does
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "protocol_type": group.protocol_type,
        "protocol_name": group.protocol,
        "assignment": assignment,
    }


async def heartbeat(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    group = await group_here(ctx, body["group_id"], claim=False)
    if isinstance(group, ErrorCode):
        return {"throttle_time_ms": 0, "error_code": group}
    return {
        "throttle_time_ms": 0,
        "error_code": group.heartbeat(time.monotonic(), body["member_id"], body["generation_id"]),
    }


async def leave_group(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    group = await group_here(ctx, body["group_id"], claim=False)
    members = body.get("members") or [{"member_id": body.get("member_id", ""), "group_instance_id": None}]
    if isinstance(group, ErrorCode):
        return {"throttle_time_ms": 0, "error_code": group, "members": []}
    now = time.monotonic()
    answers = [{**m, "error_code": group.leave(now, m["member_id"])} for m in members]
    await record_memberships(ctx)
    top = answers[0]["error_code"] if ctx.header.api_version < 3 else ErrorCode.NONE
    return {"throttle_time_ms": 0, "error_code": top, "members": answers}


CommitItems = list[tuple[tuple[str, int], int, int | None]]


def commit_refused(topics: list[dict[str, Any]], code: int) -> dict[str, Any]:
    """An OffsetCommit (or TxnOffsetCommit) answer with ``code`` for every partition it names."""
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": t["name"],
                "partitions": [{"partition_index": p["partition_index"], "error_code": code} for p in t["partitions"]],
            }
            for t in topics
        ],
    }


async def commit_offsets(
    ctx: Context,
    group: KafkaGroup,
    topics: list[dict[str, Any]],
    commit: Callable[[CommitItems], Awaitable[object]],
) -> dict[str, Any]:
    """The partitions the connection may read, committed by ``commit`` (plainly, or in a transaction), the
    others refused one by one; the answer of OffsetCommit and TxnOffsetCommit."""
    answers: dict[str, list[dict[str, Any]]] = {}
    items: CommitItems = []
    for topic in topics:
        try:
            authorize_message(ctx.broker, ctx.session.principal, topic["name"], "fetch")
            code = ErrorCode.NONE
        except ApiError as exc:
            code = error_code(exc)
        for part in topic["partitions"]:
            answers.setdefault(topic["name"], []).append(
                {"partition_index": part["partition_index"], "error_code": code}
            )
            if code == ErrorCode.NONE:
                items.append(((topic["name"], part["partition_index"]), part["committed_offset"], None))
    if items:
        try:
            await ctx.coordinator.register(group.name)
            await commit(items)
        except ApiError as exc:
            code = ErrorCode.REBALANCE_IN_PROGRESS if exc.code == "GROUP_ACTIVE" else error_code(exc)
            for parts in answers.values():
                for part in parts:
                    if part["error_code"] == ErrorCode.NONE:
                        part["error_code"] = code
    return {"throttle_time_ms": 0, "topics": [{"name": n, "partitions": p} for n, p in answers.items()]}


async def offset_commit(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    topics = body.get("topics") or []
    group = await group_here(ctx, body["group_id"])
    if isinstance(group, ErrorCode):
        return commit_refused(topics, group)
    check = group.check_commit(time.monotonic(), body.get("member_id") or "", body["generation_id_or_member_epoch"])
    if check:
        return commit_refused(topics, check)
    return await commit_offsets(ctx, group, topics, lambda items: ctx.coordinator.commit(group.name, None, items))


async def offset_fetch(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    name = body["group_id"]
    requested = body.get("topics")
    group = await group_here(ctx, name, claim=False)
    if isinstance(group, ErrorCode):
        return {
            "throttle_time_ms": 0,
            "error_code": group,
            "topics": [
                {
                    "name": t["name"],
                    "partitions": [
                        {"partition_index": i, "committed_offset": -1, "error_code": group}
                        for i in t["partition_indexes"]
                    ],
                }
                for t in requested or []
            ],
        }
    try:
        rows: Any = (await ctx.coordinator.offsets(name, None))["offsets"]
    except ApiError as exc:
        if exc.code != "UNKNOWN_GROUP":
            return {"throttle_time_ms": 0, "error_code": error_code(exc), "topics": []}
        rows = []
    committed = {(r["topic"], r["partition"]): r["offset"] for r in rows if not r.get("instance")}
    unstable: set[tuple[str, int]] = set()
    if body.get("require_stable"):  # v7+: offsets a transaction committed and has not decided yet are asked about
        try:
            unstable = await ctx.coordinator.unstable_offsets(name)
        except ApiError as exc:
            if exc.code != "UNKNOWN_GROUP":
                return {"throttle_time_ms": 0, "error_code": error_code(exc), "topics": []}
    if requested is None:
        wanted: dict[str, list[int]] = {}
        for topic, index in sorted(committed):
            wanted.setdefault(topic, []).append(index)
    else:
        wanted = {t["name"]: list(t["partition_indexes"]) for t in requested}
    topics = []
    for topic, indexes in wanted.items():
        parts = [
            {
                "partition_index": i,
                "committed_offset": -1 if (topic, i) in unstable else committed.get((topic, i), -1),
                "committed_leader_epoch": -1,
                "metadata": "",
                "error_code": ErrorCode.UNSTABLE_OFFSET_COMMIT if (topic, i) in unstable else ErrorCode.NONE,
            }
            for i in indexes
        ]
        topics.append({"name": topic, "partitions": parts})
    return {"throttle_time_ms": 0, "error_code": 0, "topics": topics}


async def describe_groups(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    answers = []
    for name in body.get("groups") or []:
        group = await group_here(ctx, name, claim=False)
        if isinstance(group, ErrorCode):
            answers.append(
                {
                    "error_code": group,
                    "group_id": name,
                    "group_state": "",
                    "protocol_type": "",
                    "protocol_data": "",
                    "members": [],
                }
            )
            continue
        members = [
            {
                "member_id": m.member_id,
                "group_instance_id": m.instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": m.metadata(group.protocol or ""),
                "member_assignment": m.assignment,
            }
            for m in group.members.values()
        ]
        answers.append(
            {
                "error_code": 0,
                "group_id": name,
                "group_state": group.state if group.members else "Empty",
                "protocol_type": group.protocol_type or "",
                "protocol_data": group.protocol or "",
                "members": members,
            }
        )
    return {"throttle_time_ms": 0, "groups": answers}


async def list_groups(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """The groups this server coordinates (Kafka asks every broker), that the caller may use."""
    security = ctx.broker.security
    names = set(await ctx.coordinator.list()) | set(ctx.memberships.groups)
    answers = []
    for name in sorted(names):
        try:
            if not ctx.coordinator.owner(name).local:
                continue
        except ApiError:
            continue
        if security.enabled and not security.state.may_use_group(ctx.session.principal.tenant, name):
            continue
        group = ctx.memberships.groups.get(name)
        state = group.state if group is not None and group.members else "Empty"
        protocol_type = (group.protocol_type if group is not None else None) or "consumer"
        answers.append({"group_id": name, "protocol_type": protocol_type, "group_state": state})
    filters = body.get("states_filter") or []
    if filters:
        answers = [a for a in answers if a["group_state"] in filters]
    return {"throttle_time_ms": 0, "error_code": 0, "groups": answers}


async def _delete_group(ctx: Context, name: str) -> ErrorCode:
    group = await group_here(ctx, name, claim=False)
    if isinstance(group, ErrorCode):
        return group
    security, who = ctx.broker.security, ctx.session.principal
    if security.enabled and not who.admin and security.state.group_owners.get(name) != who.tenant:
        return ErrorCode.GROUP_AUTHORIZATION_FAILED  # granted the group: it may use it, not delete it
    if group.members:
        return ErrorCode.NON_EMPTY_GROUP
    try:
        await ctx.coordinator.delete(name)
    except ApiError as exc:
        return error_code(exc, denied=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if not group.members:
        ctx.memberships.groups.pop(name, None)
    return ErrorCode.NONE


async def delete_groups(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    results = [
        {"group_id": name, "error_code": await _delete_group(ctx, name)}
        for name in dict.fromkeys(body.get("groups_names") or [])
    ]
    return {"throttle_time_ms": 0, "results": results}


def _subscription(metadata: bytes) -> set[str]:
    """The topics of a consumer's subscription (ConsumerProtocolSubscription: a version, then the topics)."""
    try:
        reader = Reader(metadata)
        reader.read_int16()
        return {reader.read_string() for _ in range(max(reader.read_int32(), 0))}
    except ProtocolError:
        return set()


async def offset_delete(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    name = body["group_id"]
    group = await group_here(ctx, name, claim=False)
    if isinstance(group, ErrorCode):
        return {"error_code": group, "throttle_time_ms": 0, "topics": []}
    if group.members and group.protocol_type != "consumer":  # whose members' topics cannot be read
        return {"error_code": ErrorCode.NON_EMPTY_GROUP, "throttle_time_ms": 0, "topics": []}
    subscribed = {t for m in group.members.values() for _, data in m.protocols for t in _subscription(data)}
    answers: dict[str, list[dict[str, Any]]] = {}
    items: list[tuple[str, int]] = []
    for topic in body.get("topics") or []:
        try:
            authorize_message(ctx.broker, ctx.session.principal, topic["name"], "fetch")
            code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if topic["name"] in subscribed else ErrorCode.NONE
        except ApiError as exc:
            code = error_code(exc)
        for part in topic.get("partitions") or []:
            answers.setdefault(topic["name"], []).append(
                {"partition_index": part["partition_index"], "error_code": code}
            )
            if code == ErrorCode.NONE:
                items.append((topic["name"], part["partition_index"]))
    if items:
        try:
            consumed = await ctx.coordinator.delete_offsets(name, items)
        except ApiError as exc:
            code = error_code(exc, denied=ErrorCode.GROUP_AUTHORIZATION_FAILED)
            return {"error_code": code, "throttle_time_ms": 0, "topics": []}
        for topic_name in consumed:  # consumed by the group's Talos members
            for part in answers[topic_name]:
                if part["error_code"] == ErrorCode.NONE:
                    part["error_code"] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
    return {
        "error_code": 0,
        "throttle_time_ms": 0,
        "topics": [{"name": topic, "partitions": parts} for topic, parts in answers.items()],
    }
