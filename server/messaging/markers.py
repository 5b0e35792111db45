"""Transaction markers: a transaction's coordinator closes it on each partition it named, on the partition's
owner, wherever it is (the shape of ``server.messaging.fence``)."""

from __future__ import annotations

from typing import Any

from server.broker import Broker, NotOwnerError
from server.messaging.caller import Caller
from server.messaging.forwarder import post_to_owner
from talos._control import ControlType, Marker

__all__ = ["marker_body", "write_marker"]


def marker_body(marker: Marker, *, bumped: bool) -> dict[str, Any]:
    """A marker as the JSON body of ``POST .../txn-markers``."""
    return {
        "producer_id": marker.producer_id,
        "producer_epoch": marker.producer_epoch,
        "commit": marker.type is ControlType.COMMIT,
        "coordinator_epoch": marker.coordinator_epoch,
        "bumped": bumped,
    }


async def write_marker(
    broker: Broker, caller: Caller, topic: str, partition: int, marker: Marker, *, bumped: bool = False
) -> dict[str, Any]:
    """Write ``marker`` on the partition, here or at its owner; answered once it is durable there (its offset
    and the partition's marks). The owner's refusal (an older epoch or coordinator) comes back as an ApiError.
    ``bumped``: the transaction ended with an epoch bump (``LoadedPartition.write_marker``)."""
    try:
        loaded = await broker.partition(topic, partition)
    except NotOwnerError as exc:
        return await post_to_owner(
            broker.forwarder, caller, exc.owner, topic, partition, "txn-markers", marker_body(marker, bumped=bumped)
        )
    first = loaded.transactions.open.get(marker.producer_id)  # the transaction this marker closes, if open here
    result = await loaded.write_marker(marker, bumped=bumped)
    if first is not None and result.base_offset > first and broker.trace_sample(topic):
        # The trace of the transaction's messages says how it ended (the range may hold other producers' too).
        broker.trace.record(
            topic,
            partition,
            first,
            "transaction_committed" if marker.type is ControlType.COMMIT else "transaction_aborted",
            last=result.base_offset - 1,
            producer_id=marker.producer_id,
            producer_epoch=marker.producer_epoch,
            marker_offset=result.base_offset,
        )
    return {"partition": loaded.index, "offset": result.base_offset, **result.marks()}
