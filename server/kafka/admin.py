"""CreatePartitions, DeleteRecords and DescribeCluster.

More partitions go through the same service as REST's ``PATCH /v1/topics/{t}`` (only more, never fewer; the
tenant's partition quota; the ``admin`` action; audited). Deleting records moves a partition's start offset at
its owner (``server.messaging.delete_records``: forwarded there from any server), for the same principals as
altering the topic. DescribeCluster lists the brokers Metadata lists.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fencing import OffsetOutOfRangeError
from server.errors import ApiError
from server.kafka.context import Context
from server.kafka.failures import admin_error_code, error_code
from server.kafka.nodes import node_id, nodes
from server.kafka.protocol.errors import ErrorCode
from server.kafka.topics import CLUSTER_ID
from server.messaging.delete_records import delete_records as delete_partition_records
from server.messaging.topics import update_topic

__all__ = ["create_partitions", "delete_records", "describe_cluster"]

_BROKERS_ENDPOINT = 1  # DescribeCluster's EndpointType: the brokers (2: the controllers, which Talos has none of)
# AclOperation bits (Kafka's AclOperation codes) of what a principal may do to the cluster.
_CREATE, _ALTER, _DESCRIBE, _CLUSTER_ACTION, _DESCRIBE_CONFIGS, _ALTER_CONFIGS, _IDEMPOTENT_WRITE = (
    5,
    7,
    8,
    9,
    10,
    11,
    12,
)
_TENANT_OPERATIONS = sum(1 << op for op in (_CREATE, _DESCRIBE, _DESCRIBE_CONFIGS, _IDEMPOTENT_WRITE))
_ADMIN_OPERATIONS = _TENANT_OPERATIONS | sum(1 << op for op in (_ALTER, _CLUSTER_ACTION, _ALTER_CONFIGS))


async def _more_partitions(ctx: Context, topic: dict[str, Any], validate_only: bool) -> dict[str, Any]:
    name, count = topic["name"], topic["count"]
    answer: dict[str, Any] = {"name": name, "error_code": 0, "error_message": None}
    broker = ctx.broker
    try:
        current = broker.topic(name)
        broker.security.authorize(ctx.session.principal, current, "admin")
        if topic.get("assignments") is not None:
            answer.update(
                error_code=ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                error_message="replica assignments do not apply: the ring places partitions",
            )
            return answer
        if count <= current.partitions:
            answer.update(
                error_code=ErrorCode.INVALID_PARTITIONS,
                error_message=f"topic {name!r} has {current.partitions} partitions; it can only get more",
            )
            return answer
        await update_topic(broker, ctx.session.principal, name, {"partitions": count}, validate_only=validate_only)
    except ApiError as exc:
        answer.update(error_code=admin_error_code(exc), error_message=exc.message)
    return answer


async def create_partitions(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    topics = body.get("topics") or []
    names = [t["name"] for t in topics]
    validate_only = bool(body.get("validate_only"))
    results = []
    for topic in topics:
        if names.count(topic["name"]) > 1:
            results.append(
                {
                    "name": topic["name"],
                    "error_code": ErrorCode.INVALID_REQUEST,
                    "error_message": "the topic is named twice in the request",
                }
            )
        else:
            results.append(await _more_partitions(ctx, topic, validate_only))
    return {"throttle_time_ms": 0, "results": results}


async def _delete_partition(ctx: Context, topic: str, part: dict[str, Any]) -> dict[str, Any]:
    index = part["partition_index"]
    answer: dict[str, Any] = {"partition_index": index, "low_watermark": -1, "error_code": 0}
    try:
        done = await delete_partition_records(
            ctx.broker, ctx.session.principal, ctx.session.caller, topic, index, part["offset"]
        )
    except (ApiError, OffsetOutOfRangeError) as exc:  # out of range: past the high watermark
        answer["error_code"] = error_code(exc)
    else:
        answer["low_watermark"] = done["low_watermark"]
    return answer


async def delete_records(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    topics = []
    for topic in body.get("topics") or []:
        name = topic["name"]
        parts = await asyncio.gather(*(_delete_partition(ctx, name, part) for part in topic.get("partitions") or []))
        topics.append({"name": name, "partitions": list(parts)})
    return {"throttle_time_ms": 0, "topics": topics}


async def describe_cluster(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    broker = ctx.broker
    me = broker.cluster.server_id if broker.cluster is not None else broker.config.member_id
    answer: dict[str, Any] = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "endpoint_type": _BROKERS_ENDPOINT,
        "cluster_id": CLUSTER_ID,
        "controller_id": node_id(me),
        "brokers": [
            {"broker_id": n.node_id, "host": n.host, "port": n.port, "rack": None}
            for n in nodes(broker, ctx.session.listener)
        ],
    }
    if body.get("endpoint_type", _BROKERS_ENDPOINT) != _BROKERS_ENDPOINT:
        answer.update(
            error_code=ErrorCode.MISMATCHED_ENDPOINT_TYPE,
            error_message="this is a broker listener; Talos has no controllers",
            brokers=[],
        )
    if body.get("include_cluster_authorized_operations"):
        admin = ctx.session.principal.admin
        answer["cluster_authorized_operations"] = _ADMIN_OPERATIONS if admin else _TENANT_OPERATIONS
    return answer
