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

Zombies are fenced, the way Kafka Connect fences its exactly-once source tasks. Each task is a *named
producer* ``connect/<connector>/<task>``: one producer id, a new epoch at every start. Before it reads its
checkpoints, a starting task claims the name with a lease (renewed by a thread while it runs; a second
runner of the same connector waits in state ``standby`` until the lease is released or lapses), then fences
every partition of its topic and the connector's checkpoints. The fence answers only when everything the
previous instance got acknowledged is readable, and from then on its writes and its checkpoints are refused
(``PRODUCER_FENCED``): a paused or half-dead runner that wakes up later writes nothing. So the recovery scan
sees every record of the previous instance, however late the server appended it, and nothing is written twice.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from connectors.checkpoints import CheckpointStore
from connectors.config import ConnectorConfig
from connectors.reading import read_range
from connectors.task import Stopped, TaskStatus
from talos import (
    Admin,
    ConflictError,
    Message,
    Producer,
    ProducerFencedError,
    ProducerIdentity,
    RecordFuture,
    TalosError,
)

__all__ = ["CONNECTOR_HEADER", "SOURCE_HEADER", "SourceWriter"]

log = logging.getLogger("talos.connect")

CONNECTOR_HEADER = "talos-connector"
SOURCE_HEADER = "talos-source"
CHECKPOINT_IDLE_S = 60.0  # an idle task checkpoints this often (and moves scan_from to the high watermarks)
DEFAULT_LEASE_S = 10.0


def producer_name(connector: str, task: str) -> str:
    """The named producer of one source task: its writes and checkpoints are fenced by this name."""
    return f"connect/{connector}/{task}"


class _Lease:
    """The task's claim on its producer name, renewed by a thread until released; :attr:`lost` is set when a
    renewal learns that another instance took it over (its next write would be refused anyway)."""

    def __init__(self, url: str, name: str, identity: ProducerIdentity, lease_s: float) -> None:
        self.admin = Admin(url)  # its own: the task's thread uses the writer's meanwhile
        self.name = name
        self.identity = identity
        self.lease_s = lease_s
        self.lost: ProducerFencedError | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name=f"lease {name}", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            try:
                self.admin.renew_producer(self.name, self.identity, lease_s=self.lease_s)
            except ProducerFencedError as exc:
                self.lost = exc
                return
            except TalosError as exc:  # unreachable for now: the writes will tell if someone took over
                log.warning("%s: cannot renew the lease: %s", self.name, exc)

    def close(self, *, release: bool) -> None:
        self._stop.set()
        self._thread.join()
        try:
            if release and self.lost is None:
                self.admin.renew_producer(self.name, self.identity, lease_s=0)
        except TalosError as exc:
            log.info("%s: lease not released (%s); it lapses by itself", self.name, exc)
        finally:
            self.admin.close()


