"""Sink tasks: members of the consumer group ``connect-<connector>`` that carry records to a target.

Each of a connector's tasks is one group member, so the connector's partitions are shared among its
tasks (and among runners, if several run the same file) under the group's time-limited locks. A task
buffers what it reads per partition, and when the target says a partition is due (size, time) it carries
the buffer over in three steps (:class:`SinkWriter`):

1. *stage*: write it to the target, where readers do not see it yet if the target can hide it (HDFS: a
   temporary file; Elasticsearch: the documents themselves, made harmless to write twice by their ids);
2. *commit* the offset after it through the group. The commit carries the generation of the task's lock, and
   the coordinator refuses it (409 ``NOT_HOLDER``/``UNKNOWN_MEMBER``) once the task no longer holds the
   partition, for example after a pause past its session: the task is *fenced*. A refused partition's stage
   is *abandoned* (HDFS: the temporary file is deleted) and its next holder reads those records again;
3. *publish* what was committed (HDFS: rename the file into place).

A crash or pause between 2 and 3 leaves committed records unpublished: the partition's next holder finds them
when it ``open``s the partition, with the committed offsets, and publishes them first (HDFS).

Fault injection, for tests only: with ``TALOS_CONNECT_PAUSE_BEFORE=commit`` or ``=publish`` in its
environment, the runner process stops itself with SIGSTOP (once, at the first flush that gets there) right
before that step, after writing ``talos connect: fault injection: pausing before <step>`` to stderr. Whoever
set it resumes the process with SIGCONT.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Protocol

from connectors.config import ConnectorConfig
from connectors.task import TaskStatus
from talos import Admin, CommitFailedError, Consumer, Message

__all__ = ["PAUSE_ENV", "SinkTask", "SinkWriter", "TopicPartition", "group_name"]

log = logging.getLogger("talos.connect")

TopicPartition = tuple[str, int]
FETCH_BYTES = 4 * 1024 * 1024  # per fetch: sinks read in bulk (the consumer default is 1 MiB)
PAUSE_ENV = "TALOS_CONNECT_PAUSE_BEFORE"
_paused: set[str] = set()


def group_name(connector: str) -> str:
    return f"connect-{connector}"


def _fault_point(step: str) -> None:
    """The fault-injection hook (module docstring): stop this process before ``step`` if asked, once."""
    if os.environ.get(PAUSE_ENV) != step or step in _paused:
        return
    _paused.add(step)
    sys.stderr.write(f"talos connect: fault injection: pausing before {step}\n")
    sys.stderr.flush()
    # To this thread: the kernel then stops the process before this thread runs on (os.kill would wake the
    # main thread to stop everyone, and this one could commit or rename meanwhile).
    signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)


class SinkWriter(Protocol):
    """A target, as one sink task sees it."""

    records: int  # written since the writer was made

    def open(self, tps: list[TopicPartition], committed: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """The task now holds ``tps``, whose ``committed`` offsets (none: never committed) were read after the
        grant, so no stale holder can move them any more: finish what a predecessor committed but did not
        publish, and say where each partition must resume if the target knows better than the committed
        offset (as HDFS file names do)."""
        ...

    def add(self, message: Message) -> bool:
        """Buffer one record; True if its partition's buffer is now full (to be written before more)."""
        ...

    def due(self, now: float) -> list[TopicPartition]:
        """Partitions whose buffered records must be written now (size or time)."""
        ...

    def pending(self) -> list[TopicPartition]:
        """Partitions with buffered records."""
        ...

    def stage(self, tps: list[TopicPartition], holds: Callable[[TopicPartition], bool]) -> dict[TopicPartition, int]:
        """Write the buffers of ``tps`` that the task still ``holds`` (the others stay buffered: a lock that
        only looks expired until a late heartbeat answer renews it must not lose them), unpublished; the next
        offset of each staged partition, to commit. Raises if the target cannot be written (nothing is
        committed)."""
        ...

    def publish(self, tps: list[TopicPartition]) -> None:
        """The commits of these staged partitions were accepted: make them visible, and forget the buffers."""
        ...

    def abandon(self, tps: list[TopicPartition]) -> None:
        """The commits of these staged partitions were refused: undo the stage where the target can, keep the
        buffers (dropped with the partition, or written again if the lock comes back unchanged)."""
        ...

    def drop(self, tps: list[TopicPartition]) -> None:
        """Forget the buffers of partitions the task no longer holds."""
        ...

    def describe(self) -> dict[str, object]:
        """Target-specific figures for the status (files written, bulk requests, ...)."""
        ...

    def close(self) -> None: ...


