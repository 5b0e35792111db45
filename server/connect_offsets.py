"""What ``__connect_offsets`` holds, and each server's index of it: (tenant, connector) → every task's newest
checkpoint, so a task's start reads the connector's state instead of the partition's history.

Records (all of a connector's on :func:`partition_of` its name; header ``talos-tenant``: the writing tenant,
none for the admin, so another tenant's connector of the same name is another connector):

- a task's checkpoint: key ``<connector>/<task>``, value the JSON document, or null (the task is removed);
- a snapshot: key ``<connector>`` (names hold no ``/``), header ``talos-connect: snapshot``, value
  ``{"through": t, "tasks": {task: document}}``: every task of the connector as of the offsets below ``t``.

The fold, in offset order (:func:`apply`): a task's record sets or removes its task; a snapshot replaces the
connector's tasks, except those whose own record (or tombstone) at ``t`` or later is newer than it: it may
land behind a save its writer had not read yet (forwarded by another server while it was made). A snapshot
whose ``t`` is not past the last folded one's knows nothing newer and is skipped.

Compaction, as ``__consumer_offsets`` does it: the topic keeps records :data:`RETENTION_MS`, and the owner of
each partition rewrites a snapshot of every connector that has tasks once its newest snapshot (or, before
any, its oldest record) is ``connect_offsets_snapshot_interval_s`` old. It does so in each maintenance pass,
before the pass enforces retention, so a connector's state is always inside retention and older records
only expire. A connector whose tasks are all removed gets no more snapshots: its records expire.

The index (:class:`ConnectOffsetsIndex`): each server keeps the fold of every partition it was asked about,
and the offset it has read up to. A load first reads from there to the partition's high watermark (through
the owner, as any fetch): a save that returned is durable, hence below that watermark, so a load on any
server sees it, also after the partition moved (the log, and its offsets, are the same). A save this server
served is folded in at once when it is the next offset, and every maintenance pass catches up the indexed
partitions. So a load reads what other servers wrote since this one last looked (at most one maintenance
interval's worth; nothing of its own saves), and only the first load after a start, or after retention
passed the index by, reads the retained partition.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from server import internal_topics
from server.broker import Broker
from server.errors import ApiError
from server.messaging.caller import SERVERS
from server.messaging.fetch import fetch_batches
from server.topics import TopicConfig
from talos import Record, RecordData, decode_records, iter_batches, partition_for_key

__all__ = [
    "CONNECT_OFFSETS_TOPIC",
    "PARTITIONS",
    "RETENTION_MS",
    "TENANT_RECORD_HEADER",
    "ConnectOffsetsIndex",
    "ConnectorState",
    "apply",
    "fold",
    "index_of",
    "partition_of",
    "snapshot_record",
    "topic_config",
]

log = logging.getLogger("talos.connect_offsets")

CONNECT_OFFSETS_TOPIC = "__connect_offsets"
PARTITIONS = 8
# As __consumer_offsets: far longer than the snapshot interval (minutes), so a connector's state survives a
# week without an owner maintaining its partition, and a rebuild reads at most a week of checkpoints.
RETENTION_MS = 7 * 24 * 3600 * 1000
TENANT_RECORD_HEADER = "talos-tenant"
KIND_HEADER = "talos-connect"
SNAPSHOT = b"snapshot"
_READ_BYTES = 4 * 1024 * 1024
_SNAPSHOT_BATCH_BYTES = 1024 * 1024  # snapshots appended together up to about this much

ConnectorKey = tuple[str | None, str]  # (tenant, connector)


def partition_of(connector: str) -> int:
    return partition_for_key(connector.encode(), PARTITIONS)


def topic_config() -> TopicConfig:
    return TopicConfig(CONNECT_OFFSETS_TOPIC, PARTITIONS, retention_ms=RETENTION_MS, created_ms=int(time.time() * 1000))


@dataclass
class ConnectorState:
    """One connector's tasks as folded so far."""

    tasks: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)  # task → (offset, document)
    removed: dict[str, int] = field(default_factory=dict)  # task → its tombstone's offset, until a snapshot covers it
    snapshot_ms: int = 0  # when its newest snapshot was written (before any: its oldest record)
    through: int = -1  # the newest snapshot's ``through``

    def documents(self) -> dict[str, dict[str, Any]]:
        return {task: document for task, (_offset, document) in self.tasks.items()}


def _tenant(record: Record) -> str | None:
    raw = dict(record.headers).get(TENANT_RECORD_HEADER)
    return None if raw is None else raw.decode(errors="replace")


