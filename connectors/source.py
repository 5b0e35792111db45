"""Writing a source task's records into its topic exactly once, across crashes.

Every record carries two headers: ``talos-connector`` (the connector's name) and ``talos-source`` (where
it came from: ``<file>#<file id>:<byte offset>``, ``<index>/<id>``). A task checkpoints its source
positions (through the servers' connector offsets API) only after the producer has every record before
them acknowledged, together with ``scan_from``: per partition, an offset before which none of its records can lack a
checkpoint. A crash after a write and before the next checkpoint re-reads those source records, but
first the task reads its topic from ``scan_from`` to the end and collects the ``talos-source`` ids it
finds: the proof that they were written. Those are skipped (counted as ``skipped``), so each one is in
the topic once. Within a run, the idempotent producer makes resends after timeouts or failover harmless.

``scan_from`` moves forward at each checkpoint (past what was acknowledged, and past every partition's
high watermark now and then: nothing is in flight at a checkpoint), but never past a record the last
recovery found and the task has not met again yet, so a second crash before that still finds it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from connectors.checkpoints import CheckpointStore
from connectors.config import ConnectorConfig
from connectors.reading import read_range
from connectors.task import TaskStatus
from talos import Admin, Message, Producer, RecordFuture

__all__ = ["CONNECTOR_HEADER", "SOURCE_HEADER", "SourceWriter"]

log = logging.getLogger("talos.connect")

CONNECTOR_HEADER = "talos-connector"
SOURCE_HEADER = "talos-source"
CHECKPOINT_IDLE_S = 60.0  # an idle task checkpoints this often (and moves scan_from to the high watermarks)
# After a crash, how long to wait before the recovery scan: a produce request the dead process had sent may
# still be appended by the server after it died, and the scan must see it.
SETTLE_S = 3.0


class SourceWriter:
    def __init__(
        self, *, url: str, topic: str, connector: str, task: int, checkpoints: CheckpointStore, status: TaskStatus
    ) -> None:
        self.url = url
        self.topic = topic
        self.connector = connector
        self.task = str(task)
        self.status = status
        self._checkpoints = checkpoints
        self._producer = Producer(url, idempotent=True)
        self._pending: list[RecordFuture] = []
        self._scan_from: dict[int, int] = {}
        self._seen: set[str] = set()
        self._found: dict[str, Message] = {}  # what the recovery scan found, headers only
        self._unmet: dict[str, tuple[int, int]] = {}  # found by the recovery scan, not met again: (partition, offset)
        self._last_commit = time.monotonic()
        self._last_watermarks = 0.0

    @classmethod
    def for_task(
        cls, connector: ConnectorConfig, status: TaskStatus, *, url: str, checkpoints: CheckpointStore
    ) -> SourceWriter:
        """The writer of task ``status.task`` of a source connector."""
        assert connector.topic is not None
        return cls(
            url=url,
            topic=connector.topic,
            connector=connector.name,
            task=status.task,
            checkpoints=checkpoints,
            status=status,
        )

    def recover(self) -> dict[str, dict[str, Any]]:
        """Load the connector's checkpoints (every task's: a task may take over another's files) and
        collect what was written after them. Returns each task's checkpointed state; then call
        :meth:`expect`."""
        documents = self._checkpoints.load(self.connector)
        if self.task not in documents:
            # Before writing anything: record where this task's records can start to appear.
            documents[self.task] = {"state": {}, "scan_from": self._high_watermarks()}
            self._checkpoints.save(self.connector, self.task, documents[self.task])
        elif not documents[self.task].get("clean"):
            log.info("%s: the last run did not stop cleanly; letting its last writes land", self.status.name)
            time.sleep(SETTLE_S)
        self._scan_from = {int(p): int(o) for p, o in documents[self.task].get("scan_from", {}).items()}
        starts: dict[int, int] = {}
        for document in documents.values():
            for partition, offset in document.get("scan_from", {}).items():
                starts[int(partition)] = min(int(offset), starts.get(int(partition), int(offset)))
        self._collect_written(starts)
        return {task: dict(document.get("state", {})) for task, document in documents.items()}

    def expect(self, mine: Callable[[Message], bool]) -> None:
        """Which of the records found after the checkpoints this task will read again from its source (they
        are past its checkpointed positions): until it has, ``scan_from`` stays before them."""
        self._unmet = {
            source: (message.partition, message.offset) for source, message in self._found.items() if mine(message)
        }
        self._found.clear()
        if self._seen:
            log.info(
                "%s: %d record(s) of %s found in %s after the checkpoints; %d of them are this task's to skip",
                self.status.name,
                len(self._seen),
                self.connector,
                self.topic,
                len(self._unmet),
            )

    def _high_watermarks(self) -> dict[str, int]:
        with Admin(self.url) as admin:
            count = admin.describe_topic(self.topic).partitions
            return {str(p): admin.offsets(self.topic, p)["latest"] for p in range(count)}

    def _collect_written(self, starts: dict[int, int]) -> None:
        connector = self.connector.encode()
        for partition, end in self._high_watermarks().items():
            start = starts.get(int(partition), 0)
            for message in read_range(self.url, self.topic, int(partition), start, end):
                source = message.header(SOURCE_HEADER)
                if message.header(CONNECTOR_HEADER) != connector or source is None:
                    continue
                self._seen.add(source.decode())
                self._found[source.decode()] = dataclasses.replace(message, key=None, value=None)

    def send(
        self,
        source: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: dict[str, bytes | str | None] | None = None,
        timestamp: int | None = None,
    ) -> bool:
        """Queue one record from position ``source``; False if it is in the topic already."""
        if source in self._seen:
            self._unmet.pop(source, None)
            self.status.skipped += 1
            return False
        future = self._producer.send(
            self.topic,
            value,
            key=key,
            headers={**(headers or {}), CONNECTOR_HEADER: self.connector, SOURCE_HEADER: source},
            timestamp=timestamp,
        )
        self._pending.append(future)
        return True

    def commit(self, state: dict[str, Any], *, clean: bool = False) -> None:
        """Wait until every queued record is acknowledged, then checkpoint ``state`` (the positions after
        them). Raises if a record could not be written: the task restarts from the last checkpoint.
        ``clean``: the task's last checkpoint before a graceful stop (the next start need not wait)."""
        self._producer.flush()
        reached = dict(self._scan_from)
        for future in self._pending:
            stored = future.result(timeout=0)
            reached[stored.partition] = max(reached.get(stored.partition, 0), stored.offset + 1)
        if time.monotonic() - self._last_watermarks >= CHECKPOINT_IDLE_S:
            # Nothing of ours is in flight: nothing of ours can appear below the high watermarks any more.
            for name, latest in self._high_watermarks().items():
                reached[int(name)] = max(reached.get(int(name), 0), latest)
            self._last_watermarks = time.monotonic()
        for partition, offset in reached.items():
            unmet = [o for p, o in self._unmet.values() if p == partition]
            limit = min(unmet) if unmet else offset
            self._scan_from[partition] = max(self._scan_from.get(partition, 0), min(offset, limit))
        self.status.records += len(self._pending)
        self._pending.clear()
        document: dict[str, Any] = {
            "state": state,
            "scan_from": {str(p): o for p, o in sorted(self._scan_from.items())},
        }
        if clean:
            document["clean"] = True
        self._checkpoints.save(self.connector, self.task, document)
        self._last_commit = time.monotonic()
        self.status.state, self.status.error = "running", None

    def idle(self, state: dict[str, Any]) -> None:
        """Called when the source has nothing new: checkpoint now and then anyway, so ``scan_from`` keeps
        up with the topic (a restart then reads little of it)."""
        if time.monotonic() - self._last_commit >= CHECKPOINT_IDLE_S:
            self.commit(state)

    def close(self) -> None:
        self._producer.close()
