"""A push subscription's settings, names and the records of its state topic. Pure.

A subscription ``s`` owns two internal topics, both billed to (and counted against the partition quota of)
the tenant that made it:

- ``__sub.<s>``: its state, one partition. Every record is a JSON *snapshot* of the whole state (settings,
  each partition's :class:`~server.subscriptions.ledger.Ledger`), or a *fence* a new coordinator writes
  before it reads the state back. So recovering is reading the last snapshot, never a fold of the topic,
  and retention by size never loses the newest state (the open segment is never removed).
- ``__sub-dlq.<s>``: its dead letters, each with the original topic, partition, offset and delivery count in
  its headers. The subscription's tenant may consume it.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from server.errors import ApiError
from server.subscriptions.ledger import Ledger
from talos import RecordData

__all__ = [
    "DEAD_LETTER_PREFIX",
    "ORIGIN_HEADERS",
    "STATE_PREFIX",
    "SUBSCRIPTION_NAME",
    "Settings",
    "Snapshot",
    "dead_letter_topic",
    "decode",
    "fence_record",
    "snapshot_record",
    "state_topic",
    "validate_subscription_name",
]

SUBSCRIPTION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
STATE_PREFIX = "__sub."
DEAD_LETTER_PREFIX = "__sub-dlq."
# Headers of a dead letter: where it came from and how often it was delivered.
ORIGIN_HEADERS = ("talos-topic", "talos-partition", "talos-offset", "talos-deliveries")


def validate_subscription_name(name: str) -> str:
    if not SUBSCRIPTION_NAME.match(name):
        raise ApiError(
            400,
            "INVALID_SUBSCRIPTION_NAME",
            f"invalid subscription name {name[:300]!r}: 1-200 characters of A-Z a-z 0-9 . _ -, not starting with . _ -",
        )
    return name


def state_topic(name: str) -> str:
    return STATE_PREFIX + name


def dead_letter_topic(name: str) -> str:
    return DEAD_LETTER_PREFIX + name


@dataclass(frozen=True)
class Settings:
    """What a subscription is made with (``POST /v1/subscriptions``); fixed for its life."""

    topic: str
    ack_timeout_ms: int = 30_000  # a delivered message not acknowledged in this time goes to another subscriber
    max_deliveries: int = 5  # then it goes to the dead-letter topic (0: never)
    key_ordered: bool = False  # a key's next message waits until the earlier one is settled
    max_in_flight: int = 1_000  # per partition: the most messages read but not yet settled
    start: str = "latest"  # where a new subscription starts: "earliest" or "latest"

    def to_json(self) -> dict[str, object]:
        return asdict(self)


@dataclass
class Snapshot:
    settings: Settings
    tenant: str | None
    producer_id: int | None
    ledgers: dict[int, Ledger] = field(default_factory=dict)
    dead_letter_end: int = 0  # the dead-letter topic's high watermark when the snapshot was written


def snapshot_record(snapshot: Snapshot, settled_since: dict[int, list[int]]) -> RecordData:
    doc = {
        "type": "snapshot",
        "settings": snapshot.settings.to_json(),
        "tenant": snapshot.tenant,
        "producer_id": snapshot.producer_id,
        "dead_letter_end": snapshot.dead_letter_end,
        "partitions": {str(p): ledger.to_json(settled_since.get(p, ())) for p, ledger in snapshot.ledgers.items()},
    }
    return RecordData(orjson.dumps(doc))


def fence_record(producer_id: int, epoch: int) -> RecordData:
    return RecordData(orjson.dumps({"type": "fence", "producer_id": producer_id, "epoch": epoch}))


def decode(value: bytes | None) -> Snapshot | None:
    """The snapshot a state record holds; None for a fence (or a record this version cannot read)."""
    try:
        doc: dict[str, Any] = orjson.loads(value or b"")
        if not isinstance(doc, dict) or doc.get("type") != "snapshot":
            return None
        settings = Settings(**doc["settings"])
        ledgers = {int(p): Ledger.from_json(ledger) for p, ledger in doc["partitions"].items()}
        producer_id = doc.get("producer_id")
        return Snapshot(
            settings,
            doc.get("tenant"),
            int(producer_id) if producer_id is not None else None,
            ledgers,
            int(doc.get("dead_letter_end", 0)),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AssertionError):
        return None
