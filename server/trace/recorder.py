"""The trace recorder: what servers call when something happens to a message. I/O-free and cheap.

    broker.trace.record(topic, partition, offset, "delivered", last=next_offset - 1, group=g, member=m)

``record`` looks up the topic's ``trace_sample`` (0 off, 1 every message, N one in N), keeps the event only if
its offset range holds a sampled offset (:func:`server.trace.events.sampled`, a pure function of the message's
coordinates, so every event of a sampled message is kept wherever it is recorded) and appends it to an
in-memory list. Nothing else happens on the caller's path: ``server.trace.writer`` takes the list every
``trace_flush_interval_s`` and writes it to ``__talos_trace``. Produce batches are handed over as they are
(:meth:`TraceRecorder.produced`): their records are read for keys and ``traceparent`` headers only then, in
the background, so the write path still never parses records.

Events waiting here are lost on kill -9 (at most one flush interval of them); at most ``max_buffered`` wait,
beyond that new ones are dropped and counted (``talos_trace_events{outcome="dropped"}``).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from server import metrics
from server.trace.events import TraceEvent, first_sampled, sampled
from talos import BatchError, decode_batches
from talos._group import ATTEMPT_HEADER, DEAD_LETTER_PREFIX, ORIGIN_HEADERS, REASON_HEADER, RETRY_PREFIX

__all__ = ["CLIENT_HEADER", "TRACEPARENT_HEADER", "TraceRecorder"]

CLIENT_HEADER = "x-talos-client-address"  # set by the server from the connection (a forward passes it on)
TRACEPARENT_HEADER = "traceparent"  # W3C trace context, as a record header
_MAX_KEY_BYTES = 256  # a key kept in the trace is cut here: the trace finds messages, it does not store them
SIDE_PREFIXES = (RETRY_PREFIX, DEAD_LETTER_PREFIX)


class _Produced(NamedTuple):
    """A produce batch as the write path answered it; read in the background."""

    topic: str
    partition: int
    first: int
    last: int
    ts: int
    sample: int
    batch: bytes | bytearray
    tenant: str | None
    client: str | None
    durable: bool


class _SideRecord(NamedTuple):
    """A batch written to a group's retry or dead-letter topic: its records name the messages they retry."""

    topic: str
    partition: int
    first: int
    ts: int
    batch: bytes | bytearray
    tenant: str | None


