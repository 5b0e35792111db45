"""Keeps the trace index of each ``__talos_trace`` partition this server owns up to date with the partition.

A query reads the index only after catching it up to the partition's high watermark, so whatever the
writers have flushed is found (read-your-writes once an event is in the topic). A background loop keeps the
indexes warm, so that catch-up is short, and drops rows past the topic's retention.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import posixpath
import tempfile
import time

from fencing.local import LocalFileSystem
from server import internal_topics
from server.broker import Broker
from server.errors import ApiError
from server.messaging.caller import SERVERS
from server.messaging.fetch import fetch_batches
from server.trace.events import TRACE_TOPIC
from server.trace.index import PartitionIndex
from server.trace.writer import RETENTION_MS
from talos import BatchError, decode_batches

__all__ = ["TraceIndexes", "index_directory"]

log = logging.getLogger("talos.trace")
_READ_BYTES = 1024 * 1024
_KEEP_WARM_S = 2.0


def index_directory(broker: Broker) -> str:
    """``trace_index_dir``, or beside the data on local storage (per server: a shared directory may serve a
    cluster), or in the system's temporary directory (HDFS)."""
    config = broker.config
    if config.trace_index_dir:
        return config.trace_index_dir
    if isinstance(broker.fs, LocalFileSystem):
        return posixpath.join(broker.root, "_trace_index", config.member_id)
    return os.path.join(tempfile.gettempdir(), "talos-trace-index", config.member_id)


def _add_chunk(index: PartitionIndex, data: bytes, position: int) -> int:
    """Index the records at or after ``position`` in fetched ``data``; the position after them. (I/O thread.)"""
    records: list[tuple[int, bytes | None]] = []
    after = position
    try:
        for decoded in decode_batches(data, verify=True):
            if decoded.error is not None or decoded.header.control:  # damaged, or a marker: stepped over
                after = max(after, decoded.header.next_offset)
                continue
            for record in decoded.records:
                if record.offset >= position:
                    records.append((record.offset, record.value))
            after = max(after, decoded.header.next_offset)
    except BatchError as exc:
        log.warning("trace index: unreadable batch after offset %d: %s", after, exc)
    if after > position:
        index.add(records, after)
    return after


class TraceIndexes:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._directory = index_directory(broker)
        self._indexes: dict[int, PartitionIndex] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def _open(self, partition: int) -> PartitionIndex:
        index = self._indexes.get(partition)
        if index is None:
            path = os.path.join(self._directory, f"{TRACE_TOPIC}-{partition}.sqlite")
            index = self._indexes[partition] = await self._broker.io(PartitionIndex, path)
        return index

    async def caught_up(self, partition: int) -> PartitionIndex:
        """The index of trace partition ``partition`` (this server owns it), with all of it indexed."""
        lock = self._locks.setdefault(partition, asyncio.Lock())
        async with lock:
            broker = self._broker
            index = await self._open(partition)
            earliest, end = await internal_topics.bounds(broker, TRACE_TOPIC, partition)
            position = await broker.io(lambda: index.position)
            if position > end:  # the topic was made again: what the file holds is of the old one
                await broker.io(index.clear, earliest)
                position = earliest
            elif position < earliest:  # retention went past it
                await broker.io(index.add, [], earliest)
                position = earliest
            while position < end:
                fetched = await fetch_batches(broker, SERVERS, TRACE_TOPIC, partition, position, _READ_BYTES)
                after = await broker.io(_add_chunk, index, fetched.body, position)
                if after <= position:
                    break
                position = after
            return index

    async def run(self) -> None:
        """Keep the owned partitions' indexes caught up; once an hour drop rows older than the retention."""
        pruned_at = time.monotonic()
        while True:
            await asyncio.sleep(_KEEP_WARM_S)
            broker = self._broker
            try:
                # What this server knows: no ZooKeeper read on the event loop every few seconds while nothing is traced.
                topic = broker.topic(TRACE_TOPIC, known_only=True)
            except ApiError:
                continue  # nothing traced yet
            prune = time.monotonic() - pruned_at > 3600
            for partition in range(topic.partitions):
                if not broker.owns(TRACE_TOPIC, partition):
                    continue
                try:
                    index = await self.caught_up(partition)
                    if prune:
                        cutoff = int(time.time() * 1000) - (topic.retention_ms or RETENTION_MS)
                        await broker.io(index.prune, cutoff)
                except (ApiError, OSError) as exc:
                    log.info("trace index %d: not caught up (%s)", partition, exc)
            if prune:
                pruned_at = time.monotonic()

    def close(self) -> None:
        for index in self._indexes.values():
            with contextlib.suppress(Exception):
                index.close()
        self._indexes.clear()
