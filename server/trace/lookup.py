"""Finding a message's trace: one message's timeline, or the messages of a key over a time range.

Any server answers: the events of a source partition live in one ``__talos_trace`` partition, whose owner
keeps its index (``server.trace.keeper``); a server that does not own it asks the owner, as group calls go to
their coordinator. A key query asks every trace partition that holds one of the topic's partitions
(``trace_partition`` names one: what a forwarded part of such a query asks).

Only the topic's owning tenant and the admin see its trace (with auth on); anyone else gets 404, as for a
topic it cannot see. :func:`timeline` and :func:`keyed` are what the REST routes and the portal's page call.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any
from urllib.parse import quote

from server import metrics
from server.broker import Broker
from server.errors import ApiError
from server.messaging.caller import Caller
from server.messaging.forwarder import answer_of, caller_headers
from server.security.access import Principal
from server.topics import TopicConfig, unknown_topic
from server.trace.events import TRACE_TOPIC, message_timeline, sampled, trace_partition
from server.trace.keeper import TraceIndexes

__all__ = ["DAY_MS", "MAX_RESULTS", "authorize", "keyed", "timeline"]

DAY_MS = 24 * 3600 * 1000
MAX_RESULTS = 1000


def authorize(broker: Broker, who: Principal, topic: str) -> TopicConfig:
    """The topic, if ``who`` may see its trace: its owning tenant or the admin (404 for anyone else)."""
    config = broker.topic(topic)
    if broker.security.enabled and not who.admin and (config.tenant is None or config.tenant != who.tenant):
        metrics.denied(404)
        raise unknown_topic(topic)
    return config


def _trace_topic(broker: Broker) -> TopicConfig | None:
    try:
        return broker.topic(TRACE_TOPIC)
    except ApiError as exc:
        if exc.status == 404:
            return None  # nothing was ever traced
        raise


async def timeline(
    broker: Broker,
    indexes: TraceIndexes,
    config: TopicConfig,
    partition: int,
    offset: int,
    caller: Caller,
) -> dict[str, Any]:
    """The message's timeline (authorized already), from the trace partition's owner (asked as ``caller``)."""
    topic = config.name
    broker.check_partition(topic, partition)
    trace = _trace_topic(broker)
    events: list[Any] = []
    if trace is not None:
        n = trace_partition(topic, partition, trace.partitions)
        owner = broker.owner(TRACE_TOPIC, n)
        if not owner.local:
            path = f"/v1/topics/{quote(topic, safe='')}/partitions/{partition}/messages/{offset}/trace"
            return answer_of(
                await broker.forwarder.send(owner, "GET", path, query={}, headers=caller_headers(caller), body=None)
            )
        index = await indexes.caught_up(n)
        events = await broker.io(index.events_at, topic, partition, offset)
    answer = message_timeline(events, topic, partition, offset)
    answer["trace_sample"] = config.trace_sample
    answer["sampled"] = sampled(topic, partition, offset, config.trace_sample)
    return answer


async def keyed(
    broker: Broker,
    indexes: TraceIndexes,
    config: TopicConfig,
    key: bytes,
    since_ms: int,
    until_ms: int,
    limit: int,
    caller: Caller,
    only: int | None = None,
) -> list[dict[str, Any]]:
    """Timelines of the messages of ``key`` produced in the time range (authorized already), oldest first."""
    topic = config.name
    trace = _trace_topic(broker)
    if trace is None:
        return []
    parts = sorted({trace_partition(topic, p, trace.partitions) for p in range(config.partitions)})
    if only is not None:
        parts = [only] if only in parts else []

    async def part(n: int) -> list[dict[str, Any]]:
        owner = broker.owner(TRACE_TOPIC, n)
        if not owner.local:
            query = {
                "key_b64": base64.b64encode(key).decode(),
                "since": str(since_ms),
                "until": str(until_ms),
                "limit": str(limit),
                "trace_partition": str(n),
            }
            path = f"/v1/topics/{quote(topic, safe='')}/trace"
            reply = await broker.forwarder.send(
                owner, "GET", path, query=query, headers=caller_headers(caller), body=None
            )
            return list(answer_of(reply)["messages"])  # raises the owner's error
        index = await indexes.caught_up(n)

        def read() -> list[dict[str, Any]]:
            return [
                message_timeline(index.events_at(topic, p, o), topic, p, o)
                for p, o in index.keyed(topic, key, since_ms, until_ms, limit)
            ]

        return await broker.io(read)

    found = [m for messages in await asyncio.gather(*(part(n) for n in parts)) for m in messages]
    found.sort(key=_produced_at)
    return found[:limit]


def _produced_at(found: dict[str, Any]) -> int:
    events = found.get("events") or [{}]
    return int(events[0].get("ts", 0))
