"""Produce: batches stored on the partition's owner as a caller (its producer ids checked, its quota admitted
and paid, metered, traced), or handed to the owner when the partition is another server's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from server import metrics
from server.broker import Broker, NotOwnerError
from server.cluster import Owner
from server.errors import ApiError
from server.messaging.admission import Metered, admit, admit_now
from server.messaging.authorization import authorize_producers
from server.messaging.caller import Caller
from server.messaging.forwarder import BATCH_CONTENT_TYPE, answer_of, call_partition
from server.partition.loaded import LoadedPartition, ProduceResult, Stored, as_api_error
from server.security.guard import pay
from server.trace.recorder import SIDE_PREFIXES
from talos import BatchHeader, RecordData, encode_batch, read_header
from talos._codec import one_value_batch

__all__ = [
    "PendingProduce",
    "produce_batch",
    "produce_records",
    "produce_records_now",
    "produce_value_now",
    "store_batches",
]


async def store_batches(
    broker: Broker,
    loaded: LoadedPartition,
    caller: Caller,
    batches: list[bytearray],
    *,
    records: int,
    durable: bool,
    appended: asyncio.Future[None] | None = None,
    transactional_id: str | None = None,
) -> list[ProduceResult]:
    """Store validated batches on this partition's owner, as ``caller``: its idempotent producer ids checked,
    its quotas admitted and paid, metered, traced. One implementation for REST's binary produce and the Kafka
    listener. With ``appended`` (the Kafka listener's pipelined requests, which must reach the log in the order
    they were sent), each batch is appended before the next is handed over, and ``appended`` is resolved once
    the last one is (or the request failed); else all are handed over at once. Transactional batches name
    their ``transactional_id``: its coordinator is asked before one opens a transaction here."""
    topic, partition = loaded.topic, loaded.index
    size = sum(len(b) for b in batches)
    await validate_schemas(broker, topic, batches)
    if broker.security.enabled and caller.tenant is not None:
        producer_ids = {read_header(b, 0).producer_id for b in batches}
        await authorize_producers(broker, caller.tenant, producer_ids)
    buckets = admit(broker, caller, topic, "produce")
    with Metered(broker, caller, topic, partition) as usage:
        usage.update(bytes_in=size, messages_in=records)
        if buckets:
            await pay(buckets, size)
        # Validated before (batch_spans, the Kafka codec): the log need not check the CRC a second time.
        check = None if transactional_id is None else _asker(broker, caller, loaded, transactional_id)
        if appended is not None:
            answers = await _in_order(loaded, batches, durable, appended, check)
        elif len(batches) == 1:
            batch = batches[0]
            answers = [await loaded.produce(batch, durable=durable, verify=False, in_transaction=_ask(check, batch))]
        else:
            stores = (loaded.produce(b, durable=durable, verify=False, in_transaction=_ask(check, b)) for b in batches)
            answers = list(await asyncio.gather(*stores))
    _trace_produced(broker, topic, partition, batches, answers, caller, durable)
    metrics.produced(topic, records, size)
    return answers


async def validate_schemas(broker: Broker, topic: str, batches: list[bytearray]) -> None:
    """The refusal of records a topic that validates schema ids does not take (docs/schema-registry.md)."""
    config = broker.validated(topic)
    if config is None:
        return
    if broker.schema_validator is None:
        raise ApiError(503, "SCHEMA_VALIDATION_UNAVAILABLE", f"topic {topic!r} validates schemas; no registry here")
    await broker.schema_validator.check(config, batches)


_Asker = Callable[[int, int], Awaitable[bool]]


def _asker(broker: Broker, caller: Caller, loaded: LoadedPartition, transactional_id: str) -> _Asker | None:
    """How this partition asks the transaction's coordinator whether it is in the producer's transaction."""
    verifier = broker.transaction_verifier
    if verifier is None:
        return None

    def asked(producer_id: int, epoch: int) -> Awaitable[bool]:
        return verifier.in_transaction(caller.tenant, transactional_id, producer_id, epoch, loaded.topic, loaded.index)

    return asked


def _ask(asker: _Asker | None, batch: bytearray) -> Callable[[], Awaitable[bool]] | None:
    if asker is None:
        return None
    header = read_header(batch, 0)
    return lambda: asker(header.producer_id, header.producer_epoch)


async def _in_order(
    loaded: LoadedPartition,
    batches: list[bytearray],
    durable: bool,
    appended: asyncio.Future[None],
    check: _Asker | None,
) -> list[ProduceResult]:
    stores: list[asyncio.Future[ProduceResult]] = []
    try:
        for batch in batches:
            each: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            asked = _ask(check, batch)
            store = loaded.produce(batch, durable=durable, verify=False, appended=each, in_transaction=asked)
            stores.append(asyncio.ensure_future(store))
            await asyncio.wait((each, stores[-1]), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not appended.done():
            appended.set_result(None)
    return list(await asyncio.gather(*stores))


async def produce_records(
    broker: Broker,
    caller: Caller,
    topic: str,
    groups: dict[int, list[tuple[int, RecordData]]],
    *,
    producer: dict[str, int],
    durable: bool,
) -> list[ProduceResult]:
    """Records, per partition (``groups``: partition → (index in the request, record)), each partition's as one
    batch, stored here or at their owners; the answers in ``groups``' order. ``producer``: the idempotent
    producer's ``producer_id``, ``producer_epoch`` and ``base_sequence`` (empty: none)."""
    # Admitted once, before any partition is written: a 429 must not leave part of the request stored.
    buckets = admit(broker, caller, topic, "produce") if any(broker.owns(topic, p) for p in groups) else []

    async def commit(partition: int, items: list[tuple[int, RecordData]]) -> ProduceResult:
        # Encoded here, so the log need not check the CRC a second time.
        batch = bytearray(encode_batch([record for _, record in items], **producer))
        try:
            loaded = await broker.partition(topic, partition)
        except NotOwnerError as exc:  # another server's partition: hand it the batch, already encoded
            return await _forward_batch(broker, caller, exc.owner, topic, partition, batch, durable)
        await validate_schemas(broker, topic, [batch])
        if producer and broker.security.enabled and caller.tenant is not None:
            await authorize_producers(broker, caller.tenant, {producer["producer_id"]})
        with Metered(broker, caller, topic, partition) as usage:
            usage.update(bytes_in=len(batch), messages_in=len(items))
            if buckets:
                await pay(buckets, len(batch))
            answer = await loaded.produce(batch, durable=durable, verify=False)
        _trace_produced(broker, topic, partition, [batch], [answer], caller, durable)
        return answer

    if len(groups) == 1:  # the common case: no gather
        return [await commit(*next(iter(groups.items())))]
    return list(await asyncio.gather(*(commit(p, items) for p, items in groups.items())))


