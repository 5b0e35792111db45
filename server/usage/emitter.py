"""Every ``metering_interval_s`` (10 s) the counts of :class:`UsageMeter` go to ``__talos_metrics`` through
the normal write path, one record per (tenant, topic, partition), as an **idempotent producer**: a batch
whose answer was lost is sent again with the same sequence and stored once. Each record carries the
``talos-server`` header (the server's id): the metering job counts only such records. A batch that cannot be
written yet stays pending (new counts wait behind it), so usage is late, never lost or doubled.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time

from metering.job import SERVER_HEADER
from server import internal_topics
from server.broker import Broker
from server.errors import ApiError
from server.topics import TopicConfig
from server.usage.meter import METRICS_TOPIC, UsageMeter, usage_records
from talos import RecordData, partition_for_key

__all__ = ["UsageEmitter"]

log = logging.getLogger("talos.metering")
_RETENTION_MS = 7 * 24 * 3600 * 1000


class UsageEmitter:
    def __init__(self, broker: Broker, meter: UsageMeter) -> None:
        self._broker = broker
        self._meter = meter
        self._producer: tuple[int, int] | None = None
        self._sequence = 0
        self._pending: list[RecordData] = []  # written with self._sequence, not yet acknowledged
        self._window_start_ms = int(time.time() * 1000)

    async def emit(self) -> int:
        """Send what was counted since the last call (and whatever is still pending); records sent."""
        broker = self._broker
        config = broker.config
        if not self._pending:
            counts = self._meter.take()
            now_ms = int(time.time() * 1000)
            broker.history.add(counts, now_ms)
            records = usage_records(config.member_id, self._window_start_ms, now_ms, counts)
            # The metering job counts only records carrying a server's mark (metering.job.server_usage).
            mark = [(SERVER_HEADER, config.member_id.encode())]
            self._pending = [dataclasses.replace(record, headers=mark) for record in records]
            self._window_start_ms = now_ms
        if not self._pending:
            return 0
        topic = await internal_topics.ensure(
            broker, TopicConfig(METRICS_TOPIC, config.metering_partitions, retention_ms=_RETENTION_MS)
        )
        if self._producer is None:
            self._producer = await broker.io(broker.producer_ids.allocate, None, None)
        partition = partition_for_key(config.member_id.encode(), topic.partitions)  # one server, one order
        producer_id, epoch = self._producer
        await internal_topics.append(
            broker,
            METRICS_TOPIC,
            partition,
            self._pending,
            producer=(producer_id, epoch, self._sequence),
        )
        sent = len(self._pending)
        self._sequence += sent
        self._pending = []
        return sent

    async def run(self) -> None:
        interval = self._broker.config.metering_interval_s
        while True:
            await asyncio.sleep(interval - (time.time() % interval))  # windows aligned to the interval
            try:
                await self.emit()
            except (ApiError, OSError) as exc:
                log.warning("metering: %d records not written yet (%s); retrying next time", len(self._pending), exc)

    async def close(self) -> None:
        """A last emit on a graceful stop, so the final window is not lost."""
        with contextlib.suppress(ApiError, OSError):
            await self.emit()
