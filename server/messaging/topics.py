"""Topics as a principal: create, describe, change, delete, each checked (name, partition count, quota,
ownership), audited, as REST's topic routes and the Kafka listener's CreateTopics/DeleteTopics both need."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

from server.broker import Broker
from server.errors import ApiError
from server.messaging.caller import SERVERS
from server.messaging.offsets import offsets
from server.partition_quota import check_partition_quota
from server.security import audit
from server.security.access import Principal, actions_on, hidden
from server.security.state import QUOTA_FIELDS
from server.topic_configs import check_settings
from server.topics import MAX_PARTITIONS, TopicConfig, unknown_topic, validate_topic_name

__all__ = [
    "create_topic",
    "delete_topic",
    "describe_partitions",
    "readable_topic",
    "update_topic",
    "validate_create",
    "visible",
]


def visible(broker: Broker, who: Principal, topic: TopicConfig) -> bool:
    """Whether ``who`` may use the topic at all (and so see it listed)."""
    security = broker.security
    return not security.enabled or bool(actions_on(who, security.state, topic.name, topic.tenant))


def readable_topic(broker: Broker, who: Principal, name: str) -> TopicConfig:
    """The topic, if ``who`` may see it; 404 as for a name nobody uses (no tenant learns others' topic
    names), or 403 for the servers' own internal topics."""
    config = broker.topic(name)
    if not visible(broker, who, config):
        if hidden(name, frozenset()):
            raise unknown_topic(name)
        raise ApiError(403, "FORBIDDEN", f"tenant {who.name!r} may not see topic {name[:300]!r}")
    return config


def _check_partitions(partitions: int) -> None:
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise ApiError(400, "INVALID_REQUEST", f"partitions must be between 1 and {MAX_PARTITIONS}")


async def create_topic(
    broker: Broker,
    who: Principal,
    name: str,
    partitions: int = 1,
    settings: Mapping[str, object] | None = None,
    tenant: str | None = None,
) -> TopicConfig:
    """A new topic, owned by ``who``'s tenant (``tenant``: the owner the admin names for it), with
    ``settings`` (retention, cleanup policy, ...: ``server.topic_configs``)."""
    validate_topic_name(name)
    _check_partitions(partitions)
    checked = check_settings(settings or {})
    if tenant is not None and not who.admin:
        raise ApiError(403, "FORBIDDEN", "only the admin names a topic's tenant; a tenant's topics are its own")
    security = broker.security
    if name.startswith("__"):  # a shared internal topic clients may create: nobody's
        owner = None
        security.authorize(who, name, "produce")
    else:
        owner = who.tenant if who.tenant is not None else tenant
        if owner is not None:
            security.state.tenant(owner)  # 404 for an unknown tenant
    check_partition_quota(broker, owner, None, partitions)
    created = await broker.create_topic(TopicConfig(name, partitions, tenant=owner, **checked))  # type: ignore[arg-type]
    await audit.record(broker, who, "topic.create", name, tenant=owner, detail=f"{partitions} partitions")
    return created


def validate_create(
    broker: Broker, who: Principal, name: str, partitions: int = 1, settings: Mapping[str, object] | None = None
) -> int:
    """What creating checks without making anything (a dry run): the name, that it is free, the partition
    count and the tenant's partition quota. The partitions it would have."""
    name = validate_topic_name(name)
    if any(t.name == name for t in broker.list_topics()):
        raise ApiError(409, "TOPIC_EXISTS", f"topic {name!r} already exists")
    _check_partitions(partitions)
    check_settings(settings or {})
    check_partition_quota(broker, who.tenant, None, partitions)
    return partitions


async def update_topic(
    broker: Broker, who: Principal, name: str, changes: dict[str, Any], *, validate_only: bool = False
) -> TopicConfig:
    """More partitions (never fewer), retention, compaction, the trace sample: ``changes`` holds only what
    changes. With ``validate_only``, every check and no change (a dry run): the topic as it would be."""
    current = broker.topic(name)
    broker.security.authorize(who, current, "admin")
    partitions = changes.get("partitions")
    changes = {
        **({"partitions": partitions} if partitions is not None else {}),
        **check_settings({k: v for k, v in changes.items() if k != "partitions"}, current=current),
    }
    if partitions is not None and partitions < current.partitions:
        raise ApiError(400, "INVALID_REQUEST", f"partitions can only grow (now {current.partitions})")
    if partitions is not None:
        check_partition_quota(broker, current.tenant, name, partitions)
    if validate_only:
        return dataclasses.replace(current, **changes)
    updated = await broker.update_topic(name, **changes)
    detail = ", ".join(f"{k}={v}" for k, v in changes.items())
    await audit.record(broker, who, "topic.update", name, tenant=current.tenant, detail=detail)
    return updated


async def delete_topic(broker: Broker, who: Principal, name: str) -> None:
    """The topic and its data, its grants and its quota."""
    current = broker.topic(name)
    broker.security.authorize(who, current, "admin")
    # Its grants go first: a deletion that stops half-way leaves a topic nobody else reads, never a grant
    # that a topic made later under the name would inherit.
    await broker.security.change(lambda s: s.forget_topic_grants(name))
    await broker.delete_topic(name)
    if name in broker.security.state.topic_quotas:  # a new topic of the same name starts unlimited
        await broker.security.change(lambda s: s.set_quota(None, name, dict.fromkeys(QUOTA_FIELDS)))
    await audit.record(broker, who, "topic.delete", name, tenant=current.tenant)


async def describe_partitions(broker: Broker, config: TopicConfig) -> list[dict[str, object]]:
    """Each partition's earliest and latest offsets and owner (None offsets: another server's partition whose
    owner cannot answer now)."""
    topic = config.name

    async def detail(index: int) -> dict[str, object]:
        try:
            answer = await offsets(broker, SERVERS, topic, index)
        except ApiError:
            if broker.owns(topic, index):
                raise
            answer = {"earliest": None, "latest": None}
        owner = broker.owner(topic, index)
        return {
            "partition": index,
            "earliest": answer["earliest"],
            "latest": answer["latest"],
            "owner": owner.server_id,
        }

    return list(await asyncio.gather(*(detail(index) for index in range(config.partitions))))