class PendingProduce:
    """Records :func:`produce_records_now` appended, waiting for their group's flush: :meth:`result` once
    ``durable`` is done meters, traces and answers them as :func:`produce_records` would."""

    __slots__ = ("_batch", "_broker", "_caller", "_key", "_messages", "_started", "durable", "stored")

    def __init__(self, broker: Broker, caller: Caller, stored: Stored, batch: bytearray, messages: int) -> None:
        self._broker = broker
        self._caller = caller
        self._batch = batch
        self._messages = messages
        self._key = (caller.billed, stored.partition.topic, stored.partition.index)  # as Metered meters it
        self._started = time.monotonic()
        self.stored = stored
        self.durable = stored.durable

    def result(self) -> ProduceResult:
        """The stored records' answer; raises the :class:`ApiError` a failed flush means."""
        self.durable_offset()
        return self.stored.partition.result_of(self.stored)

    def durable_offset(self) -> int:
        """The flush's durable offset, once the records are metered and traced as served (:meth:`result` without
        its tuple, for an answer that needs only this); raises the :class:`ApiError` a failed flush means."""
        stored, broker = self.stored, self._broker
        try:
            durable = stored.durable.result()
        except Exception as exc:
            broker.usage.record(self._key, started=self._started, error=True)
            raise as_api_error(exc) from None
        broker.usage.produced(self._key, started=self._started, size=len(self._batch), messages=self._messages)
        loaded = stored.partition
        if broker.trace_sample(loaded.topic):  # off, no lists made for it
            answer = loaded.result_of(stored)
            _trace_produced(broker, loaded.topic, loaded.index, [self._batch], [answer], self._caller, True)
        return durable


