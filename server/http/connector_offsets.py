"""Connector checkpoints: ``GET/PUT /v1/connectors/{name}/offsets``, kept in ``__connect_offsets``.

A source connector's positions (files and byte offsets, search cursors) are kept by the servers in the
internal topic ``__connect_offsets``, which tenants cannot reach directly. Each record is keyed
``<connector>/<task>`` and carries the writing tenant in a header taken from the authenticated principal
(the admin's, as with auth off, carry none), so tenant B can neither read nor rewind A's connector, even
one of the same name. The newest record of a (tenant, connector, task) wins; a null document removes the
task's checkpoint. All of a connector's records go to one partition (by its name), so a load reads one.
Records that runners wrote directly before this API existed are the admin's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import orjson
from fastapi import APIRouter, Request
from pydantic import BaseModel, Field, ValidationError
from starlette.responses import Response

from server import internal_topics
from server.broker import Broker
from server.errors import ApiError
from server.http import messages
from server.http.fastpath import MAX_ADMIN_BODY, read_body
from server.http.messages import BATCH_CONTENT_TYPE
from server.http.reply import answer_of, json_response
from server.security.api import broker_of, principal
from server.topics import TopicConfig
from server.usage.meter import TENANT_HEADER
from talos import Record, RecordData, decode_records, encode_batch, iter_batches, partition_for_key

__all__ = ["CONNECT_OFFSETS_TOPIC", "TENANT_RECORD_HEADER", "checkpoints_of", "router"]

CONNECT_OFFSETS_TOPIC = "__connect_offsets"
_PARTITIONS = 8
TENANT_RECORD_HEADER = "talos-tenant"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")  # connector names (connectors.config)
_READ_BYTES = 4 * 1024 * 1024

router = APIRouter(prefix="/v1/connectors", tags=["connectors"])


class CheckpointPut(BaseModel):
    task: str = Field(min_length=1, max_length=100, description="the task's key within the connector")
    checkpoint: dict[str, Any] | None = Field(description="the task's positions; null removes them")


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise ApiError(400, "INVALID_REQUEST", "a connector name is 1-100 of A-Z a-z 0-9 . _ -, not starting . _ -")


def partition_of(connector: str) -> int:
    return partition_for_key(connector.encode(), _PARTITIONS)


def checkpoints_of(records: Iterable[Record], tenant: str | None, connector: str) -> dict[str, dict[str, Any]]:
    """Every task's newest checkpoint of ``tenant``'s ``connector`` among ``records`` (oldest first)."""
    prefix = f"{connector}/".encode()
    wanted = None if tenant is None else tenant.encode()
    found: dict[str, dict[str, Any]] = {}
    for record in records:
        if record.key is None or not record.key.startswith(prefix):
            continue
        if dict(record.headers).get(TENANT_RECORD_HEADER) != wanted:
            continue  # another tenant's connector of the same name
        task = record.key[len(prefix) :].decode(errors="replace")
        if record.value is None:
            found.pop(task, None)
            continue
        try:
            document = orjson.loads(record.value)
        except orjson.JSONDecodeError:
            continue
        if isinstance(document, dict):
            found[task] = document
        else:
            found.pop(task, None)
    return found


async def _records(broker: Broker, partition: int) -> list[Record]:
    """Every record of the partition, read as the server (unmetered: a quota cut short would lose some)."""
    offset, end = await internal_topics.bounds(broker, CONNECT_OFFSETS_TOPIC, partition)
    out: list[Record] = []
    while offset < end:
        query = {"offset": str(offset), "max_bytes": str(_READ_BYTES)}
        reply = await messages.fetch(broker, CONNECT_OFFSETS_TOPIC, partition, {"accept": BATCH_CONTENT_TYPE}, query)
        if reply.status != 200:
            answer_of(reply)  # raises the owner's error
        before = offset
        for position, _header in iter_batches(reply.body, verify=True):
            for record in decode_records(reply.body, position, verify=False):
                if record.offset >= offset:
                    out.append(record)
                    offset = record.offset + 1
        if offset == before:
            break  # retention removed the rest as we read
    return out


async def load(broker: Broker, tenant: str | None, connector: str) -> dict[str, dict[str, Any]]:
    try:
        broker.topic(CONNECT_OFFSETS_TOPIC)
    except ApiError as exc:
        if exc.status == 404:
            return {}  # nothing was ever checkpointed
        raise
    return checkpoints_of(await _records(broker, partition_of(connector)), tenant, connector)


async def save(
    broker: Broker, tenant: str | None, connector: str, task: str, checkpoint: dict[str, Any] | None
) -> None:
    """Write the checkpoint durably. The tenant's write is billed to it (its produce quota applies)."""
    await internal_topics.ensure(broker, TopicConfig(CONNECT_OFFSETS_TOPIC, _PARTITIONS))
    record_headers = [] if tenant is None else [(TENANT_RECORD_HEADER, tenant.encode())]
    try:
        value = None if checkpoint is None else orjson.dumps(checkpoint)
    except orjson.JSONEncodeError as exc:  # e.g. an integer past 64 bits, which JSON parsing allowed
        raise ApiError(400, "INVALID_REQUEST", f"the checkpoint cannot be stored: {exc}") from None
    record = RecordData(value, f"{connector}/{task}".encode(), record_headers)
    headers = {"content-type": BATCH_CONTENT_TYPE}
    if tenant is not None:
        headers[TENANT_HEADER] = tenant
    batch = bytes(encode_batch([record]))
    answer_of(await messages.produce(broker, CONNECT_OFFSETS_TOPIC, partition_of(connector), headers, {}, batch))


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
    await save(broker, tenant, name, body.task, body.checkpoint)
    return json_response({"connector": name, "task": body.task})
