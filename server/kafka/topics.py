"""ApiVersions, Metadata, CreateTopics and DeleteTopics.

Metadata names each partition's ring owner as its leader (a partition has one owner and no replicas, so
replicas and ISR are the leader alone). A tenant sees the topics it may use, as ``GET /v1/topics`` shows
them; a topic it may not see is answered as unknown. Topics are never created by Metadata or Produce
(as a Kafka cluster with ``auto.create.topics.enable=false``): creating one counts against the tenant's
partition quota, so it is an explicit CreateTopics, made by the same service as REST's
(``server.messaging.topics``): checked, limited and audited alike.
"""

from __future__ import annotations

from typing import Any

from server.errors import ApiError
from server.kafka.configs import fixed_unchanged
from server.kafka.context import Context
from server.kafka.failures import admin_error_code, error_code
from server.kafka.nodes import leader_of, node_id, nodes
from server.kafka.protocol import SUPPORTED
from server.kafka.protocol.errors import ErrorCode
from server.messaging.topics import create_topic, delete_topic, validate_create, visible
from server.security.access import hidden
from server.topic_configs import parse_kafka
from server.topics import TopicConfig

__all__ = ["api_versions", "create_topics", "delete_topics", "metadata"]

CLUSTER_ID = "talos"
_DEFAULT_PARTITIONS = -1  # CreateTopics' "the broker's default"
# Settings whose None means "unlimited" rather than "the default".
_UNLIMITED = frozenset({"retention_ms", "retention_bytes", "max_compaction_lag_ms"})


async def api_versions(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    keys = [{"api_key": k, "min_version": low, "max_version": high} for k, (low, high) in sorted(SUPPORTED.items())]
    return {"error_code": 0, "api_keys": keys, "throttle_time_ms": 0}


def _visible(ctx: Context, config: TopicConfig) -> bool:
    return visible(ctx.broker, ctx.session.principal, config)


def _topic_entry(ctx: Context, name: str) -> dict[str, Any]:
    broker = ctx.broker
    try:
        config = broker.topic(name)
    except ApiError as exc:
        return {"error_code": error_code(exc), "name": name, "partitions": []}
    if not _visible(ctx, config):
        code = (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if hidden(name, frozenset()) else ErrorCode.TOPIC_AUTHORIZATION_FAILED
        )
        return {"error_code": code, "name": name, "partitions": []}
    partitions = []
    for index in range(config.partitions):
        try:
            leader = leader_of(broker, name, index)
        except ApiError:  # no server in the ring yet
            leader = -1
        partitions.append(
            {
                "error_code": ErrorCode.LEADER_NOT_AVAILABLE if leader < 0 else ErrorCode.NONE,
                "partition_index": index,
                "leader_id": leader,
                "leader_epoch": -1,
                "replica_nodes": [leader] if leader >= 0 else [],
                "isr_nodes": [leader] if leader >= 0 else [],
                "offline_replicas": [],
            }
        )
    return {"error_code": 0, "name": name, "is_internal": name.startswith("__"), "partitions": partitions}


async def metadata(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    broker = ctx.broker
    requested = body.get("topics")
    if requested is None or (ctx.header.api_version == 0 and not requested):  # v0: [] means all
        names = [t.name for t in broker.list_topics() if _visible(ctx, t)]
    else:
        names = [t["name"] for t in requested if t.get("name")]
    me = broker.cluster.server_id if broker.cluster is not None else broker.config.member_id
    return {
        "throttle_time_ms": 0,
        "brokers": [
            {"node_id": n.node_id, "host": n.host, "port": n.port, "rack": None}
            for n in nodes(broker, ctx.session.listener)
        ],
        "cluster_id": CLUSTER_ID,
        "controller_id": node_id(me),
        "topics": [_topic_entry(ctx, name) for name in dict.fromkeys(names)],
    }


def _create_body(ctx: Context, topic: dict[str, Any]) -> dict[str, Any]:
    partitions = topic.get("num_partitions", _DEFAULT_PARTITIONS)
    body: dict[str, Any] = {"name": topic["name"]}
    if partitions != _DEFAULT_PARTITIONS:
        body["partitions"] = partitions
    if topic.get("assignments"):
        raise ApiError(400, "INVALID_REQUEST", "replica assignments do not apply: the ring places partitions")
    configs = [c for c in topic.get("configs") or [] if not fixed_unchanged(ctx.broker.config, c["name"], c["value"])]
    settings = dict(parse_kafka(config["name"], config["value"]) for config in configs)
    body["settings"] = {k: v for k, v in settings.items() if v is not None or k in _UNLIMITED}
    return body


async def create_topics(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    results = []
    for topic in body.get("topics") or []:
        entry: dict[str, Any] = {"name": topic["name"], "error_code": 0, "error_message": None}
        try:
            request = _create_body(ctx, topic)
            who = ctx.session.principal
            if body.get("validate_only"):
                partitions = validate_create(
                    ctx.broker, who, request["name"], request.get("partitions", 1), request["settings"]
                )
            else:
                partitions = (await create_topic(ctx.broker, who, **request)).partitions
            entry.update(num_partitions=partitions, replication_factor=1)
        except ApiError as exc:
            entry.update(error_code=admin_error_code(exc), error_message=exc.message)
        results.append(entry)
    return {"throttle_time_ms": 0, "topics": results}


async def delete_topics(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    names = body.get("topic_names") or [t.get("name") for t in body.get("topics") or []]
    results = []
    for name in names:
        entry: dict[str, Any] = {"name": name, "error_code": 0, "error_message": None}
        if name is None:
            entry.update(error_code=ErrorCode.UNKNOWN_TOPIC_ID, error_message="topic ids are not supported; name it")
        else:
            try:
                await delete_topic(ctx.broker, ctx.session.principal, name)
            except ApiError as exc:
                entry.update(error_code=admin_error_code(exc), error_message=exc.message)
        results.append(entry)
    return {"throttle_time_ms": 0, "responses": results}
