"""What ``__transaction_state`` holds: one record per state change of a transactional id, and the fold that
gives a coordinator every id's state back when it takes a partition over.

Records (all of one id on :func:`partition_of` it): key :func:`~server.partition.producer_ids.name_key` of
(tenant, transactional id), the same key that names a producer of that name everywhere else, so another
tenant's id of the same name is another id; value the JSON of :class:`~server.transactions.state.TxnMetadata`
with a version ``"v": 1``, or null (the id expired). The newest record of a key wins (:func:`fold`, in offset
order). Kafka's binary layout (notes/38 §4.4) is not used: the topic is internal, and JSON lets a later version
add fields that this one ignores.

The topic is compacted (``cleanup.policy=compact``, docs/compaction.md): the log keeps the newest record of
every id and drops the states it superseded, and an expired id's tombstone goes after ``delete.retention.ms``.
``last_producer_epoch`` is not stored (nor is it by Kafka): a state read back has -1, so after a coordinator
moves, a KIP-360 retry of a resume that already succeeded is fenced, as it is in Kafka.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any, Final

import orjson

from server.partition.producer_ids import name_key
from server.topics import TopicConfig
from server.transactions.state import TxnMetadata, TxnStatus
from talos import partition_for_key

__all__ = [
    "PARTITIONS",
    "TRANSACTION_STATE_TOPIC",
    "VERSION",
    "decode",
    "fold",
    "key_of",
    "partition_of",
    "state_record",
    "tombstone",
    "topic_config",
]

log = logging.getLogger("talos.transactions")

TRANSACTION_STATE_TOPIC: Final = "__transaction_state"
PARTITIONS: Final = 8  # fixed once the topic exists: an id's records must stay on one partition
# Segments roll hourly (and at 16 MiB), so superseded states are compacted away within hours.
SEGMENT_MS: Final = 3600 * 1000
SEGMENT_BYTES: Final = 16 * 1024 * 1024
VERSION: Final = 1


def key_of(tenant: str | None, transactional_id: str) -> bytes:
    """A transactional id's record key: one per (tenant, id), as compaction keeps one record per key."""
    return name_key(tenant, transactional_id).encode()


def partition_of(tenant: str | None, transactional_id: str, partitions: int = PARTITIONS) -> int:
    """The partition of ``__transaction_state`` that holds the id, hence whose owner coordinates it: the
    groups' key → partition function over the record key, the same on every server and process."""
    return partition_for_key(key_of(tenant, transactional_id), partitions)


def topic_config(partitions: int = PARTITIONS, *, created_ms: int | None = None) -> TopicConfig:
    """How the servers create the topic on first use."""
    return TopicConfig(
        TRANSACTION_STATE_TOPIC,
        partitions,
        cleanup_policy="compact",
        segment_ms=SEGMENT_MS,
        segment_bytes=SEGMENT_BYTES,
        created_ms=int(time.time() * 1000) if created_ms is None else created_ms,
    )


def state_record(metadata: TxnMetadata) -> tuple[bytes, bytes]:
    """(key, value) of the record that persists ``metadata``."""
    document = {
        "v": VERSION,
        "transactional_id": metadata.transactional_id,
        "tenant": metadata.tenant,
        "producer_id": metadata.producer_id,
        "producer_epoch": metadata.producer_epoch,
        "previous_producer_id": metadata.previous_producer_id,
        "next_producer_id": metadata.next_producer_id,
        "timeout_ms": metadata.timeout_ms,
        "status": metadata.status.value,
        "partitions": sorted(metadata.partitions),
        "start_ms": metadata.start_ms,
        "updated_ms": metadata.updated_ms,
        "bumped": metadata.bumped,
        "lease_epoch": metadata.lease_epoch,
        "lease_until_ms": metadata.lease_until_ms,
    }
    return key_of(metadata.tenant, metadata.transactional_id), orjson.dumps(document)


