"""Writing a source task's records into its topic exactly once, across crashes.

Every record carries two headers: ``talos-connector`` (the connector's name) and ``talos-source`` (where
it came from: ``<file>:<byte offset>``, ``<index>/<id>``). A task checkpoints its source positions in
``__connect_offsets`` only after the producer has every record before them acknowledged, together with
``scan_from``: per partition, the offset after the last record it had written then. A crash after a
write and before the next checkpoint re-reads those source records, but first the task reads its topic
from ``scan_from`` to the end and collects the ``talos-source`` ids it finds: the proof that they were
written. Those are skipped (counted as ``skipped``), so each one is in the topic once. Within a run,
the idempotent producer makes resends after timeouts or failover harmless as well.
"""

from __future__ import annotations

import logging
from typing import Any

from connectors.checkpoints import CheckpointStore
from connectors.reading import read_range
from connectors.task import TaskStatus
from talos import Admin, Producer, RecordFuture

__all__ = ["CONNECTOR_HEADER", "SOURCE_HEADER", "SourceWriter"]

log = logging.getLogger("talos.connect")

CONNECTOR_HEADER = "talos-connector"
SOURCE_HEADER = "talos-source"


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

    def recover(self) -> dict[str, dict[str, Any]]:
        """Load the connector's checkpoints (every task's: a task may take over another's files) and
        collect what was written after them. Returns each task's checkpointed source state."""
        self._checkpoints.ensure_topic()
        documents = self._checkpoints.load(self.connector)
        if self.task not in documents:
            # Before writing anything: record where this task's records can start to appear.
            documents[self.task] = {"state": {}, "scan_from": self._high_watermarks()}
            self._checkpoints.save(self.connector, self.task, documents[self.task])
        self._scan_from = {int(p): int(o) for p, o in documents[self.task].get("scan_from", {}).items()}
        starts: dict[int, int] = {}
        for document in documents.values():
            for partition, offset in document.get("scan_from", {}).items():
                starts[int(partition)] = min(int(offset), starts.get(int(partition), int(offset)))
        self._collect_written(starts)
        if self._seen:
            log.info(
                "%s: %d record(s) written after the last checkpoint were found in %s; they are not written again",
                self.status.name,
                len(self._seen),
                self.topic,
            )
        return {task: dict(document.get("state", {})) for task, document in documents.items()}

    def _high_watermarks(self) -> dict[str, int]:
        with Admin(self.url) as admin:
            count = admin.describe_topic(self.topic).partitions
            return {str(p): admin.offsets(self.topic, p)["latest"] for p in range(count)}

    def _collect_written(self, starts: dict[int, int]) -> None:
        connector = self.connector.encode()
        ends = self._high_watermarks()
        for partition, end in ends.items():
            start = starts.get(int(partition), 0)
            for message in read_range(self.url, self.topic, int(partition), start, end):
                if message.header(CONNECTOR_HEADER) == connector:
                    source = message.header(SOURCE_HEADER)
                    if source is not None:
                        self._seen.add(source.decode())

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

    def commit(self, state: dict[str, Any]) -> None:
        """Wait until every queued record is acknowledged, then checkpoint ``state`` (the positions after
        them). Raises if a record could not be written: the task restarts from the last checkpoint."""
        self._producer.flush()
        for future in self._pending:
            stored = future.result(timeout=0)
            self._scan_from[stored.partition] = max(self._scan_from.get(stored.partition, 0), stored.offset + 1)
        self.status.records += len(self._pending)
        self._pending.clear()
        document = {"state": state, "scan_from": {str(p): o for p, o in sorted(self._scan_from.items())}}
        self._checkpoints.save(self.connector, self.task, document)

    def close(self) -> None:
        self._producer.close()
