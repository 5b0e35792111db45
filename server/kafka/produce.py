"""Produce and InitProducerId, transactional ones included.

A Kafka batch becomes a Talos batch (``server.kafka.records``) and is stored by the same code as REST's
binary produce (:func:`server.messaging.produce.store_batches`): the tenant's producer ids checked, its quota
paid, metered, traced, group-committed. acks 1 and -1 are answered once the batch is durable (there are no
replicas to wait for: the storage is the replication); acks 0 is stored the same way and not answered.

An idempotent Kafka producer's id and epoch are Talos producer ids (allocated by InitProducerId, owned by
the tenant) and its sequences are Talos sequences, so the partition's producer state deduplicates a resend
across a failover as it does for the SDK: a duplicate is answered as Kafka answers one, with success and
the offset it was first stored at.

A transactional batch names its transactional id; the partition asks the id's coordinator before the batch
opens the producer's transaction there (``store_batches``), so a batch outside the transaction (a late one, or
one from a client that skipped AddPartitionsToTxn) never leaves a hanging transaction.
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
from server.kafka.txn import coordinator_here, transaction_error
from server.messaging.authorization import authorize_message
from server.messaging.produce import store_batches
from server.messaging.producers import init_producer
from server.transactions.coordinator import validate_transactional_id
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
    transactional_id: str | None = body.get("transactional_id")
    if transactional_id is not None:
        try:
            validate_transactional_id(transactional_id)
        except ApiError as exc:  # Kafka fails the whole request, before any partition is written
            failed = _failed(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, exc.message)
            for key, (_, mine) in zip(partitions_of(body), turns, strict=True):
                ctx.session.release_append(key, mine)
            return None if body.get("acks") == 0 else _answer(body, [failed] * len(turns))
    jobs = []
    position = 0
    for topic in body.get("topic_data") or []:
        for part in topic.get("partition_data") or []:
            before, mine = turns[position]
            position += 1
            records = part.get("records")
            jobs.append(_partition(ctx, topic["name"], part["index"], records, transactional_id, before, mine))
    answers = await asyncio.gather(*jobs)
    if body.get("acks") == 0:
        return None
    return _answer(body, answers)


def _answer(body: dict[str, Any], answers: list[dict[str, Any]]) -> dict[str, Any]:
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
    transactional_id: str | None,
    before: asyncio.Future[None] | None,
    mine: asyncio.Future[None],
) -> dict[str, Any]:
    session = ctx.session
    try:
        if before is not None:
            await asyncio.shield(before)
        return await _store(ctx, topic, index, records, transactional_id, mine)
    except ApiError as exc:
        return _failed(_produce_error(exc, transactional_id), exc.message)
    finally:
        session.release_append((topic, index), mine)


def _produce_error(error: ApiError, transactional_id: str | None) -> ErrorCode:
    """A produce's failure in the code its client acts on. In a transaction (KIP-890 part 1), the coordinator's
    answer while it completes the previous transaction, or while it cannot be reached, is disguised as the
    retriable NOT_ENOUGH_REPLICAS: the client resends the same batch, as Kafka's leader asks it to. A partition
    not in the transaction stays INVALID_TXN_STATE (we serve no Produce version that knows
    TRANSACTION_ABORTABLE), a fenced epoch INVALID_PRODUCER_EPOCH."""
    if transactional_id is not None and error.code in _RETRIED_IN_TRANSACTION:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    return error_code(error)


_RETRIED_IN_TRANSACTION = frozenset(
    {"CONCURRENT_TRANSACTIONS", "NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS"}
)


def _failed(code: ErrorCode, message: str) -> dict[str, Any]:
    return {"error_code": code, "base_offset": -1, "log_start_offset": -1, "error_message": message}


async def _store(
    ctx: Context,
    topic: str,
    index: int,
    records: bytes | None,
    transactional_id: str | None,
    mine: asyncio.Future[None],
) -> dict[str, Any]:
    broker = ctx.broker
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
        broker,
        loaded,
        ctx.session.caller,
        batches,
        records=count,
        durable=True,
        appended=mine,
        transactional_id=transactional_id,
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
    the one it names (KIP-360: a producer that lost track of its sequences bumps its epoch). With a
    transactional id, at the id's coordinator: its producer id and a new epoch, fencing older instances."""
    if body.get("transactional_id") is not None:
        return await _init_transactional(ctx, body)
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


async def _init_transactional(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """InitProducerId for a transactional producer; v3+ may name the producer id and epoch it had (KIP-360
    resume), -1/-1 naming none."""
    transactional_id = body["transactional_id"]
    refused = {"throttle_time_ms": 0, "producer_id": -1, "producer_epoch": -1}
    here = await coordinator_here(ctx, transactional_id)
    if here != ErrorCode.NONE:
        return {**refused, "error_code": here}
    producer_id, epoch = body.get("producer_id", -1), body.get("producer_epoch", -1)
    expected = (producer_id, epoch) if producer_id >= 0 and epoch >= 0 else None
    try:
        producer_id, epoch = await ctx.transactions.init(
            ctx.session.principal.tenant,
            transactional_id,
            timeout_ms=body["transaction_timeout_ms"],
            expected=expected,
        )
    except (ApiError, NotOwnerError) as exc:
        return {**refused, "error_code": transaction_error(exc, ctx.header.api_key, ctx.header.api_version)}
    return {"throttle_time_ms": 0, "error_code": 0, "producer_id": producer_id, "producer_epoch": epoch}
