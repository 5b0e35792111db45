"""Partition count quotas: a tenant's total over the topics it owns, and a topic's own limit. Checked
wherever partitions are made: creating or growing a topic, and a group join that creates the group's
retry and dead-letter topics (owned by, and so counted for, the group's tenant)."""

from __future__ import annotations

from server.broker import Broker
from server.errors import ApiError

__all__ = ["check_partition_quota", "partition_quota"]


def partition_quota(message: str) -> ApiError:
    return ApiError(429, "PARTITION_QUOTA_EXCEEDED", f"{message}; ask for more in the portal (/portal)")


def check_partition_quota(broker: Broker, tenant: str | None, topic: str | None, partitions: int) -> None:
    """Raise 429 if ``tenant`` would own more partitions than its quota once ``topic`` (None: a new one)
    has ``partitions``, or if that is more than the topic's own quota."""
    security = broker.security
    if tenant is not None and (entry := security.state.tenants.get(tenant)) is not None:
        limit = entry.quota.partitions
        used = sum(t.partitions for t in broker.list_topics() if t.tenant == tenant and t.name != topic)
        if limit is not None and used + partitions > limit:
            raise partition_quota(f"tenant {tenant!r} would have {used + partitions} partitions; its quota is {limit}")
    topic_limit = security.state.topic_quota(topic).partitions if topic is not None else None
    if topic_limit is not None and partitions > topic_limit:
        raise partition_quota(f"topic {topic!r} would have {partitions} partitions; its quota is {topic_limit}")
