"""The server's compactor: one background thread that runs compaction passes (``fencing.compaction``) over
the partitions of compacted topics this server owns, one at a time, with one key index and one I/O budget
for all of them (``compaction_index_bytes``, ``compaction_io_bytes_per_s``). Maintenance offers it every
owned partition of a compacted topic each interval; a pass starts only when one is due (dirty ratio, or
``max.compaction.lag.ms``), or when an operator asks (``POST .../compact``)."""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from fencing import FencedError, LogConfig, LogError, PartitionLog
from fencing.compaction import CompactionReport, CompactionSettings, Throttle, compact
from fencing.key_index import KeyIndex
from server import metrics
from server.config import ServerConfig
from server.topic_configs import compacted, deleted_by_retention
from server.topics import TopicConfig

__all__ = ["Compactor", "compaction_settings", "log_config"]

log = logging.getLogger("talos.compaction")


def log_config(server: ServerConfig, topic: TopicConfig) -> LogConfig:
    """A partition's log limits: the topic's segment settings over the server's, retention only with the
    ``delete`` policy."""
    retained = deleted_by_retention(topic.cleanup_policy)
    return LogConfig(
        segment_bytes=topic.segment_bytes or server.segment_bytes,
        segment_ms=topic.segment_ms or server.segment_ms,
        retention_ms=topic.retention_ms if retained else None,
        retention_bytes=topic.retention_bytes if retained else None,
    )


def compaction_settings(server: ServerConfig, topic: TopicConfig) -> CompactionSettings:
    return CompactionSettings(
        min_lag_ms=topic.min_compaction_lag_ms,
        max_lag_ms=topic.max_compaction_lag_ms,
        delete_retention_ms=topic.delete_retention_ms,
        dirty_ratio=topic.min_cleanable_dirty_ratio,
        segment_bytes=topic.segment_bytes or server.segment_bytes,
    )


class Compactor:
    def __init__(self, config: ServerConfig) -> None:
        self._config = config
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="talos-compact")
        self._index: KeyIndex | None = None  # allocated on the first pass: servers without compacted topics never pay
        self._throttle = Throttle(config.compaction_io_bytes_per_s or None)
        self._queued: dict[int, Future[CompactionReport | None]] = {}  # by id of the log
        self._lock = threading.Lock()
        self._closed = False

    def offer(
        self, plog: PartitionLog, topic: TopicConfig, *, force: bool = False
    ) -> Future[CompactionReport | None] | None:
        """Queue a pass over ``plog`` unless one is queued or running for it already (then that one's future);
        None for a topic that is not compacted."""
        if not compacted(topic.cleanup_policy) or self._closed:
            return None
        with self._lock:
            queued = self._queued.get(id(plog))
            if queued is not None and not force:
                return queued
            settings = compaction_settings(self._config, topic)
            future = self._pool.submit(self._pass, plog, settings, force)
            self._queued[id(plog)] = future
        future.add_done_callback(lambda _: self._forget(plog, future))
        return future

    def _forget(self, plog: PartitionLog, future: Future[CompactionReport | None]) -> None:
        with self._lock:
            if self._queued.get(id(plog)) is future:
                del self._queued[id(plog)]

    def _pass(self, plog: PartitionLog, settings: CompactionSettings, force: bool) -> CompactionReport | None:
        if plog.failed is not None or self._closed:
            return None
        if self._index is None:
            self._index = KeyIndex(self._config.compaction_index_bytes)
        try:
            report = compact(plog, settings, self._index, throttle=self._throttle, force=force)
        except FencedError as exc:
            log.info("%s: compaction stopped, the partition has a newer owner: %s", plog.directory, exc)
            metrics.compacted("fenced")
            raise
        except (LogError, OSError) as exc:
            log.warning("%s: compaction failed: %r", plog.directory, exc)
            metrics.compacted("failed")
            raise
        if report is not None:
            metrics.compacted("done", report.bytes_read, report.bytes_written, report.records_removed)
        return report

    async def run(self, plog: PartitionLog, topic: TopicConfig) -> CompactionReport | None:
        """A pass now (forced: whatever the dirty ratio), awaited."""
        future = self.offer(plog, topic, force=True)
        return None if future is None else await asyncio.wrap_future(future)

    def close(self) -> None:
        """Stop taking passes; one running finishes on its thread (its swap is safe under any interruption)."""
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
