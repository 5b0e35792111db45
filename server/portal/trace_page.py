"""The portal's message trace page (``/portal/trace``): one message's timeline, or a key's messages over a
time range, for the signed-in tenant's topics (the admin's: any topic). The data comes from
``server.trace.lookup``, with the session's principal deciding what may be seen, as the REST API does."""

from __future__ import annotations

import time
from typing import Any

from fastapi import Request
from starlette.responses import Response

from server.errors import ApiError
from server.messaging.caller import SERVERS
from server.portal.pages import _broker, _principal, _render, _session, _to_login, router
from server.trace import lookup

__all__ = ["trace_page"]

_SINCE = {"1h": 3600_000, "6h": 6 * 3600_000, "24h": lookup.DAY_MS, "7d": 7 * lookup.DAY_MS}


def _steps(timeline: dict[str, Any]) -> list[dict[str, Any]]:
    """The events with their time after the first one (what the timeline draws) and their other fields."""
    events = timeline.get("events", [])
    start = int(events[0]["ts"]) if events else 0
    return [
        {
            "event": e["event"],
            "ts": int(e["ts"]),
            "after_ms": int(e["ts"]) - start,
            "details": {k: v for k, v in e.items() if k not in ("event", "ts")},
        }
        for e in events
    ]


@router.get("/trace")
async def trace_page(
    request: Request, topic: str = "", partition: str = "", offset: str = "", key: str = "", since: str = "24h"
) -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    broker = _broker(request)
    indexes = request.app.state.trace.indexes
    timelines: list[dict[str, Any]] = []
    error = ""
    asked = bool(topic)
    if asked:
        try:
            config = lookup.authorize(broker, _principal(session), topic)
            if key:
                now = int(time.time() * 1000)
                found = await lookup.keyed(
                    broker, indexes, config, key.encode(), now - _SINCE.get(since, lookup.DAY_MS), now, 100, SERVERS
                )
                timelines = found
            else:
                if not (partition.isdigit() and offset.isdigit()):
                    raise ApiError(400, "INVALID_REQUEST", "give a partition and an offset, or a key")
                timelines = [await lookup.timeline(broker, indexes, config, int(partition), int(offset), SERVERS)]
        except ApiError as exc:
            error = exc.message
    return _render(
        "trace.html",
        session=session,
        form={"topic": topic, "partition": partition, "offset": offset, "key": key, "since": since},
        periods=list(_SINCE),
        asked=asked,
        error=error,
        timelines=[{**t, "steps": _steps(t)} for t in timelines],
    )
