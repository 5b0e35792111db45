"""A compaction pass on demand (an operator's, a benchmark's): run on the partition's owner, or asked of it,
for a principal allowed to administer the topic."""

from __future__ import annotations

from typing import Any

from server.broker import Broker, NotOwnerError
from server.errors import ApiError
from server.messaging.caller import Caller
from server.messaging.forwarder import answer_of, call_partition
from server.security.access import Principal
from server.topic_configs import compacted

__all__ = ["compact_partition"]


async def compact_partition(
    broker: Broker, who: Principal, caller: Caller, topic: str, partition: int
) -> dict[str, Any]:
    """Run a pass over the partition now, whatever its dirty ratio; what it did (``{"compacted": false}`` when
    there was nothing sealed and not yet compacted)."""
    config = broker.topic(topic)
    broker.security.authorize(who, config, "admin")
    if not compacted(config.cleanup_policy):
        raise ApiError(400, "NOT_COMPACTED", f"topic {topic!r} has cleanup.policy={config.cleanup_policy!r}")
    if not 0 <= partition < config.partitions:
        raise ApiError(404, "UNKNOWN_PARTITION", f"topic {topic!r} has no partition {partition}")
    try:
        loaded = await broker.partition(topic, partition)
    except NotOwnerError as exc:
        reply = await call_partition(broker.forwarder, caller, exc.owner, "POST", topic, partition, "compact", query={})
        return answer_of(reply)
    report = await broker.compact_now(loaded)
    if report is None:
        return {"partition": partition, "compacted": False}
    return {
        "partition": partition,
        "compacted": True,
        "cleaned_to": report.cleaned_to,
        "segments_in": report.segments_in,
        "segments_out": report.segments_out,
        "bytes_read": report.bytes_read,
        "bytes_written": report.bytes_written,
        "records_read": report.records_read,
        "records_removed": report.records_removed,
        "tombstones_removed": report.tombstones_removed,
        "seconds": round(report.seconds, 6),
    }
