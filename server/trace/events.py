"""Trace events and what is done with them, without I/O: the sampling decision, the record an event is
stored as in ``__talos_trace``, and the timeline of one message folded from the events that cover it.

An event covers a range of offsets of one partition (``first``..``last``): a produce batch, a fetch's answer, a
commit's step. One event per batch, not per message, is what keeps tracing cheap on the write path.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import orjson

from talos import RecordData

__all__ = [
    "KINDS",
    "TRACE_TOPIC",
    "TraceEvent",
    "decode_event",
    "encode_event",
    "first_sampled",
    "message_timeline",
    "sampled",
    "trace_partition",
]

TRACE_TOPIC = "__talos_trace"
# committed: a consumer group moved its offset past the message; acked: a push subscriber acknowledged it.
KINDS = (
    "produced",
    "transaction_committed",
    "transaction_aborted",
    "delivered",
    "committed",
    "acked",
    "retried",
    "dead_lettered",
)


@lru_cache(maxsize=65536)
def _salt(topic: str, partition: int) -> int:
    # Not hash(): that differs between processes, and every server must sample the same offsets.
    return zlib.crc32(f"{topic}:{partition}".encode())


def sampled(topic: str, partition: int, offset: int, sample: int) -> bool:
    """Whether the message at ``offset`` is traced under ``sample`` (0 off, 1 all, N: one in N). A pure
    function of the message's coordinates, so every server keeps every event of a sampled message."""
    if sample <= 0:
        return False
    return sample == 1 or (offset + _salt(topic, partition)) % sample == 0


def first_sampled(topic: str, partition: int, first: int, last: int, sample: int) -> int | None:
    """The first traced offset in ``first``..``last``, or None: whether an event over the range is kept."""
    if sample <= 0 or last < first:
        return None
    if sample == 1:
        return first
    offset = first + (-(first + _salt(topic, partition))) % sample
    return offset if offset <= last else None


def trace_partition(topic: str, partition: int, partitions: int) -> int:
    """The partition of ``__talos_trace`` holding the events of ``topic``/``partition``: all of them in one,
    so a message's timeline is read from one partition's index."""
    return _salt(topic, partition) % partitions


@dataclass(frozen=True, slots=True)
class TraceEvent:
    kind: str  # one of KINDS
    topic: str
    partition: int
    first: int
    last: int
    ts: int  # ms since the epoch: when it happened at the server that recorded it
    sample: int = 1
    fields: dict[str, Any] = field(default_factory=dict)  # kind-specific: tenant, producer_id, group, member...
    # produced: per traced message with a key or a traceparent, {"offset", "key"?, "traceparent"?}
    messages: list[dict[str, Any]] = field(default_factory=list)

    def covers(self, offset: int) -> bool:
        return self.first <= offset <= self.last

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "kind": self.kind,
            "topic": self.topic,
            "partition": self.partition,
            "first": self.first,
            "last": self.last,
            "ts": self.ts,
            "sample": self.sample,
            **self.fields,
        }
        if self.messages:
            doc["messages"] = self.messages
        return doc


_CORE = ("kind", "topic", "partition", "first", "last", "ts", "sample", "messages")


def encode_event(event: TraceEvent, server: str) -> RecordData:
    """The record of ``__talos_trace``: JSON, keyed by ``topic:partition`` (one source partition, one order)."""
    doc = event.to_json()
    doc["server"] = server
    return RecordData(orjson.dumps(doc), f"{event.topic}:{event.partition}".encode(), timestamp=event.ts)


def decode_event(value: bytes) -> TraceEvent | None:
    """The event of a ``__talos_trace`` record; None for one this server cannot read (a newer kind, damage)."""
    try:
        doc = orjson.loads(value)
        fields = {k: v for k, v in doc.items() if k not in _CORE}
        return TraceEvent(
            str(doc["kind"]),
            str(doc["topic"]),
            int(doc["partition"]),
            int(doc["first"]),
            int(doc["last"]),
            int(doc["ts"]),
            int(doc.get("sample", 1)),
            fields,
            list(doc.get("messages") or []),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def message_timeline(events: Iterable[TraceEvent], topic: str, partition: int, offset: int) -> dict[str, Any]:
    """What happened to one message, oldest first: each event that covers it, with the message's own part of
    a produced event (its key, its traceparent) lifted to the top."""
    steps: list[dict[str, Any]] = []
    key: str | None = None
    traceparent: str | None = None
    seen: set[bytes] = set()
    for event in events:
        if event.topic != topic or event.partition != partition or not event.covers(offset):
            continue
        step: dict[str, Any] = {"event": event.kind, "ts": event.ts, **event.fields}
        if event.first != event.last:
            step["range"] = [event.first, event.last]
        for message in event.messages:
            if message.get("offset") == offset:
                key = message.get("key", key)
                traceparent = message.get("traceparent", traceparent)
        identity = orjson.dumps(step, option=orjson.OPT_SORT_KEYS)
        if identity in seen:  # the same event twice (an idempotent resend answered again)
            continue
        seen.add(identity)
        steps.append(step)
    steps.sort(key=lambda s: (s["ts"], KINDS.index(s["event"]) if s["event"] in KINDS else len(KINDS)))
    answer: dict[str, Any] = {"topic": topic, "partition": partition, "offset": offset, "events": steps}
    if key is not None:
        answer["key"] = key
    if traceparent is not None:
        answer["traceparent"] = traceparent
    return answer


def merge_fields(base: Mapping[str, Any], **more: Any) -> dict[str, Any]:
    """``base`` with ``more``, leaving out None values (an event says only what it knows)."""
    return {k: v for k, v in {**base, **more}.items() if v is not None}