def apply(connectors: dict[ConnectorKey, ConnectorState], record: Record) -> None:
    """Fold one record (the next in offset order) into ``connectors``; records it cannot read change nothing."""
    if record.key is None:
        return
    connector, slash, task = record.key.decode(errors="replace").partition("/")
    key = (_tenant(record), connector)
    if slash:
        _apply_task(connectors, key, task, record)
    elif dict(record.headers).get(KIND_HEADER) == SNAPSHOT:
        _apply_snapshot(connectors, key, record)


def _apply_task(connectors: dict[ConnectorKey, ConnectorState], key: ConnectorKey, task: str, record: Record) -> None:
    document: object = None
    if record.value is not None:
        try:
            document = orjson.loads(record.value)
        except orjson.JSONDecodeError:
            return
    state = connectors.get(key)
    if state is None:
        state = connectors[key] = ConnectorState(snapshot_ms=record.timestamp)
    if isinstance(document, dict):
        state.tasks[task] = (record.offset, document)
        state.removed.pop(task, None)
    else:  # null, or JSON that is no checkpoint: the task has none
        state.tasks.pop(task, None)
        state.removed[task] = record.offset


def _apply_snapshot(connectors: dict[ConnectorKey, ConnectorState], key: ConnectorKey, record: Record) -> None:
    try:
        doc = orjson.loads(record.value or b"")
        through = int(doc["through"])
        tasks = {str(task): document for task, document in doc["tasks"].items() if isinstance(document, dict)}
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):
        return
    old = connectors.get(key) or ConnectorState()
    if through <= old.through:
        return  # it knew less than a snapshot already folded (written late, by a server that lost the partition)
    # What the snapshot's writer knew is as of ``through``: its documents count as written just before it.
    state = ConnectorState(
        {task: (through - 1, document) for task, document in tasks.items()}, {}, record.timestamp, through
    )
    for task, (offset, document) in old.tasks.items():
        if offset >= through:
            state.tasks[task] = (offset, document)
    for task, offset in old.removed.items():
        if offset >= through:
            state.tasks.pop(task, None)
            state.removed[task] = offset
    connectors[key] = state  # kept even when empty: its ``through`` still turns late snapshots away


def fold(records: Iterable[Record]) -> dict[ConnectorKey, ConnectorState]:
    """Every connector's state from records in offset order."""
    connectors: dict[ConnectorKey, ConnectorState] = {}
    for record in records:
        apply(connectors, record)
    return connectors


def snapshot_record(tenant: str | None, connector: str, through: int, tasks: dict[str, dict[str, Any]]) -> RecordData:
    headers: list[tuple[str, bytes | None]] = [(KIND_HEADER, SNAPSHOT)]
    if tenant is not None:
        headers.append((TENANT_RECORD_HEADER, tenant.encode()))
    return RecordData(orjson.dumps({"through": through, "tasks": tasks}), connector.encode(), headers)


@dataclass
class _Partition:
    """One partition's fold, up to (not including) ``next_offset``, of the topic created at ``created_ms``."""

    created_ms: int
    connectors: dict[ConnectorKey, ConnectorState] = field(default_factory=dict)
    next_offset: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one reader catching up at a time

    def restart(self, offset: int) -> None:
        self.connectors = {}
        self.next_offset = offset


