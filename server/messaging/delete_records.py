"""Deleting a partition's records below an offset (Kafka's DeleteRecords, REST's ``delete-records``): on the
partition's owner, or asked of the owner, for a principal that may administer the topic.

The log moves its start offset durably (``PartitionLog.delete_records``: a marker the next owner reads, then the
whole segments below it are removed); readers below the new start get ``OFFSET_OUT_OF_RANGE``, as past retention.
Who may: the topic's owner tenant, a tenant granted ``admin`` on it, or the admin — the ``admin`` action, as for
changing or deleting the topic. Kafka asks for DELETE on the topic; a ``produce`` grant here does not reach as
far, so a tenant that may only write to another's topic cannot erase what others wrote there.
"""

from __future__ import annotations

from typing import Any

from fencing import LogError, OffsetOutOfRangeError
from server.broker import Broker, NotOwnerError
from server.errors import ApiError
from server.messaging.admission import admit
from server.messaging.caller import Caller
from server.messaging.forwarder import post_to_owner
from server.partition.loaded import LoadedPartition, as_api_error
from server.security import audit
from server.security.access import Principal

__all__ = ["HIGH_WATERMARK", "authorize_delete_records", "delete_records", "delete_records_here"]

HIGH_WATERMARK = -1  # Kafka's "every record up to the high watermark"


def authorize_delete_records(broker: Broker, who: Principal, topic: str) -> None:
    """403 (404 for a topic ``who`` may not see) unless ``who`` may delete the topic's records."""
    broker.security.authorize(who, broker.topic(topic), "admin")


async def delete_records_here(broker: Broker, loaded: LoadedPartition, caller: Caller, offset: int) -> dict[str, Any]:
    """On the owner: records below ``offset`` (:data:`HIGH_WATERMARK`: every durable one) are gone, durably, when
    this returns; the answer of ``POST .../partitions/{p}/delete-records``: the partition's new start offset."""
    admit(broker, caller, loaded.topic, "offsets")  # a request of no bytes
    if loaded.abandoned is not None:
        raise as_api_error(loaded.abandoned)
    log = loaded.log
    target = log.durable_offset if offset == HIGH_WATERMARK else offset
    if target < 0:
        raise OffsetOutOfRangeError(offset, log.start_offset, log.durable_offset)
    try:
        start = await broker.io(log.delete_records, target)
    except OffsetOutOfRangeError:
        raise
    except LogError as exc:  # fenced (moved), the storage failing
        raise as_api_error(exc) from None
    return {"partition": loaded.index, "low_watermark": start}


async def delete_records(
    broker: Broker, who: Principal, caller: Caller, topic: str, partition: int, offset: int
) -> dict[str, Any]:
    """:func:`delete_records_here` at the partition's owner, wherever it is, once ``who`` may; the owner's error as
    an ApiError (``OFFSET_OUT_OF_RANGE`` past the high watermark), or :class:`OffsetOutOfRangeError` here."""
    authorize_delete_records(broker, who, topic)
    if offset < HIGH_WATERMARK:
        raise ApiError(400, "OFFSET_OUT_OF_RANGE", f"offset {offset}: an offset, or -1 for the high watermark")
    try:
        loaded = await broker.partition(topic, partition)
    except NotOwnerError as exc:
        return await post_to_owner(
            broker.forwarder, caller, exc.owner, topic, partition, "delete-records", {"offset": offset}
        )
    answer = await delete_records_here(broker, loaded, caller, offset)
    config = broker.topic(topic)
    detail = f"partition {partition}: start {answer['low_watermark']}"
    await audit.record(broker, who, "topic.delete_records", topic, tenant=config.tenant, detail=detail)
    return answer
