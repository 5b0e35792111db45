"""Offsets of a partition: its earliest and latest, how far a load session got durable, the first offset at or
after a time; read on the owner as a caller, or asked of the owner."""

from __future__ import annotations

from typing import Any

from server.broker import Broker, NotOwnerError
from server.messaging.admission import admit
from server.messaging.caller import Caller
from server.messaging.forwarder import answer_of, call_partition
from server.partition.loaded import LoadedPartition

__all__ = ["offsets", "offsets_here"]


async def offsets_here(
    broker: Broker, loaded: LoadedPartition, caller: Caller, *, session: int | None = None, timestamp: int | None = None
) -> dict[str, Any]:
    """The answer of ``GET .../offsets`` on the partition's owner (``session``, ``timestamp``: also how far that
    load session got durable, and the first offset at or after that time)."""
    admit(broker, caller, loaded.topic, "offsets")
    answer: dict[str, Any] = {
        "partition": loaded.index,
        "earliest": loaded.log.start_offset,
        "latest": loaded.log.durable_offset,
        "last_stable": loaded.last_stable_offset,  # read-committed readers' latest: below it all is decided
        "session": loaded.log.epoch,
    }
    if session is not None:  # how far an earlier load session got durable (Swift's resend point)
        answer["session_end"] = loaded.log.durable_end_of(session)
    if timestamp is not None:
        answer["offset"] = await loaded.offset_for_timestamp(timestamp)
    return answer


async def offsets(
    broker: Broker, caller: Caller, topic: str, partition: int, *, timestamp: int | None = None
) -> dict[str, Any]:
    """The partition's offsets (:func:`offsets_here`), wherever it is; the owner's error as an ApiError."""
    try:
        loaded = await broker.partition(topic, partition)
    except NotOwnerError as exc:
        query = {} if timestamp is None else {"timestamp": str(timestamp)}
        reply = await call_partition(
            broker.forwarder, caller, exc.owner, "GET", topic, partition, "offsets", query=query
        )
        return answer_of(reply)
    return await offsets_here(broker, loaded, caller, timestamp=timestamp)