class SinkTask:
    def __init__(
        self,
        *,
        url: str,
        connector: ConnectorConfig,
        status: TaskStatus,
        writer: Callable[[], SinkWriter],
        poll_timeout_s: float = 0.2,
    ) -> None:
        self.url = url
        self.connector = connector
        self.status = status
        self._make_writer = writer
        self._poll_timeout_s = poll_timeout_s

    def run(self, stop: threading.Event) -> None:
        with Admin(self.url) as admin:  # reads the committed offsets of partitions as they are granted
            self._run(stop, admin)

    def _run(self, stop: threading.Event, admin: Admin) -> None:
        settings = self.connector.settings
        writer = self._make_writer()
        written_before = self.status.records
        consumer: Consumer | None = None

        def assigned(tps: list[TopicPartition]) -> None:
            assert consumer is not None
            for (topic, partition), offset in writer.open(tps, self._committed(admin, tps)).items():
                consumer.seek(topic, partition, offset)

        def released(tps: list[TopicPartition]) -> None:
            writer.drop(tps)  # not committed: the partition's next holder reads them again

        try:
            consumer = Consumer(
                self.url,
                group=group_name(self.connector.name),
                topics=self.connector.topics or [],
                start=settings.start,
                auto_commit=False,
                session_timeout_s=settings.session_timeout_s,
                on_assign=assigned,
                on_revoke=released,
                on_lost=released,
                instance=f"task-{self.status.task}",
                max_bytes=FETCH_BYTES,
                isolation="read_committed",  # an aborted transaction's records never reach the target
            )
            while not stop.is_set():
                for message in consumer.poll(timeout=self._poll_timeout_s):
                    if writer.add(message):
                        self._flush(consumer, writer, writer.due(time.monotonic()))
                self._flush(consumer, writer, writer.due(time.monotonic()))
                self._report(consumer, writer, written_before)
            self._flush(consumer, writer, writer.pending())  # a graceful stop writes what it has
            self._report(consumer, writer, written_before)
        finally:
            writer.close()
            if consumer is not None:
                consumer.close()

    def _committed(self, admin: Admin, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets of ``tps``, read after they were granted to this task."""
        wanted = set(tps)
        rows = admin.describe_group(group_name(self.connector.name))["partitions"]
        return {
            (row["topic"], row["partition"]): int(row["committed"])
            for row in rows
            if (row["topic"], row["partition"]) in wanted and row.get("committed") is not None
        }

    def _report(self, consumer: Consumer, writer: SinkWriter, written_before: int) -> None:
        self.status.records = written_before + writer.records
        self.status.detail["partitions"] = len(consumer.assignment)
        self.status.detail.update(writer.describe())

    def _flush(self, consumer: Consumer, writer: SinkWriter, tps: list[TopicPartition]) -> None:
        if not tps:
            return
        positions = writer.stage(tps, lambda tp: tp in consumer.assignment)  # asked again at each use
        if not positions:
            return
        _fault_point("commit")
        refused = self._commit(consumer, positions)
        if refused:
            writer.abandon(refused)
        accepted = [tp for tp in positions if tp not in refused]
        if accepted:
            _fault_point("publish")
            writer.publish(accepted)
        self.status.state, self.status.error = "running", None

    def _commit(self, consumer: Consumer, positions: dict[TopicPartition, int]) -> list[TopicPartition]:
        """Commit ``positions``; the partitions whose commit was refused. (The coordinator refuses a commit
        whole if one partition is stale, so after a refusal each partition is tried alone.) Any other error
        is raised: whether it was committed is unknown, so nothing is published or abandoned, and the
        partition's next ``open`` decides."""
        try:
            consumer.commit(positions)
            return []
        except CommitFailedError as exc:
            if len(positions) == 1:
                self._refused(exc)
                return list(positions)
        refused = []
        for tp, offset in positions.items():
            try:
                consumer.commit({tp: offset})
            except CommitFailedError as exc:
                self._refused(exc)
                refused.append(tp)
        return refused

    def _refused(self, exc: CommitFailedError) -> None:
        # Fenced: the partition moved (or is moving) to another holder, which reads these records again.
        log.warning("%s: commit refused (%s); not published, the next holder resumes", self.status.name, exc.message)
