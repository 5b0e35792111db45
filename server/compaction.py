"""The server's compactor: one background thread that runs compaction passes (``fencing.compaction``) over
the partitions of compacted topics this server owns, one at a time, with one key index and one I/O budget
for all of them (``compaction_index_bytes``, ``compaction_io_bytes_per_s``), in one worker process.
Maintenance offers it every owned partition of a compacted topic each interval; a pass starts only when one
is due (dirty ratio, or ``max.compaction.lag.ms``), or when an operator asks (``POST .../compact``)."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from fencing import FencedError, LogConfig, LogCorruptError, LogError, PartitionLog, SegmentName, StorageError
from fencing.compaction import CompactionReport, CompactionSettings, Output, commit
from server import metrics
from server.config import ServerConfig
from server.topic_configs import compacted, deleted_by_retention
from server.topics import TopicConfig

__all__ = ["CompactionReport", "Compactor", "compaction_settings", "log_config"]

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
    """One thread that runs passes one at a time; each pass's reading and writing in a worker process
    (``fencing.compaction_worker``: CPU work that would hold the interpreter lock against the event loop), its
    commit here, where the partition's readers are."""

    def __init__(self, config: ServerConfig) -> None:
        self._config = config
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="talos-compact")
        self._worker: subprocess.Popen[str] | None = None
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
        try:
            report = self._compact(plog, settings, force)
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

    def _compact(self, plog: PartitionLog, settings: CompactionSettings, force: bool) -> CompactionReport | None:
        started = time.monotonic()
        with plog.maintenance():
            segments = plog.sealed_segments()
            if not segments:
                return None
            answer = self._ask(
                {
                    "storage": self._config.storage,
                    "directory": plog.directory,
                    "epoch": plog.epoch,
                    "segments": [[str(s.name), s.length] for s in segments],
                    "settings": dataclasses.asdict(settings),
                    "index_bytes": self._config.compaction_index_bytes,
                    "io_bytes_per_s": self._config.compaction_io_bytes_per_s,
                    "now_ms": int(time.time() * 1000),
                    "force": force,
                }
            )
            error = answer.get("error")
            if error is not None:
                kind, message = error["kind"], f"{plog.directory}: compaction: {error['message']}"
                raise {"fenced": FencedError, "corrupt": LogCorruptError}.get(kind, StorageError)(message)
            if answer["outputs"] is None:
                return None
            outputs = [
                Output([_name(n) for n in o["replaced"]], o["cleaning"], _name(o["name"])) for o in answer["outputs"]
            ]
            commit(plog, outputs)
        report = CompactionReport(**answer["report"])
        report.seconds = time.monotonic() - started
        return report

    def _ask(self, request: dict[str, object]) -> dict[str, Any]:
        """The worker's answer to one request (the worker started on first use, again after it died)."""
        worker = self._worker
        if worker is None or worker.poll() is not None:
            worker = self._worker = subprocess.Popen(
                [sys.executable, "-m", "fencing.compaction_worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                bufsize=1,
            )
        assert worker.stdin is not None and worker.stdout is not None
        try:
            worker.stdin.write(json.dumps(request) + "\n")
            worker.stdin.flush()
            line = worker.stdout.readline()
        except (BrokenPipeError, ValueError) as exc:  # it died, or close() closed the pipes
            raise StorageError(f"the compaction worker is gone: {exc!r}") from exc
        if not line:
            raise StorageError(f"the compaction worker exited ({worker.poll()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        """Stop taking passes and stop the worker by its PID: a pass it was writing is left as ``.cleaning``
        files, which the partition's next takeover deletes (a commit running here finishes or fails safely)."""
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        worker, self._worker = self._worker, None
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait()


def _name(text: str) -> SegmentName:
    name = SegmentName.parse(text)
    if name is None:
        raise StorageError(f"the compaction worker named a segment {text!r}")
    return name
