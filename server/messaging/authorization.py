"""Whether a principal may make a message request: produce to or consume a topic, write with an idempotent
producer id, use a consumer group. One answer for every edge (REST, the Kafka listener, WebSocket push)."""

from __future__ import annotations

import contextlib
from typing import Literal

from server import metrics
from server.broker import Broker
from server.errors import ApiError
from server.partition.producer_ids import UNKNOWN
from server.security.access import Principal
from server.security.guard import Security
from server.security.state import unknown_group

__all__ = ["Claim", "authorize_message", "authorize_producers", "may_use_group"]

_MESSAGE_ACTIONS = {"produce": "produce", "fetch": "consume", "offsets": "consume"}

Claim = Literal["never", "tenant", "anyone"]


def authorize_message(broker: Broker, principal: Principal, topic: str, kind: str) -> None:
    """403 unless the principal may produce (``kind`` produce) or consume (fetch, offsets) the topic."""
    if broker.security.enabled:
        broker.security.authorize(principal, broker.topic(topic), _MESSAGE_ACTIONS[kind])


async def authorize_producers(broker: Broker, tenant: str, producer_ids: set[int]) -> None:
    """403 unless ``tenant`` owns every idempotent producer id it writes with: another tenant's id would
    let it fence that producer or make its next write look like a duplicate (acknowledged, never stored).
    Checked on the partition's owner before the sequence state is touched. An unknown id gets the same
    answer, so the check does not tell whether an id exists."""
    ids = broker.producer_ids
    for producer_id in producer_ids:
        if producer_id < 0:
            continue  # not idempotent
        owner = ids.owners.get(producer_id)
        if owner == UNKNOWN:
            with contextlib.suppress(ApiError):  # never allocated: stays UNKNOWN, refused below
                owner = await broker.io(ids.owner_of, producer_id)
        if owner != tenant:
            metrics.denied(403)
            raise ApiError(403, "FORBIDDEN", f"producer id {producer_id} does not belong to tenant {tenant!r}")


async def may_use_group(security: Security, who: Principal, group: str, claim: Claim) -> str | None:
    """404 unless ``who`` may use the group, claiming an unclaimed one for it if ``claim`` says so
    (``"tenant"``: a tenant's use claims, the admin's does not); the group's owner (None: no tenant).
    REST and the Kafka listener ask this one question."""
    if not security.enabled:
        return None
    state = security.state
    unclaimed = group not in state.group_owners
    if unclaimed and (claim == "anyone" or (claim == "tenant" and not who.admin)):
        state = await security.change(lambda s: s.claim_group(group, who.tenant))
    elif not state.may_use_group(who.tenant, group):
        state = await security.fresh()  # granted (or claimed) on another server a moment ago?
        if not state.may_use_group(who.tenant, group):
            raise unknown_group(group)
    owner = state.group_owners.get(group)
    return owner if owner is not None and owner in state.tenants else None