class TraceRecorder:
    """Called on the event loop only: no lock."""

    def __init__(self, sample_of: Callable[[str], int], *, max_buffered: int = 100_000) -> None:
        self._sample_of = sample_of
        self._max_buffered = max_buffered
        self._buffer: list[TraceEvent | _Produced | _SideRecord] = []
        self.dropped = 0

    def sample(self, topic: str) -> int:
        """The topic's setting: 0 off, 1 every message, N one in N."""
        return self._sample_of(topic)

    def _add(self, item: TraceEvent | _Produced | _SideRecord) -> None:
        if len(self._buffer) >= self._max_buffered:
            self.dropped += 1
            metrics.trace_events("dropped", 1)
            return
        self._buffer.append(item)

    def record(
        self, topic: str, partition: int, offset: int, event: str, *, last: int | None = None, **fields: Any
    ) -> None:
        """Something happened to the messages ``offset``..``last`` (default: just ``offset``) of a partition:
        kept if the topic is traced and the range holds a sampled message. ``fields`` (JSON values; None
        ones are left out) say what: group, member, subscriber..."""
        sample = self._sample_of(topic)
        if not sample:
            return
        last = offset if last is None else last
        if first_sampled(topic, partition, offset, last, sample) is None:
            return
        kept = {k: v for k, v in fields.items() if v is not None}
        self._add(TraceEvent(event, topic, partition, offset, last, _now_ms(), sample, kept))

    def produced(
        self,
        topic: str,
        partition: int,
        first: int,
        next_offset: int,
        batch: bytes | bytearray,
        *,
        sample: int,
        tenant: str | None,
        client: str | None,
        durable: bool,
    ) -> None:
        """A batch was stored at ``first``..``next_offset - 1`` (the caller looked ``sample`` up: nonzero)."""
        last = next_offset - 1
        if first < 0 or first_sampled(topic, partition, first, last, sample) is None:
            return
        self._add(_Produced(topic, partition, first, last, _now_ms(), sample, batch, tenant, client, durable))

    def side_record(
        self, topic: str, partition: int, first: int, batch: bytes | bytearray, *, tenant: str | None
    ) -> None:
        """A batch was stored on a group's retry (``__retry.<group>``) or dead-letter (``__dlq.<group>``)
        topic at ``first``: each record retries, or gives up on, the message its origin headers name."""
        if first >= 0:
            self._add(_SideRecord(topic, partition, first, _now_ms(), batch, tenant))

    def pending(self) -> int:
        return len(self._buffer)

    def take(self) -> list[TraceEvent]:
        """The events recorded since the last call, produce batches read into events (keys, traceparents,
        the producer id) and retry records into events of the messages they retry."""
        items, self._buffer = self._buffer, []
        out: list[TraceEvent] = []
        for item in items:
            if isinstance(item, TraceEvent):
                out.append(item)
            elif isinstance(item, _Produced):
                out.append(_produced_event(item))
            else:
                out.extend(self._side_events(item))
        return out

    def _side_events(self, side: _SideRecord) -> list[TraceEvent]:
        out = []
        kind = "retried" if side.topic.startswith(RETRY_PREFIX) else "dead_lettered"
        group = side.topic.partition(".")[2]
        try:
            batches = list(decode_batches(side.batch, verify=False))
        except BatchError:
            return []
        position = side.first
        for decoded in batches:
            for record in decoded.records:
                offset = position
                position += 1
                headers = dict(record.headers)
                origin = [headers.get(name) for name in ORIGIN_HEADERS]
                if origin[0] is None or not (origin[1] or b"").isdigit() or not (origin[2] or b"").isdigit():
                    continue
                topic, partition, at = origin[0].decode(errors="replace"), int(origin[1] or 0), int(origin[2] or 0)
                sample = self._sample_of(topic)
                if not sampled(topic, partition, at, sample):
                    continue
                fields: dict[str, Any] = {"group": group, "to": side.topic, "to_offset": offset}
                if (attempt := headers.get(ATTEMPT_HEADER)) is not None:
                    fields["attempt"] = attempt.decode(errors="replace")
                if (reason := headers.get(REASON_HEADER)) is not None:
                    fields["reason"] = reason.decode(errors="replace")[:500]
                if side.tenant is not None:
                    fields["tenant"] = side.tenant
                out.append(TraceEvent(kind, topic, partition, at, at, side.ts, sample, fields))
        return out


def _now_ms() -> int:
    return int(time.time() * 1000)


def _text(data: bytes, name: str, into: dict[str, Any]) -> None:
    data = data[:_MAX_KEY_BYTES]
    try:
        into[name] = data.decode()
    except UnicodeDecodeError:
        into[f"{name}_b64"] = base64.b64encode(data).decode()


def _produced_event(item: _Produced) -> TraceEvent:
    fields: dict[str, Any] = {"acks": "durable" if item.durable else "accepted"}
    if item.durable:
        fields["durable_ts"] = item.ts
    if item.tenant is not None:
        fields["tenant"] = item.tenant
    if item.client is not None:
        fields["client"] = item.client
    messages: list[dict[str, Any]] = []
    base: int | None = None
    try:
        for decoded in decode_batches(item.batch, verify=False):
            header = decoded.header
            base = header.base_offset if base is None else base
            if header.producer_id >= 0:
                fields["producer_id"] = header.producer_id
                fields["producer_epoch"] = header.producer_epoch
            for record in decoded.records:
                offset = item.first + record.offset - base  # relative: whether or not the buffer was patched
                if not sampled(item.topic, item.partition, offset, item.sample):
                    continue
                entry: dict[str, Any] = {"offset": offset}
                if record.key is not None:
                    _text(record.key, "key", entry)
                for name, value in record.headers:
                    if name == TRACEPARENT_HEADER and value is not None:
                        entry["traceparent"] = value.decode(errors="replace")[:100]
                if len(entry) > 1:
                    messages.append(entry)
    except BatchError:
        fields["unreadable"] = True  # validated when written: only a bug lands here; the event stays
    return TraceEvent(
        "produced", item.topic, item.partition, item.first, item.last, item.ts, item.sample, fields, messages
    )
