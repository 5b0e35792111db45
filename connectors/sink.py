"""Sink tasks: members of the consumer group ``connect-<connector>`` that carry records to a target.

Each of a connector's tasks is one group member, so the connector's partitions are shared among its
tasks (and among runners, if several run the same file) under the group's time-limited locks. A task
buffers what it reads per partition, and when the target says a partition is due (size, time) it writes
the buffer there, and only then commits the offsets after it. A crash therefore redelivers what was
written but not committed; each target makes that replay harmless in its own way (HDFS: the files' names
say which offsets they hold; Elasticsearch: the documents' ids are the records' offsets).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from connectors.config import ConnectorConfig
from connectors.task import TaskStatus
from talos import CommitFailedError, Consumer, Message

__all__ = ["SinkTask", "SinkWriter", "TopicPartition", "group_name"]

log = logging.getLogger("talos.connect")

TopicPartition = tuple[str, int]
FETCH_BYTES = 4 * 1024 * 1024  # per fetch: sinks read in bulk (the consumer default is 1 MiB)


def group_name(connector: str) -> str:
    return f"connect-{connector}"


class SinkWriter(Protocol):
    """A target, as one sink task sees it."""

    records: int  # written since the writer was made

    def open(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The task now holds ``tps``: where the target says each must resume (if it knows better than the
        committed offset, as HDFS file names do)."""
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

    def flush(self, tps: list[TopicPartition], holds: Callable[[TopicPartition], bool]) -> dict[TopicPartition, int]:
        """Write the buffers of ``tps`` that the task still ``holds`` (the others stay buffered: a lock that
        only looks expired until a late heartbeat answer renews it must not lose them); the next offset of
        each written partition, to commit. Raises if the target cannot be written (nothing is committed)."""
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
        settings = self.connector.settings
        writer = self._make_writer()
        written_before = self.status.records
        consumer: Consumer | None = None

        def assigned(tps: list[TopicPartition]) -> None:
            assert consumer is not None
            for (topic, partition), offset in writer.open(tps).items():
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

    def _report(self, consumer: Consumer, writer: SinkWriter, written_before: int) -> None:
        self.status.records = written_before + writer.records
        self.status.detail["partitions"] = len(consumer.assignment)
        self.status.detail.update(writer.describe())

    def _flush(self, consumer: Consumer, writer: SinkWriter, tps: list[TopicPartition]) -> None:
        if not tps:
            return
        positions = writer.flush(tps, lambda tp: tp in consumer.assignment)  # asked again at each use
        if not positions:
            return
        try:
            consumer.commit(positions)
        except CommitFailedError as exc:
            # Written, but the partition moved meanwhile: its next holder writes the same records again,
            # and the target recognises them (file names, document ids).
            log.warning("%s: commit refused (%s); the next holder resumes", self.status.name, exc.message)
        self.status.state, self.status.error = "running", None