def tombstone(tenant: str | None, transactional_id: str) -> tuple[bytes, None]:
    """(key, None): the id expired; the fold forgets it and compaction eventually drops its records."""
    return key_of(tenant, transactional_id), None


def _int(document: dict[str, Any], field: str) -> int:
    value = document[field]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{field} is not an integer: {value!r}")
    return value


def _optional_str(value: object, field: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{field} is not a string: {value!r}")
    return value


def decode(key: bytes | None, value: bytes | None) -> tuple[str, TxnMetadata | None]:
    """(key, state) of one record; the state None for a tombstone. ValueError for a record this version
    cannot read: no key, not JSON, another version, a field missing or of the wrong type, or a key that is not
    its id's."""
    if key is None:
        raise ValueError("a record without a key")
    text = key.decode("ascii", errors="replace")
    if value is None:
        return text, None
    try:
        document = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    if document.get("v") != VERSION:
        raise ValueError(f"version {document.get('v')!r}, this server reads {VERSION}")
    try:
        transactional_id = document["transactional_id"]
        if not isinstance(transactional_id, str):
            raise ValueError(f"transactional_id is not a string: {transactional_id!r}")
        tenant = _optional_str(document.get("tenant"), "tenant")
        partitions = document["partitions"]
        if not isinstance(partitions, list):
            raise ValueError(f"partitions is not a list: {partitions!r}")
        pairs: set[tuple[str, int]] = set()
        for pair in partitions:
            if (
                not isinstance(pair, list)
                or len(pair) != 2
                or not isinstance(pair[0], str)
                or not isinstance(pair[1], int)
                or isinstance(pair[1], bool)
            ):
                raise ValueError(f"not a (topic, partition): {pair!r}")
            pairs.add((pair[0], pair[1]))
        bumped = document.get("bumped", False)
        if not isinstance(bumped, bool):
            raise ValueError(f"bumped is not a boolean: {bumped!r}")
        metadata = TxnMetadata(
            transactional_id=transactional_id,
            tenant=tenant,
            producer_id=_int(document, "producer_id"),
            producer_epoch=_int(document, "producer_epoch"),
            last_producer_epoch=-1,  # not stored: see the module's docstring
            previous_producer_id=_int(document, "previous_producer_id"),
            next_producer_id=_int(document, "next_producer_id"),
            timeout_ms=_int(document, "timeout_ms"),
            status=TxnStatus(document["status"]),
            partitions=frozenset(pairs),
            start_ms=_int(document, "start_ms"),
            updated_ms=_int(document, "updated_ms"),
            bumped=bumped,
            # Absent from records of before named producers were transactional ids: no lease.
            lease_epoch=_int(document, "lease_epoch") if "lease_epoch" in document else -1,
            lease_until_ms=_int(document, "lease_until_ms") if "lease_until_ms" in document else 0,
        )
    except KeyError as exc:
        raise ValueError(f"field {exc} missing") from None
    if key_of(tenant, transactional_id) != key:
        raise ValueError(f"key {text!r} is not the key of {transactional_id!r} of tenant {tenant!r}")
    return text, metadata


def fold(records: Iterable[tuple[bytes | None, bytes | None]]) -> dict[str, TxnMetadata]:
    """Every id's state (by record key) from ``(key, value)`` records in offset order: a later record of a
    key replaces an earlier one, a tombstone (or a Dead state) removes it. A record this version cannot read
    is skipped with a warning, leaving the key's earlier state."""
    states: dict[str, TxnMetadata] = {}
    for key, value in records:
        try:
            text, metadata = decode(key, value)
        except ValueError as exc:
            log.warning("%s: skipping a record this server cannot read (key %r): %s", TRANSACTION_STATE_TOPIC, key, exc)
            continue
        if metadata is None or metadata.status is TxnStatus.DEAD:
            states.pop(text, None)
        else:
            states[text] = metadata
    return states
