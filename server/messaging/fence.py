"""Fencing a producer's older epochs on a partition, on its owner, as a caller."""

from __future__ import annotations

from typing import Any

from server.broker import Broker, NotOwnerError
from server.messaging.admission import admit
from server.messaging.authorization import authorize_producers
from server.messaging.caller import Caller
from server.messaging.forwarder import post_to_owner
from server.partition.loaded import LoadedPartition

__all__ = ["fence", "fence_here"]


async def fence_here(
    broker: Broker, loaded: LoadedPartition, caller: Caller, producer_id: int, epoch: int
) -> dict[str, Any]:
    """The partition refuses the producer's older epochs from now on, and everything it accepted from them
    before is durable when this returns: the answer of ``POST .../fence``."""
    if broker.security.enabled and caller.tenant is not None:
        await authorize_producers(broker, caller.tenant, {producer_id})
    admit(broker, caller, loaded.topic, "produce")  # a request like a produce, of no bytes
    result = await loaded.fence(producer_id, epoch)
    return {"partition": loaded.index, "producer_epoch": epoch, **result.marks()}


async def fence(
    broker: Broker, caller: Caller, topic: str, partition: int, producer_id: int, epoch: int
) -> dict[str, Any]:
    """:func:`fence_here` at the partition's owner, wherever it is; the owner's error as an ApiError."""
    try:
        loaded = await broker.partition(topic, partition)
    except NotOwnerError as exc:
        return await post_to_owner(
            broker.forwarder,
            caller,
            exc.owner,
            topic,
            partition,
            "fence",
            {"producer_id": producer_id, "producer_epoch": epoch},
        )
    return await fence_here(broker, loaded, caller, producer_id, epoch)
