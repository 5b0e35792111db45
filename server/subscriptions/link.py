"""How a server reaches a subscription's coordinator: in-process when it is the coordinator, else one HTTP
hop to the one that is (``POST /v1/subscriptions/{s}/pull|settle|release``, with the subscriber's own
credentials, so the coordinator checks them itself). A subscriber connects to any server; the server it is
connected to relays (docs/subscriptions.md says why this rather than the client addressing coordinators)."""

from __future__ import annotations

from typing import Any

import orjson

from server.broker import Broker
from server.errors import ApiError
from server.messaging.forwarder import answer_of
from server.security.access import Principal
from server.subscriptions.coordinator import Subscription, SubscriptionCoordinator, unknown_subscription

__all__ = ["CoordinatorLink", "authorize"]


def authorize(broker: Broker, coordinator: SubscriptionCoordinator, who: Principal, name: str) -> None:
    """404 unless ``who`` may use the subscription: its tenant's or the admin's (as a group, #12)."""
    config = coordinator.config_of(name)
    if broker.security.enabled and not who.admin and config.tenant != who.tenant:
        raise unknown_subscription(name)


async def active_for(broker: Broker, coordinator: SubscriptionCoordinator, who: Principal, name: str) -> Subscription:
    """The subscription at this (its coordinating) server, once ``who`` may use it and consume its topic."""
    authorize(broker, coordinator, who, name)
    active = await coordinator.get(name)
    if broker.security.enabled:
        broker.security.authorize(who, broker.topic(active.settings.topic), "consume")
    return active


class CoordinatorLink:
    def __init__(
        self,
        broker: Broker,
        coordinator: SubscriptionCoordinator,
        name: str,
        who: Principal,
        credentials: str | None,
        traceparent: str | None = None,
    ) -> None:
        """``credentials``: the subscriber's own (an ``Authorization`` value), which the coordinator checks
        itself; ``traceparent``: the subscriber's trace context, passed on."""
        self._broker = broker
        self._coordinator = coordinator
        self._name = name
        self._who = who
        self._headers = {"content-type": "application/json"}
        if credentials is not None:
            self._headers["authorization"] = credentials
        if traceparent is not None:
            self._headers["traceparent"] = traceparent

    async def _remote(self, leaf: str, body: dict[str, Any], wait_s: float = 0.0) -> dict[str, Any]:
        owner = self._coordinator.owner(self._name)
        reply = await self._broker.forwarder.send(
            owner,
            "POST",
            f"/v1/subscriptions/{self._name}/{leaf}",
            query={},
            headers=self._headers,
            body=orjson.dumps(body),
            extra_timeout_s=wait_s,
        )
        return answer_of(reply)

    def _local(self) -> bool:
        return self._coordinator.owner(self._name).local

    async def pull(self, holder: str, limit: int, wait_s: float) -> list[dict[str, object]]:
        if self._local():
            active = await active_for(self._broker, self._coordinator, self._who, self._name)
            return await active.pull(holder, limit, wait_s)
        body = {"subscriber": holder, "max_messages": limit, "wait_ms": int(wait_s * 1000)}
        answer = await self._remote("pull", body, wait_s)
        found = answer.get("messages")
        if not isinstance(found, list):
            raise ApiError(502, "FORWARD_FAILED", "the coordinator answered without messages", retriable=True)
        return found

    async def settle(self, holder: str, op: str, items: list[tuple[int, int, int]], ms: int) -> list[str]:
        if self._local():
            active = await active_for(self._broker, self._coordinator, self._who, self._name)
            return await active.settle(holder, op, items, ms)
        body = {
            "subscriber": holder,
            "op": op,
            "ms": ms,
            "messages": [{"partition": p, "offset": o, "delivery": d} for p, o, d in items],
        }
        answer = await self._remote("settle", body)
        return [str(status) for status in answer.get("results", [])]

    async def release(self, holder: str) -> None:
        if self._local():
            active = await active_for(self._broker, self._coordinator, self._who, self._name)
            active.release(holder)
            return
        await self._remote("release", {"subscriber": holder})
