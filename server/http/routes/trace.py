"""The message trace's REST API: one message's timeline, or the messages of a key over a time range, as
``server.trace.lookup`` finds them (the portal's trace page asks the same functions).
"""

from __future__ import annotations

import base64
import binascii
import time
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from starlette.responses import Response

from server.broker import Broker
from server.errors import ApiError
from server.http.routes.security import principal
from server.topics import MAX_PARTITIONS
from server.trace.keeper import TraceIndexes
from server.trace.lookup import DAY_MS, MAX_RESULTS, authorize, keyed, timeline
from server.web import caller_of, json_response

__all__ = ["key_bytes_of", "router"]

router = APIRouter(tags=["trace"])


def key_bytes_of(key: str | None, key_b64: str | None) -> bytes:
    if (key is None) == (key_b64 is None):
        raise ApiError(400, "INVALID_REQUEST", "give key or key_b64 (one of them)")
    if key is not None:
        return key.encode()
    try:
        return base64.b64decode(key_b64 or "", validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, "INVALID_REQUEST", "key_b64 is not valid base64") from None


def _broker(request: Request) -> Broker:
    broker: Broker = request.app.state.broker
    return broker


def _indexes(request: Request) -> TraceIndexes:
    indexes: TraceIndexes = request.app.state.trace.indexes
    return indexes


@router.get(
    "/v1/topics/{topic}/partitions/{partition}/messages/{offset}/trace",
    summary="What happened to one message: produced, delivered, committed, retried, dead-lettered",
)
async def message_trace(
    topic: str,
    partition: Annotated[int, Path(ge=0, le=MAX_PARTITIONS - 1)],
    offset: Annotated[int, Path(ge=0, le=2**63 - 1)],
    request: Request,
) -> Response:
    broker = _broker(request)
    config = authorize(broker, principal(request), topic)
    return json_response(
        await timeline(broker, _indexes(request), config, partition, offset, caller_of(request.headers))
    )


@router.get("/v1/topics/{topic}/trace", summary="The traced messages of a key over a time range, with timelines")
async def key_trace(
    topic: str,
    request: Request,
    key: str | None = None,
    key_b64: str | None = None,
    since: Annotated[int | None, Query(ge=0, description="ms since the epoch; default: a day before until")] = None,
    until: Annotated[int | None, Query(ge=0, description="ms since the epoch; default: now")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_RESULTS)] = 100,
    trace_partition_: Annotated[int | None, Query(alias="trace_partition", ge=0)] = None,
) -> Response:
    broker = _broker(request)
    config = authorize(broker, principal(request), topic)
    wanted = key_bytes_of(key, key_b64)
    until_ms = int(time.time() * 1000) if until is None else until
    since_ms = until_ms - DAY_MS if since is None else since
    if since_ms > until_ms:
        raise ApiError(400, "INVALID_REQUEST", "since is after until")
    found = await keyed(
        broker,
        _indexes(request),
        config,
        wanted,
        since_ms,
        until_ms,
        limit,
        caller_of(request.headers),
        trace_partition_,
    )
    answer = {"topic": topic, "since": since_ms, "until": until_ms, "trace_sample": config.trace_sample}
    return json_response({**answer, "messages": found})
