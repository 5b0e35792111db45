"""The audit log: every change to tenants, tokens, grants, quotas, quota requests and topics, as records
of the internal topic ``__talos_audit`` (one partition: one order). Written through the normal write path,
so it is durable, fenced and readable from any server like any topic. Entries never hold a token."""

from __future__ import annotations

import asyncio
import logging
import time

import orjson

from server import internal_topics
from server.broker import Broker
from server.errors import ApiError
from server.security.access import Principal
from server.topics import TopicConfig
from talos import RecordData

__all__ = ["AUDIT_TOPIC", "record", "recent"]

log = logging.getLogger("talos.audit")
AUDIT_TOPIC = "__talos_audit"
_RETRIES_S = (0.2, 0.5, 1.0, 2.0, 4.0)  # a partition whose storage failed reloads within these
_SCAN = 5000  # the newest entries a query looks through


async def record(
    broker: Broker,
    actor: Principal,
    action: str,
    target: str,
    *,
    tenant: str | None,
    detail: str = "",
    record_of: dict[str, object] | None = None,
) -> None:
    """Append one entry: who (``actor``) did ``action`` to ``target``, which belongs to ``tenant``;
    ``record_of``: the whole object it settled (a decided quota request, which the document drops later).

    The change it records has happened already, so a storage failure here must not fail the request: the
    entry is retried for several seconds, then written to the server's log instead (as an error)."""
    entry = {
        "time_ms": int(time.time() * 1000),
        "actor": actor.name,
        "token_id": actor.token_id,
        "action": action,
        "target": target,
        "tenant": tenant,
        "detail": detail,
    }
    if record_of is not None:
        entry["record"] = record_of
    record = RecordData(orjson.dumps(entry), actor.name.encode())
    for delay in (*_RETRIES_S, None):
        try:
            await internal_topics.ensure(broker, TopicConfig(AUDIT_TOPIC, 1))
            await internal_topics.append(broker, AUDIT_TOPIC, 0, [record])
            return
        except (ApiError, OSError) as exc:
            if delay is None or (isinstance(exc, ApiError) and not exc.retriable and exc.status < 500):
                log.error("audit entry not written to %s (%s): %s", AUDIT_TOPIC, exc, orjson.dumps(entry).decode())
                return
            await asyncio.sleep(delay)


async def recent(broker: Broker, *, limit: int = 200, tenant: str | None = None) -> list[dict[str, object]]:
    """The newest entries first: all of them, or those about ``tenant``."""
    try:
        broker.topic(AUDIT_TOPIC)
    except Exception:
        return []
    earliest, end = await internal_topics.bounds(broker, AUDIT_TOPIC, 0)
    rows = await internal_topics.read_all(broker, AUDIT_TOPIC, 0, start=max(earliest, end - _SCAN))
    entries = [orjson.loads(value) for _offset, _key, value in rows if value]
    if tenant is not None:
        entries = [e for e in entries if e.get("tenant") == tenant]
    return entries[::-1][:limit]