class ConnectOffsetsIndex:
    """A server's index of ``__connect_offsets`` (see the module's docstring); one per broker: :func:`index_of`."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._partitions: dict[int, _Partition] = {}

    async def load(self, tenant: str | None, connector: str) -> dict[str, dict[str, Any]]:
        """Every task's newest checkpoint of ``tenant``'s ``connector``, including every save that returned."""
        try:
            config = self._broker.topic(CONNECT_OFFSETS_TOPIC)
        except ApiError as exc:
            if exc.status == 404:
                return {}  # nothing was ever checkpointed
            raise
        cache = await self._caught_up(partition_of(connector), config)
        state = cache.connectors.get((tenant, connector))
        return {} if state is None else state.documents()

    def written(self, partition: int, base: int, records: list[RecordData]) -> None:
        """Fold in records this server just wrote as one batch (at offset ``base``), if they are next."""
        cache = self._partitions.get(partition)
        if cache is None or base < 0 or base != cache.next_offset:
            return  # not indexed yet, or others wrote in between: the next catch-up reads them
        now_ms = int(time.time() * 1000)
        for position, data in enumerate(records):
            apply(cache.connectors, Record(base + position, now_ms, data.key, data.value, tuple(data.headers)))
        cache.next_offset = base + len(records)

    async def _caught_up(self, partition: int, config: TopicConfig) -> _Partition:
        cache = self._partitions.get(partition)
        if cache is None or cache.created_ms != config.created_ms:  # first use, or the topic was made anew
            cache = self._partitions[partition] = _Partition(config.created_ms)
        async with cache.lock:
            start, end = await internal_topics.bounds(self._broker, CONNECT_OFFSETS_TOPIC, partition)
            if not start <= cache.next_offset <= end:
                # Retention removed records not read yet (or the log is not the one indexed): fold what is left.
                cache.restart(start)
            while cache.next_offset < end:
                try:
                    fetched = await fetch_batches(
                        self._broker, SERVERS, CONNECT_OFFSETS_TOPIC, partition, cache.next_offset, _READ_BYTES
                    )
                except ApiError as exc:
                    if exc.status != 416:
                        raise  # the owner's error
                    # Retention passed us as we read.
                    start, end = await internal_topics.bounds(self._broker, CONNECT_OFFSETS_TOPIC, partition)
                    cache.restart(start)
                    continue
                data = fetched.body
                before = cache.next_offset
                for position, _header in iter_batches(data, verify=True):
                    for record in decode_records(data, position, verify=False):
                        if record.offset >= cache.next_offset:  # a save may have been folded in meanwhile
                            apply(cache.connectors, record)
                            cache.next_offset = record.offset + 1
                if cache.next_offset == before:
                    break
        return cache

    # ---------------------------------------------------------------- maintenance

    def _owns(self, partition: int) -> bool:
        cluster = self._broker.cluster
        try:
            return self._broker.owns(CONNECT_OFFSETS_TOPIC, partition) and (cluster is None or cluster.registered)
        except ApiError:
            return False  # an empty ring

    async def maintain(self) -> None:
        """Catch up every indexed or owned partition, and write the snapshots that are due in the owned ones.
        Run it before the broker enforces retention: an old connector is snapshotted before its records go."""
        try:
            config = self._broker.topic(CONNECT_OFFSETS_TOPIC)
        except ApiError:
            return  # nothing was ever checkpointed
        interval_ms = int(self._broker.config.connect_offsets_snapshot_interval_s * 1000)
        complete = True
        for partition in range(config.partitions):
            owned = self._owns(partition)
            if not owned and partition not in self._partitions:
                continue
            try:
                cache = await self._caught_up(partition, config)
                if owned:
                    await self._snapshot(partition, cache, interval_ms)
            except Exception as exc:  # the other partitions, and the broker's retention pass, go on
                complete = False
                log.warning("%s/%d: maintenance failed: %r", CONNECT_OFFSETS_TOPIC, partition, exc)
        if config.retention_ms is None and complete:
            # Made before it had a retention: owned partitions are snapshotted now, and every other owner
            # snapshots its own in its pass before retention runs there.
            try:
                await self._broker.update_topic(CONNECT_OFFSETS_TOPIC, retention_ms=RETENTION_MS)
            except ApiError as exc:
                log.warning("%s: could not set its retention: %s", CONNECT_OFFSETS_TOPIC, exc)
            else:
                log.info("%s: records now kept %d ms", CONNECT_OFFSETS_TOPIC, RETENTION_MS)

    async def _snapshot(self, partition: int, cache: _Partition, interval_ms: int) -> None:
        now_ms = int(time.time() * 1000)
        through = cache.next_offset
        due = [
            (key, state)
            for key, state in cache.connectors.items()
            if state.tasks and now_ms - state.snapshot_ms >= interval_ms
        ]
        records = [snapshot_record(tenant, name, through, state.documents()) for (tenant, name), state in due]
        for _key, state in due:
            state.snapshot_ms = now_ms  # not due again next pass, even if the catch-up reads them later
        batches: list[list[RecordData]] = []
        size = 0
        for record in records:
            if not batches or size + len(record.value or b"") > _SNAPSHOT_BATCH_BYTES:
                batches.append([])
                size = 0
            batches[-1].append(record)
            size += len(record.value or b"")
        for batch in batches:
            offset = await internal_topics.append(self._broker, CONNECT_OFFSETS_TOPIC, partition, batch)
            self.written(partition, offset, batch)
        if due:
            log.info("%s/%d: %d connectors snapshotted", CONNECT_OFFSETS_TOPIC, partition, len(due))


_indexes: weakref.WeakKeyDictionary[Broker, ConnectOffsetsIndex] = weakref.WeakKeyDictionary()


def index_of(broker: Broker) -> ConnectOffsetsIndex:
    """The broker's index (made on first use)."""
    index = _indexes.get(broker)
    if index is None:
        index = _indexes[broker] = ConnectOffsetsIndex(broker)
    return index
