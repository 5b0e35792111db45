"""What a coordinator writes to ``__consumer_offsets``, and how a new coordinator reads a group back.

Every record's key is the group's name; its value is JSON of one of three kinds:

- ``commit``: offsets a member (or ``reset-offsets``) committed,
- ``group``: the generation, mode, largest session timeout and member count after a membership change,
- ``snapshot``: all of the above at once;
- ``kafka``: the Kafka members of the group after a rebalance completed or the last one left (ids, generation,
  protocol, assignments), kept across snapshots until the next ``kafka`` record.

A group's state is the fold of its records in offset order: a snapshot replaces everything, a commit
updates offsets, a group record the rest.

Offsets committed in a transaction (Kafka's TxnOffsetCommit) are ``commit`` records in a transactional batch
of the producer: *pending* until the transaction's marker lands on the partition. They take effect at their
commit marker, not where they were written (a snapshot written between them and the marker cannot undo
them), and an abort drops them; a plain commit of the same partition written after them wins (Kafka keeps
the later record). :func:`decided_order` is that replay. The topic is compacted by snapshots: a coordinator writes one
when it takes a group over and every ``group_snapshot_interval_s`` while it serves it, and the topic
keeps records for ``OFFSETS_RETENTION_MS``, far longer than that interval. So the newest state of every
group in use is always inside retention, and older records only expire. (Committed offsets of a group
nobody uses for the whole retention expire too, as in Kafka.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import orjson

from server.groups.state import GroupState, OffsetKey
from talos import BatchError, BatchHeader, Record, RecordData, partition_for_key
from talos._control import parse_marker

__all__ = [
    "OFFSETS_RETENTION_MS",
    "OFFSETS_TOPIC",
    "PendingCommit",
    "Recovered",
    "commit_record",
    "commit_offsets",
    "decided_order",
    "fold",
    "group_record",
    "kafka_record",
    "offsets_partition",
    "snapshot_record",
]

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_RETENTION_MS = 7 * 24 * 3600 * 1000


def offsets_partition(group: str, partitions: int) -> int:
    return partition_for_key(group.encode(), partitions)


def _record(group: str, doc: dict[str, object]) -> RecordData:
    return RecordData(orjson.dumps(doc), group.encode())


def _offsets_json(offsets: Iterable[tuple[OffsetKey, int]]) -> list[list[object]]:
    return [[instance, topic, partition, offset] for (instance, topic, partition), offset in offsets]


def commit_record(group: str, offsets: dict[OffsetKey, int]) -> RecordData:
    return _record(group, {"type": "commit", "offsets": _offsets_json(offsets.items())})


def commit_offsets(group: str, key: bytes | None, value: bytes | None) -> dict[OffsetKey, int]:
    """The offsets a ``commit`` record of ``group`` sets (none for any other record)."""
    if key != group.encode() or not value:
        return {}
    try:
        doc = orjson.loads(value)
        if doc.get("type") != "commit":
            return {}
        return {(str(i), str(t), int(p)): int(o) for i, t, p, o in doc["offsets"]}
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):
        return {}


@dataclass
class PendingCommit:
    """A transaction's offset commit not decided yet: where its first batch is in the offsets partition (its
    transaction is decided once the partition's last stable offset passes it), and the offsets."""

    first_offset: int
    offsets: dict[OffsetKey, int] = field(default_factory=dict)

    def supersede(self, keys: Iterable[OffsetKey]) -> None:
        """A plain commit of these written after this one: it wins, whatever the transaction decides."""
        for key in keys:
            self.offsets.pop(key, None)


def decided_order(
    group: str, batches: Iterable[tuple[BatchHeader, list[Record]]]
) -> tuple[list[tuple[bytes | None, bytes | None]], dict[int, PendingCommit]]:
    """The group's records in the order they took effect (a transaction's commits at its commit marker, an
    aborted transaction's never), and the transactions' commits still pending at the end, by producer id.
    ``batches``: the offsets partition's batches in offset order, markers included. Pure."""
    ordered: list[tuple[bytes | None, bytes | None]] = []
    pending: dict[int, PendingCommit] = {}
    for header, records in batches:
        if header.control:
            try:
                marker = parse_marker(header, records)
            except BatchError:
                continue
            decided = pending.pop(marker.producer_id, None)
            if decided is not None and marker.committed and decided.offsets:
                effect = commit_record(group, decided.offsets)
                ordered.append((effect.key, effect.value))
            continue
        if header.transactional:
            for record in records:
                offsets = commit_offsets(group, record.key, record.value)
                if offsets:
                    held = pending.setdefault(header.producer_id, PendingCommit(header.base_offset))
                    held.offsets.update(offsets)
            continue
        for record in records:
            ordered.append((record.key, record.value))
            committed = commit_offsets(group, record.key, record.value)
            for held in pending.values():
                held.supersede(committed)
    return ordered, pending


def _meta(state: GroupState) -> dict[str, object]:
    return {
        "generation": state.generation,
        "mode": state.mode,
        "session_s": state.max_session_s(),
        "members": len(state.members),
    }


def group_record(state: GroupState) -> RecordData:
    return _record(state.name, {"type": "group", **_meta(state)})


def snapshot_record(state: GroupState) -> RecordData:
    doc = {"type": "snapshot", **_meta(state), "offsets": _offsets_json(state.offsets.items()), "kafka": state.kafka}
    return _record(state.name, doc)


def kafka_record(group: str, membership: dict[str, object]) -> RecordData:
    return _record(group, {"type": "kafka", "kafka": membership})


@dataclass
class Recovered:
    generation: int = 0
    mode: str | None = None
    session_s: float = 0.0
    members: int = 0
    offsets: dict[OffsetKey, int] = field(default_factory=dict)
    kafka: dict[str, object] | None = None


def fold(group: str, records: Iterable[tuple[bytes | None, bytes | None]]) -> Recovered:
    """The group's state from ``(key, value)`` records in offset order; records of other groups and
    records this version cannot read are skipped."""
    state = Recovered()
    wanted = group.encode()
    for key, value in records:
        if key != wanted or not value:
            continue
        try:
            doc = orjson.loads(value)
            kind = doc.get("type")
            if kind == "snapshot":
                # (snapshots written before they carried Kafka members leave the last ones recorded)
                state = Recovered(kafka=doc.get("kafka", state.kafka))
            if kind == "kafka" and isinstance(doc.get("kafka"), dict):
                state.kafka = doc["kafka"]
            if kind in ("snapshot", "group"):
                state.generation = int(doc["generation"])
                state.mode = doc.get("mode")
                state.session_s = float(doc.get("session_s", 0.0))
                state.members = int(doc.get("members", 0))
            if kind in ("snapshot", "commit"):
                for instance, topic, partition, offset in doc["offsets"]:
                    state.offsets[(str(instance), str(topic), int(partition))] = int(offset)
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):
            continue
    return state
