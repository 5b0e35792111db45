"""``POST /v1/topics/{topic}/partitions/{partition}/compact``: a compaction pass now (docs/compaction.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from server.broker import Broker
from server.http.routes.security import principal
from server.messaging.compaction import compact_partition
from server.topics import MAX_PARTITIONS
from server.web import caller_of, json_response

__all__ = ["router"]

router = APIRouter(tags=["topics"])


@router.post(
    "/v1/topics/{topic}/partitions/{partition}/compact",
    summary="Compact a partition now, whatever its dirty ratio (the topic's admin; a compacted topic)",
)
async def compact(
    topic: str, partition: Annotated[int, Path(ge=0, le=MAX_PARTITIONS - 1)], request: Request
) -> Response:
    broker: Broker = request.app.state.broker
    answer = await compact_partition(broker, principal(request), caller_of(request.headers), topic, partition)
    return json_response(answer)
