"""The server's own topics (``__consumer_offsets``, a group's retry and dead-letter topics): created on
first use, and written and read through the services' produce and fetch (``server.messaging``), as the servers' own
requests, so they are placed on the
ring, fenced and forwarded like any topic, and any server can read what another wrote.
"""

from __future__ import annotations

from server.broker import Broker
from server.errors import ApiError
from server.messaging.caller import SERVERS
from server.messaging.fetch import fetch_batches
from server.messaging.offsets import offsets
from server.messaging.produce import produce_batch
from server.partition.loaded import LoadedPartition
from server.topics import TopicConfig
from talos import BatchHeader, Record, RecordData, decode_records, encode_batch, iter_batches

__all__ = [
    "append",
    "batches_from",
    "bounds",
    "ensure",
    "read_all",
    "read_batches",
    "read_load",
    "read_records",
    "records_from",
]

_READ_BYTES = 4 * 1024 * 1024


async def ensure(broker: Broker, config: TopicConfig) -> TopicConfig:
    """The topic, created with ``config`` if it does not exist yet (by this server or a racing one)."""
    try:
        return broker.topic(config.name)
    except ApiError as exc:
        if exc.status != 404:
            raise
    try:
        return await broker.create_topic(config)
    except ApiError as exc:
        if exc.code != "TOPIC_EXISTS":
            raise
        return await broker.reread_topic(config.name)


async def append(
    broker: Broker,
    topic: str,
    partition: int,
    records: list[RecordData],
    *,
    producer: tuple[int, int, int] | None = None,
) -> int:
    """Write the records durably as one batch at the partition's owner; their first offset.

    ``producer``: (id, epoch, first sequence) of an idempotent producer, so a resend is stored once."""
    ids = {}
    if producer is not None:
        ids = {"producer_id": producer[0], "producer_epoch": producer[1], "base_sequence": producer[2]}
    stored = await produce_batch(broker, SERVERS, topic, partition, bytearray(encode_batch(records, **ids)))
    return stored.base_offset


async def bounds(broker: Broker, topic: str, partition: int) -> tuple[int, int]:
    """The partition's earliest offset and its high watermark."""
    doc = await offsets(broker, SERVERS, topic, partition)
    return int(doc["earliest"]), int(doc["latest"])


async def read_records(broker: Broker, topic: str, partition: int, *, start: int | None = None) -> list[Record]:
    """Every record from the earliest offset (or ``start``) to the high watermark (a transaction's markers
    stepped over)."""
    batches = await read_batches(broker, topic, partition, start=start)
    return [record for header, records in batches if not header.control for record in records]


async def read_batches(
    broker: Broker, topic: str, partition: int, *, start: int | None = None
) -> list[tuple[BatchHeader, list[Record]]]:
    """Every batch (its header and its records at or after the start), markers included, from the earliest
    offset (or ``start``) to the high watermark: for readers that tell transactions apart."""
    offset, end = await bounds(broker, topic, partition)
    offset = max(offset, start or 0)
    out: list[tuple[BatchHeader, list[Record]]] = []
    while offset < end:
        data = (await fetch_batches(broker, SERVERS, topic, partition, offset, _READ_BYTES)).body
        batches, after = batches_from(data, offset)
        out += batches
        if after == offset:
            break  # nothing more is readable (retention removed the rest as we read)
        offset = after
    return out


def batches_from(data: bytes, offset: int) -> tuple[list[tuple[BatchHeader, list[Record]]], int]:
    """The batches of fetched data with their records at or after ``offset``, and the offset after them."""
    out: list[tuple[BatchHeader, list[Record]]] = []
    after = offset
    for position, header in iter_batches(data, verify=True):
        if header.next_offset > offset:
            records = decode_records(data, position, verify=False)
            out.append((header, [record for record in records if record.offset >= offset]))
        after = max(after, header.next_offset)
    return out, after


def records_from(data: bytes, offset: int) -> tuple[list[Record], int]:
    """The records at or after ``offset`` in fetched batches, and the offset after them. A transaction's marker
    holds no record of the topic's: stepped over, its offset counted."""
    batches, after = batches_from(data, offset)
    return [record for header, records in batches if not header.control for record in records], after


async def read_all(
    broker: Broker, topic: str, partition: int, *, start: int | None = None
) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record (offset, key, value) from the earliest offset (or ``start``) to the high watermark."""
    return [(r.offset, r.key, r.value) for r in await read_records(broker, topic, partition, start=start)]


async def read_load(loaded: LoadedPartition) -> list[tuple[bytes | None, bytes | None]]:
    """Every (key, value) of a partition loaded here, read from the load itself and not through the services: a
    coordinator that writes to this load reads back exactly what it holds."""
    out: list[tuple[bytes | None, bytes | None]] = []
    offset = loaded.log.start_offset
    while offset < loaded.log.durable_offset:
        result = await loaded.fetch(offset, _READ_BYTES, 0)
        records, after = records_from(b"".join(result.batches), offset)
        out += [(r.key, r.value) for r in records]
        if after <= offset:
            break
        offset = after
    return out
