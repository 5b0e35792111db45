"""What ``__connect_offsets`` holds, and each server's index of it: (tenant, connector) → every task's newest
checkpoint, so a task's start reads the connector's state instead of the partition's history.

Records (all of a connector's on :func:`partition_of` its name; header ``talos-tenant``: the writing tenant,
none for the admin, so another tenant's connector of the same name is another connector): a task's checkpoint,
key :func:`task_key` (``<connector>/<task>``, a zero byte, the tenant), value the JSON document, or null (the
task is removed). The newest record of a key wins (:func:`apply`, in offset order).

The topic is compacted (``cleanup.policy=compact``, docs/compaction.md): the log itself keeps the newest record
of every (tenant, connector, task) and drops what it superseded, and a removed task's tombstone goes after
``delete.retention.ms``. Until issue 37 it kept records for a week and the owner of each partition rewrote a
snapshot of every connector every ten minutes so that no state fell out of retention; compaction made that
mechanism go. A log written then still folds: its keys ``<connector>/<task>`` (no tenant in the key) and its
snapshot records (key ``<connector>``, header ``talos-connect: snapshot``, value ``{"through": t, "tasks":
{...}}``: the connector's tasks as of the offsets below ``t``, except those with a newer record of their own)
are read as before, and a topic made with retention is switched to compaction by the first maintenance pass.

The index (:class:`ConnectOffsetsIndex`): each server keeps the fold of every partition it was asked about,
and the offset it has read up to. A load first reads from there to the partition's high watermark (through
the owner, as any fetch): a save that returned is durable, hence below that watermark, so a load on any
server sees it, also after the partition moved (the log, and its offsets, are the same). A save this server
served is folded in at once when it is the next offset, and every maintenance pass catches up the indexed
partitions. So a load reads what other servers wrote since this one last looked (at most one maintenance
interval's worth; nothing of its own saves), and only the first load after a start reads the (compacted)
partition.
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
from talos import Record, RecordData, partition_for_key

__all__ = [
    "CONNECT_OFFSETS_TOPIC",
    "PARTITIONS",
    "TENANT_RECORD_HEADER",
    "ConnectOffsetsIndex",
    "ConnectorState",
    "apply",
    "fold",
    "index_of",
    "partition_of",
    "task_key",
    "topic_config",
]

log = logging.getLogger("talos.connect_offsets")

CONNECT_OFFSETS_TOPIC = "__connect_offsets"
PARTITIONS = 8
# Segments roll hourly (and at 16 MiB), so superseded checkpoints are compacted away within hours.
SEGMENT_MS = 3600 * 1000
SEGMENT_BYTES = 16 * 1024 * 1024
TENANT_RECORD_HEADER = "talos-tenant"
KIND_HEADER = "talos-connect"
SNAPSHOT = b"snapshot"
_READ_BYTES = 4 * 1024 * 1024

ConnectorKey = tuple[str | None, str]  # (tenant, connector)


def partition_of(connector: str) -> int:
    return partition_for_key(connector.encode(), PARTITIONS)


def topic_config() -> TopicConfig:
    return TopicConfig(
        CONNECT_OFFSETS_TOPIC,
        PARTITIONS,
        cleanup_policy="compact",
        segment_ms=SEGMENT_MS,
        segment_bytes=SEGMENT_BYTES,
        created_ms=int(time.time() * 1000),
    )


def task_key(tenant: str | None, connector: str, task: str) -> bytes:
    """A checkpoint's record key: one per (tenant, connector, task), as compaction keeps one record per key.
    The tenant goes last, after a zero byte, so a task name holding anything still reads back whole."""
    return f"{connector}/{task}\x00{tenant or ''}".encode()


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
    if "\x00" in task:  # task_key's: the tenant after the last zero byte (the header says it too)
        task = task.rpartition("\x00")[0]
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
                records, after = internal_topics.records_from(fetched.body, cache.next_offset)
                for record in records:  # from the offset now: a save may have been folded in meanwhile
                    apply(cache.connectors, record)
                if after == cache.next_offset:
                    break
                cache.next_offset = after
        return cache

    # ---------------------------------------------------------------- maintenance

    def _owns(self, partition: int) -> bool:
        cluster = self._broker.cluster
        try:
            return self._broker.owns(CONNECT_OFFSETS_TOPIC, partition) and (cluster is None or cluster.registered)
        except ApiError:
            return False  # an empty ring

    async def maintain(self) -> None:
        """Catch up every indexed or owned partition; switch a topic made before compaction to it."""
        try:
            config = self._broker.topic(CONNECT_OFFSETS_TOPIC)
        except ApiError:
            return  # nothing was ever checkpointed
        for partition in range(config.partitions):
            if not self._owns(partition) and partition not in self._partitions:
                continue
            try:
                await self._caught_up(partition, config)
            except Exception as exc:  # the other partitions go on
                log.warning("%s/%d: maintenance failed: %r", CONNECT_OFFSETS_TOPIC, partition, exc)
        if config.cleanup_policy != "compact":
            # Made with a retention (and snapshots) before issue 37: from now on the log keeps the newest
            # record of every task itself. Its snapshots stay readable; none is written any more.
            wanted = topic_config()
            try:
                await self._broker.update_topic(
                    CONNECT_OFFSETS_TOPIC,
                    cleanup_policy="compact",
                    retention_ms=None,
                    segment_ms=wanted.segment_ms,
                    segment_bytes=wanted.segment_bytes,
                )
            except ApiError as exc:
                log.warning("%s: could not switch it to compaction: %s", CONNECT_OFFSETS_TOPIC, exc)
            else:
                log.info("%s: compacted from now on", CONNECT_OFFSETS_TOPIC)


_indexes: weakref.WeakKeyDictionary[Broker, ConnectOffsetsIndex] = weakref.WeakKeyDictionary()


def index_of(broker: Broker) -> ConnectOffsetsIndex:
    """The broker's index (made on first use)."""
    index = _indexes.get(broker)
    if index is None:
        index = _indexes[broker] = ConnectOffsetsIndex(broker)
    return index
