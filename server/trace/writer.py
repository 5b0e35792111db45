"""Every ``trace_flush_interval_s`` (1 s) the events of :class:`~server.trace.recorder.TraceRecorder` go to
``__talos_trace`` through the normal write path, the way metering writes ``__talos_metrics``: batched, off
the request path, as an **idempotent producer** (one sequence per trace partition), so a batch whose answer
was lost is sent again with the same sequence and stored once. A batch that cannot be written yet stays
pending and new events wait behind it: late, never doubled; lost only if the server dies meanwhile.

The events of one source partition all go to one trace partition (:func:`server.trace.events.trace_partition`),
so its index alone answers for a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from server import internal_topics, metrics
from server.broker import Broker
from server.errors import ApiError
from server.topics import TopicConfig
from server.trace.events import TRACE_TOPIC, encode_event, trace_partition
from server.trace.recorder import TraceRecorder
from talos import RecordData

__all__ = ["RETENTION_MS", "TraceWriter", "trace_topic_config"]

log = logging.getLogger("talos.trace")
RETENTION_MS = 7 * 24 * 3600 * 1000
_MAX_RECORDS = 2000  # per write: well under a forwarded request's size limit
_MAX_SEQUENCE = 2**31 - 1  # a batch header's base sequence is an int32


def trace_topic_config(broker: Broker) -> TopicConfig:
    return TopicConfig(TRACE_TOPIC, broker.config.trace_partitions, retention_ms=RETENTION_MS)


class TraceWriter:
    def __init__(self, broker: Broker, recorder: TraceRecorder) -> None:
        self._broker = broker
        self._recorder = recorder
        self._producers: dict[int, tuple[int, int]] = {}  # per trace partition: its sequence is its own
        self._sequence: dict[int, int] = {}
        self._pending: dict[int, list[RecordData]] = {}  # written with self._sequence[p], not yet acknowledged
        self._waiting: dict[int, list[RecordData]] = {}

    def _waiting_count(self) -> int:
        return sum(len(records) for records in self._waiting.values())

    async def flush(self) -> int:
        """Write what was recorded since the last call (and whatever is still pending); records written."""
        broker = self._broker
        if not self._recorder.pending() and not self._pending and not self._waiting:
            return 0
        topic = await internal_topics.ensure(broker, trace_topic_config(broker))
        if self._waiting_count() < broker.config.trace_max_buffered:  # else: the recorder's bound drops
            server = broker.config.member_id
            for event in self._recorder.take():
                partition = trace_partition(event.topic, event.partition, topic.partitions)
                self._waiting.setdefault(partition, []).append(encode_event(event, server))
        written = 0
        failure: Exception | None = None
        for partition in sorted(set(self._pending) | set(self._waiting)):
            try:
                written += await self._write(partition)
            except (ApiError, OSError) as exc:
                failure = exc
        metrics.trace_events("written", written)
        if failure is not None:
            raise failure
        return written

    async def _write(self, partition: int) -> int:
        written = 0
        while True:
            if not self._pending.get(partition):
                waiting = self._waiting.get(partition, [])
                if not waiting:
                    self._waiting.pop(partition, None)
                    return written
                self._pending[partition], self._waiting[partition] = waiting[:_MAX_RECORDS], waiting[_MAX_RECORDS:]
                if self._sequence.get(partition, 0) + _MAX_RECORDS >= _MAX_SEQUENCE:
                    self._producers.pop(partition, None)  # a fresh batch (not a resend): a new id, sequence 0
            records = self._pending[partition]
            if partition not in self._producers:
                broker = self._broker
                self._producers[partition] = await broker.io(broker.producer_ids.allocate, None, None)
                self._sequence[partition] = 0
            producer_id, epoch = self._producers[partition]
            sequence = self._sequence[partition]
            await internal_topics.append(
                self._broker, TRACE_TOPIC, partition, records, producer=(producer_id, epoch, sequence)
            )
            self._sequence[partition] = sequence + len(records)
            written += len(records)
            del self._pending[partition]

    async def run(self) -> None:
        interval = self._broker.config.trace_flush_interval_s
        while True:
            await asyncio.sleep(interval)
            try:
                await self.flush()
            except (ApiError, OSError) as exc:
                log.warning("trace: events not written yet (%s); retrying next time", exc)

    async def close(self) -> None:
        """A last flush on a graceful stop."""
        with contextlib.suppress(ApiError, OSError):
            await self.flush()
