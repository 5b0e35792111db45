"""Connector checkpoints: ``GET/PUT /v1/connectors/{name}/offsets``, kept in ``__connect_offsets``.

A source connector's positions (files and byte offsets, search cursors) are kept by the servers in the
internal topic ``__connect_offsets`` (compacted), which tenants cannot reach directly. Each record is keyed
by (connector, task, tenant) and carries the writing tenant in a header taken from the authenticated principal
(the admin's, as with auth off, carry none), so tenant B can neither read nor rewind A's connector, even
one of the same name. The newest record of a (tenant, connector, task) wins; a null document removes the
task's checkpoint. All of a connector's records go to one partition (by its name). A load is answered from
this server's index of that partition (``server.connect_offsets``: compaction, read-your-writes),
so a task's start reads its connector's latest state, not the partition's history.
Records that runners wrote directly before this API existed are the admin's.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from fastapi import APIRouter, Request
from pydantic import BaseModel, Field, ValidationError
from starlette.responses import Response

from server import internal_topics
from server.broker import Broker
from server.connect_offsets import (
    CONNECT_OFFSETS_TOPIC,
    TENANT_RECORD_HEADER,
    index_of,
    partition_of,
    task_key,
    topic_config,
)
from server.errors import ApiError
from server.http.routes.security import broker_of, principal
from server.messaging.caller import for_tenant
from server.messaging.fence import fence
from server.messaging.produce import produce_batch
from server.web import MAX_ADMIN_BODY, json_response, read_body
from talos import RecordData, encode_batch

__all__ = ["CONNECT_OFFSETS_TOPIC", "TENANT_RECORD_HEADER", "partition_of", "router"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")  # connector names (connectors.config)

router = APIRouter(prefix="/v1/connectors", tags=["connectors"])


class CheckpointPut(BaseModel):
    task: str = Field(min_length=1, max_length=100, description="the task's key within the connector")
    checkpoint: dict[str, Any] | None = Field(description="the task's positions; null removes them")
    producer_id: int | None = Field(
        None, ge=0, le=2**63 - 1, strict=True, description="the task's producer (fences a zombie)"
    )
    producer_epoch: int | None = Field(None, ge=0, le=2**15 - 1, strict=True, description="with producer_id: its epoch")


class FenceBody(BaseModel):
    producer_id: int = Field(ge=0, le=2**63 - 1, strict=True)
    producer_epoch: int = Field(ge=0, le=2**15 - 1, strict=True)


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise ApiError(400, "INVALID_REQUEST", "a connector name is 1-100 of A-Z a-z 0-9 . _ -, not starting . _ -")


async def load(broker: Broker, tenant: str | None, connector: str) -> dict[str, dict[str, Any]]:
    return await index_of(broker).load(tenant, connector)


async def save(
    broker: Broker,
    tenant: str | None,
    connector: str,
    task: str,
    checkpoint: dict[str, Any] | None,
    producer: tuple[int, int] | None = None,
) -> None:
    """Write the checkpoint durably. The tenant's write is billed to it (its produce quota applies). With
    ``producer`` (the task's id and epoch) the write is refused (409 ``PRODUCER_FENCED``) once a newer
    instance of the task has fenced the connector's partition."""
    await internal_topics.ensure(broker, topic_config())
    record_headers = [] if tenant is None else [(TENANT_RECORD_HEADER, tenant.encode())]
    try:
        value = None if checkpoint is None else orjson.dumps(checkpoint)
    except orjson.JSONEncodeError as exc:  # e.g. an integer past 64 bits, which JSON parsing allowed
        raise ApiError(400, "INVALID_REQUEST", f"the checkpoint cannot be stored: {exc}") from None
    record = RecordData(value, task_key(tenant, connector, task), record_headers)
    fields = (
        {} if producer is None else {"producer_id": producer[0], "producer_epoch": producer[1], "base_sequence": -1}
    )
    batch = bytearray(encode_batch([record], **fields))
    partition = partition_of(connector)
    stored = await produce_batch(broker, for_tenant(tenant), CONNECT_OFFSETS_TOPIC, partition, batch)
    index_of(broker).written(partition, stored.base_offset, [record])  # once stored


@router.get("/{name}/offsets", summary="A connector's checkpoints (the caller's tenant's connector of that name)")
async def get_offsets(name: str, request: Request) -> Response:
    _check_name(name)
    return json_response({"connector": name, "tasks": await load(broker_of(request), principal(request).tenant, name)})


@router.put(
    "/{name}/offsets",
    summary="Save one task's checkpoint (durable when answered)",
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": CheckpointPut.model_json_schema()}}}},
)
async def put_offsets(name: str, request: Request) -> Response:
    _check_name(name)
    broker = broker_of(request)
    tenant = principal(request).tenant  # from the token, never from the request: scopes the connector
    raw = await read_body(request.receive, MAX_ADMIN_BODY, request.headers.get("content-length"))
    try:
        body = CheckpointPut.model_validate_json(raw)
    except ValidationError as exc:
        raise ApiError(400, "INVALID_REQUEST", f"expected {{'task', 'checkpoint'}}: {exc.errors()[0]['msg']}") from None
    if (body.producer_id is None) != (body.producer_epoch is None):
        raise ApiError(400, "INVALID_REQUEST", "producer_id and producer_epoch go together")
    producer = (
        None if body.producer_id is None or body.producer_epoch is None else (body.producer_id, body.producer_epoch)
    )
    await save(broker, tenant, name, body.task, body.checkpoint, producer)
    return json_response({"connector": name, "task": body.task})


@router.post(
    "/{name}/fence",
    summary="Fence a task's older producer epochs on the connector's checkpoints (durable when answered)",
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": FenceBody.model_json_schema()}}}},
)
async def fence_checkpoints(name: str, request: Request) -> Response:
    """A new instance of a source task calls this (and fences its topic) before it reads its checkpoints:
    a zombie instance's checkpoint is then either in what it reads or refused."""
    _check_name(name)
    broker = broker_of(request)
    tenant = principal(request).tenant
    raw = await read_body(request.receive, MAX_ADMIN_BODY, request.headers.get("content-length"))
    try:
        body = FenceBody.model_validate_json(raw)
    except ValidationError as exc:
        raise ApiError(
            400, "INVALID_REQUEST", f"expected {{'producer_id', 'producer_epoch'}}: {exc.errors()[0]['msg']}"
        ) from None
    await internal_topics.ensure(broker, topic_config())
    partition = partition_of(name)
    await fence(broker, for_tenant(tenant), CONNECT_OFFSETS_TOPIC, partition, body.producer_id, body.producer_epoch)
    return json_response({"connector": name, "producer_epoch": body.producer_epoch})
