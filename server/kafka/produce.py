"""Produce and InitProducerId.

A Kafka batch becomes a Talos batch (``server.kafka.records``) and is stored by the same code as REST's
binary produce (:func:`server.messaging.produce.store_batches`): the tenant's producer ids checked, its quota
paid, metered, traced, group-committed. acks 1 and -1 are answered once the batch is durable (there are no
replicas to wait for: the storage is the replication); acks 0 is stored the same way and not answered.

An idempotent Kafka producer's id and epoch are Talos producer ids (allocated by InitProducerId, owned by
the tenant) and its sequences are Talos sequences, so the partition's producer state deduplicates a resend
across a failover as it does for the SDK: a duplicate is answered as Kafka answers one, with success and
the offset it was first stored at.
"""

from __future__ import annotations

import asyncio
from typing import Any

from server.broker import NotOwnerError
from server.errors import ApiError
from server.kafka.context import Context
from server.kafka.failures import error_code
from server.kafka.protocol.errors import ErrorCode
from server.kafka.records import KafkaRecordError, kafka_to_talos
from server.messaging.authorization import authorize_message
from server.messaging.produce import store_batches
from server.messaging.producers import init_producer
from talos import read_header

__all__ = ["init_producer_id", "partitions_of", "produce"]


def partitions_of(body: dict[str, Any]) -> list[tuple[str, int]]:
    """The (topic, partition) pairs a Produce request writes, in request order."""
    return [(t["name"], p["index"]) for t in body.get("topic_data") or [] for p in t.get("partition_data") or []]


async def produce(
    ctx: Context, body: dict[str, Any], turns: list[tuple[asyncio.Future[None] | None, asyncio.Future[None]]]
) -> dict[str, Any] | None:
    """``turns``: per partition of the request, the connection's previous produce to wait for and this one's
    own (``Session.claim_appends``, taken when the request arrived)."""
    transactional = body.get("transactional_id") is not None
    jobs = []
    position = 0
    for topic in body.get("topic_data") or []:
        for part in topic.get("partition_data") or []:
            before, mine = turns[position]
            position += 1
            jobs.append(_partition(ctx, topic["name"], part["index"], part.get("records"), transactional, before, mine))
    answers = await asyncio.gather(*jobs)
    if body.get("acks") == 0:
        return None
    responses: dict[str, list[dict[str, Any]]] = {}
    for (name, index), answer in zip(partitions_of(body), answers, strict=True):
        responses.setdefault(name, []).append({"index": index, **answer})
    return {
        "responses": [{"name": name, "partition_responses": parts} for name, parts in responses.items()],
        "throttle_time_ms": 0,
    }


async def _partition(
    ctx: Context,
    topic: str,
    index: int,
    records: bytes | None,
    transactional: bool,
    before: asyncio.Future[None] | None,
    mine: asyncio.Future[None],
) -> dict[str, Any]:
    session = ctx.session
    try:
        if before is not None:
            await asyncio.shield(before)
        return await _store(ctx, topic, index, records, transactional, mine)
    except ApiError as exc:
        return _failed(error_code(exc), exc.message)
    finally:
        session.release_append((topic, index), mine)


def _failed(code: ErrorCode, message: str) -> dict[str, Any]:
    return {"error_code": code, "base_offset": -1, "log_start_offset": -1, "error_message": message}


async def _store(
    ctx: Context, topic: str, index: int, records: bytes | None, transactional: bool, mine: asyncio.Future[None]
) -> dict[str, Any]:
    broker = ctx.broker
    if transactional:
        return _failed(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactions are not supported")
    authorize_message(broker, ctx.session.principal, topic, "produce")
    try:
        loaded = await broker.partition(topic, index)
    except NotOwnerError as exc:
        return _failed(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"partition served by {exc.owner.server_id}")
    if not records:
        return _failed(ErrorCode.CORRUPT_MESSAGE, "no records")
    try:
        batches = kafka_to_talos(records)
    except KafkaRecordError as exc:
        return _failed(ErrorCode(exc.code), str(exc))
    if not batches:
        return _failed(ErrorCode.CORRUPT_MESSAGE, "no record batch")
    count = sum(read_header(b, 0).record_count for b in batches)
    answers = await store_batches(
        broker, loaded, ctx.session.caller, batches, records=count, durable=True, appended=mine
    )
    first = answers[0]
    return {
        "error_code": 0,
        "base_offset": first.base_offset,
        "log_append_time_ms": -1,
        "log_start_offset": loaded.log.start_offset,
        "error_message": None,
    }


async def init_producer_id(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """A new producer id for an idempotent producer (owned by the connection's tenant), or the next epoch of
    the one it names (KIP-360: a producer that lost track of its sequences bumps its epoch)."""
    if body.get("transactional_id") is not None:
        return {"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "producer_id": -1, "producer_epoch": -1}
    requested = body.get("producer_id", -1)
    try:
        producer_id, epoch = await init_producer(
            ctx.broker, ctx.session.principal, requested if requested >= 0 else None
        )
    except ApiError as exc:
        return {
            "error_code": error_code(exc, denied=ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
            "producer_id": -1,
            "producer_epoch": -1,
        }
    return {
        "error_code": 0,
        "producer_id": producer_id,
        "producer_epoch": epoch,
        "throttle_time_ms": 0,
    }