class SourceWriter:
    def __init__(
        self,
        *,
        url: str,
        topic: str,
        connector: str,
        task: int,
        checkpoints: CheckpointStore,
        status: TaskStatus,
        lease_s: float = DEFAULT_LEASE_S,
        stop: threading.Event | None = None,
        tasks: int | None = None,
    ) -> None:
        self.url = url
        self.topic = topic
        self.connector = connector
        self.task = str(task)
        self.status = status
        self._checkpoints = checkpoints
        self._lease_s = lease_s
        self._stop = stop or threading.Event()
        self._admin = Admin(url)
        self._lease: _Lease | None = None
        self._producer: Producer | None = None
        self._tasks = tasks  # the connector's task count (None: not known, nothing is retired)
        self._retiring: set[str] = set()  # checkpoints of tasks a smaller ``tasks`` removed
        self._pending: list[RecordFuture] = []
        self._scan_from: dict[int, int] = {}
        self._seen: set[str] = set()
        self._found: dict[str, Message] = {}  # what the recovery scan found, headers only
        self._unmet: dict[str, tuple[int, int]] = {}  # found by the recovery scan, not met again: (partition, offset)
        self._last_commit = time.monotonic()
        self._last_watermarks = 0.0

    @classmethod
    def for_task(
        cls,
        connector: ConnectorConfig,
        status: TaskStatus,
        *,
        url: str,
        checkpoints: CheckpointStore,
        stop: threading.Event | None = None,
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
            lease_s=float(getattr(connector.settings, "lease_s", DEFAULT_LEASE_S)),
            stop=stop,
            tasks=connector.tasks,
        )

    def _claim(self) -> ProducerIdentity:
        """This task's producer at a new epoch, once no other live instance holds it (``standby`` meanwhile)."""
        name = producer_name(self.connector, self.task)
        waiting = False
        while True:
            try:
                identity = self._admin.claim_producer(name, lease_s=self._lease_s)
            except ConflictError as exc:
                if exc.code != "PRODUCER_BUSY":
                    raise
                if not waiting:
                    log.info("%s: another runner holds this task; standing by until it stops", self.status.name)
                    waiting = True
                self.status.state = "standby"
                if self._stop.wait(min(max(exc.retry_after or 1.0, 0.1), self._lease_s)):
                    raise Stopped() from None
                continue
            if waiting:
                log.info("%s: taking over", self.status.name)
            self.status.state = "running"
            self._lease = _Lease(self.url, name, identity, self._lease_s)
            return identity

    def _check_lease(self) -> None:
        if self._lease is not None and self._lease.lost is not None:
            raise self._lease.lost

    def recover(self) -> dict[str, dict[str, Any]]:
        """Load the connector's checkpoints (every task's: a task may take over another's files) and
        collect what was written after them. Returns each task's checkpointed state; then call
        :meth:`expect`."""
        identity = self._claim()
        # From here on the previous instance can neither write nor checkpoint, and what it did is readable.
        self._admin.fence_topic(self.topic, identity)
        self._admin.fence_connector(self.connector, identity)
        self._producer = Producer(self.url, producer_id=identity.producer_id, producer_epoch=identity.producer_epoch)
        documents = self._checkpoints.load(self.connector)
        if self.task not in documents:
            # Before writing anything: record where this task's records can start to appear.
            documents[self.task] = {"state": {}, "scan_from": self._high_watermarks()}
            self._save(documents[self.task])
        if self.task == "0" and self._tasks is not None:
            self._retiring = set(documents) - {str(task) for task in range(self._tasks)}
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
        assert self._producer is not None, "recover() first"
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
        them). Raises if a record could not be written: the task restarts from the last checkpoint; raises
        :class:`ProducerFencedError` if another instance took the task over."""
        self._check_lease()
        assert self._producer is not None, "recover() first"
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
        if self._tasks is not None:
            document["tasks"] = self._tasks  # this task's state now holds what it took over from removed ones
        self._save(document)
        if self._retiring:
            self._retire()
        self._last_commit = time.monotonic()
        self.status.state, self.status.error = "running", None

    def idle(self, state: dict[str, Any]) -> None:
        """Called when the source has nothing new: checkpoint now and then anyway, so ``scan_from`` keeps
        up with the topic (a restart then reads little of it)."""
        self._check_lease()
        if time.monotonic() - self._last_commit >= CHECKPOINT_IDLE_S:
            self.commit(state)

    def _retire(self) -> None:
        """Task 0 removes the checkpoints of tasks a smaller ``tasks`` removed, once every remaining task has
        checkpointed under the new count (each then holds the positions it took over, and its own
        ``scan_from`` stays before what the recovery scan found for it): then nothing needs them, and their
        old ``scan_from`` stops making every recovery scan start there."""
        documents = self._checkpoints.load(self.connector)
        if any(documents.get(str(task), {}).get("tasks") != self._tasks for task in range(self._tasks or 0)):
            return
        for task in sorted(self._retiring):
            self._save(None, task=task)
            log.info("%s: retired the checkpoint of removed task %s", self.status.name, task)
        self._retiring.clear()

    def _save(self, document: dict[str, Any] | None, *, task: str | None = None) -> None:
        producer = None if self._lease is None else self._lease.identity
        self._checkpoints.save(self.connector, task or self.task, document, producer=producer)

    def close(self, *, release: bool = True) -> None:
        """Stop writing; ``release``: let a standby runner take over at once (a crash leaves the lease to
        lapse)."""
        try:
            if self._producer is not None:
                self._producer.close()
        finally:
            if self._lease is not None:
                self._lease.close(release=release)
            self._admin.close()