def produce_records_now(
    broker: Broker, caller: Caller, topic: str, partition: int, records: list[RecordData]
) -> PendingProduce | None:
    """:func:`produce_records` of one partition's plain records (no idempotent producer), durable, without an
    await: appended to the partition's next flush before this returns. None unless it is the common case that
    needs no await (the partition loaded here and working, group commit on, no quota that would hold the
    request, ...), and then nothing was charged, metered or stored: :func:`produce_records` does it all. A quota
    with room is charged here as ``admit`` and ``pay`` charge it; one in debt is the same 429."""
    loaded = broker.loaded_now(topic, partition)
    if loaded is None:
        return None
    batch = bytearray(encode_batch(records))
    return _append_now(broker, caller, loaded, batch, read_header(batch, whole=False))


def produce_value_now(
    broker: Broker, caller: Caller, topic: str, partition: int, value: bytes
) -> PendingProduce | None:
    """:func:`produce_records_now` of one message that is a value alone (no key, headers or timestamp): the
    single-message produce's, its batch made without a record list."""
    loaded = broker.loaded_now(topic, partition)
    if loaded is None:
        return None
    batch, header = one_value_batch(value, int(time.time() * 1000))
    return _append_now(broker, caller, loaded, batch, header)


def _append_now(
    broker: Broker, caller: Caller, loaded: LoadedPartition, batch: bytearray, header: BatchHeader
) -> PendingProduce | None:
    topic = loaded.topic
    if not loaded.takes_now(header) or broker.validated(topic) is not None:
        return None  # (validation awaits the registry: the full path checks)
    charge = admit_now(broker, caller, topic, "produce", len(batch))
    if charge is None:
        return None
    stored = loaded.append_now(batch, header)
    if stored is None:  # the log refused the append: the full path answers why, and charges again
        charge.refund()
        return None
    return PendingProduce(broker, caller, stored, batch, header.record_count)


async def produce_batch(
    broker: Broker,
    caller: Caller,
    topic: str,
    partition: int,
    batch: bytearray,
    *,
    durable: bool = True,
    transactional_id: str | None = None,
) -> ProduceResult:
    """One batch the server encoded (valid by construction) stored at the partition's owner, wherever it is
    (``transactional_id``: a transactional batch's, for its verification there)."""
    try:
        loaded = await broker.partition(topic, partition)
    except NotOwnerError as exc:
        return await _forward_batch(broker, caller, exc.owner, topic, partition, batch, durable, transactional_id)
    records = read_header(batch, 0).record_count
    stored = await store_batches(
        broker, loaded, caller, [batch], records=records, durable=durable, transactional_id=transactional_id
    )
    return stored[0]


async def _forward_batch(
    broker: Broker,
    caller: Caller,
    owner: Owner,
    topic: str,
    partition: int,
    batch: bytearray,
    durable: bool,
    transactional_id: str | None = None,
) -> ProduceResult:
    query = {"acks": "durable" if durable else "accepted"}
    if transactional_id is not None:
        query["transactional_id"] = transactional_id
    reply = await call_partition(
        broker.forwarder,
        caller,
        owner,
        "POST",
        topic,
        partition,
        "messages",
        query=query,
        body=bytes(batch),
        content_type=BATCH_CONTENT_TYPE,
        route=False,
    )
    results = answer_of(reply).get("results")
    if not results:
        raise ApiError(502, "FORWARD_FAILED", f"the owner's answer holds no result: {reply.body[:200]!r}")
    return ProduceResult.from_wire(results[0])


def _trace_produced(
    broker: Broker,
    topic: str,
    partition: int,
    batches: list[bytearray],
    answers: list[ProduceResult],
    caller: Caller,
    durable: bool,
) -> None:
    """Hand stored batches to the message trace (``server.trace.recorder``): of a traced topic, or of a group's
    retry and dead-letter topics (they retry messages of traced topics). Off, this is one dict lookup."""
    sample = broker.trace_sample(topic)
    if sample:
        for batch, answer in zip(batches, answers, strict=True):
            broker.trace.produced(
                topic,
                partition,
                answer.base_offset,
                answer.next_offset,
                batch,
                sample=sample,
                tenant=caller.billed,
                client=caller.client,
                durable=durable,
            )
    elif topic.startswith(SIDE_PREFIXES):
        for batch, answer in zip(batches, answers, strict=True):
            broker.trace.side_record(topic, partition, answer.base_offset, batch, tenant=caller.billed)
