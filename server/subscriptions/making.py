"""Making a push subscription as a principal: the settings a client gives (checked), the right to consume the
topic, made at the subscription's coordinator (here, or one hop to it). REST's ``POST /v1/subscriptions`` and
the WebSocket's ``topic=`` parameters both make subscriptions this way."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from server.broker import Broker
from server.messaging.caller import Caller
from server.messaging.forwarder import answer_of, caller_headers
from server.security.access import Principal
from server.subscriptions.coordinator import SubscriptionCoordinator
from server.subscriptions.records import SUBSCRIPTION_NAME, Settings

__all__ = ["MAX_WINDOW", "SubscriptionCreate", "create", "create_at_coordinator"]

MAX_WINDOW = 10_000  # the most messages a subscriber holds unsettled, or one pull leases


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


async def create_at_coordinator(
    broker: Broker,
    coordinator: SubscriptionCoordinator,
    who: Principal,
    body: SubscriptionCreate,
    caller: Caller,
) -> None:
    """:func:`create` at the subscription's coordinator, wherever it is (asked as ``caller``, whose credentials
    authenticate ``who`` there)."""
    owner = coordinator.owner(body.name)
    if owner.local:
        await create(broker, coordinator, who, body)
        return
    reply = await broker.forwarder.send(
        owner,
        "POST",
        "/v1/subscriptions",
        query={},
        headers={**caller_headers(caller), "content-type": "application/json"},
        body=body.model_dump_json().encode(),
    )
    if reply.status != 201:
        answer_of(reply)  # raises the coordinator's error
