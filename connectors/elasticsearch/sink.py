"""The Elasticsearch sink: bulk indexing, idempotent by document id.

Records are buffered until ``batch_size`` of them or ``flush_ms`` after the first, then sent with one
``_bulk`` request of ``index`` actions whose ``_id`` is ``<topic>-<partition>-<offset>``: indexing a
record again after a crash overwrites the same document. Documents the server answers with 429 or 5xx
(and whole requests it refuses so, or cannot be reached for) are sent again with backoff; a document it
refuses for good fails the task (``on_error: fail``) or is counted and skipped (``on_error: skip``).

Of the sink tasks' three steps (``connectors.sink``), *stage* is the indexing itself: documents cannot be
hidden until their offsets are committed, and need not be, since writing one again changes nothing. So
*publish* has nothing left to do, and a refused commit (a task paused past its session, fenced by the
coordinator) leaves documents that the partition's next holder indexes again under the same ids: nothing
is lost, and nothing is there twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from connectors.config import ElasticsearchSinkSettings
from connectors.elasticsearch.client import RETRIABLE_STATUSES, connect, retriable
from connectors.elasticsearch.naming import document, document_id, index_name
from connectors.sink import TopicPartition
from connectors.task import Stopped, TaskStatus, backoff_s
from talos import Message

__all__ = ["DocumentRefusedError", "ElasticsearchSinkWriter"]

log = logging.getLogger("talos.connect.elasticsearch")


MAX_BULK_BYTES = 16 * 1024 * 1024  # under the search servers' default request limit (100 MB), with room


@dataclass(frozen=True, slots=True)
class _Action:
    lines: bytes  # the action and the document, two lines of NDJSON


class DocumentRefusedError(Exception):
    """The search server refused a document for a reason that a retry will not change (e.g. mapping)."""


class ElasticsearchSinkWriter:
    def __init__(
        self, settings: ElasticsearchSinkSettings, *, template_name: str, status: TaskStatus, stop: threading.Event
    ) -> None:
        self.settings = settings
        self.client = connect(settings)
        self._status = status
        self._stop = stop
        self._buffer: list[Message] = []
        self._opened = 0.0
        self.records = 0
        self.requests = 0
        self.skipped = 0
        if settings.template is not None:
            try:
                self.client.indices.put_index_template(name=template_name, body=settings.template)
            except Exception:
                self.client.close()
                raise

    def open(self, tps: list[TopicPartition], committed: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        return {}  # the committed offsets are right: a replay rewrites the same documents

    def add(self, message: Message) -> bool:
        if not self._buffer:
            self._opened = time.monotonic()
        self._buffer.append(message)
        return len(self._buffer) >= self.settings.batch_size

    def due(self, now: float) -> list[TopicPartition]:
        full = len(self._buffer) >= self.settings.batch_size
        if full or (self._buffer and now - self._opened >= self.settings.flush_ms / 1000):
            return self.pending()
        return []

    def pending(self) -> list[TopicPartition]:
        return list(dict.fromkeys((m.topic, m.partition) for m in self._buffer))

    def stage(self, tps: list[TopicPartition], holds: Callable[[TopicPartition], bool]) -> dict[TopicPartition, int]:
        held = {tp for tp in tps if holds(tp)}  # the others stay buffered until renewed, lost or revoked
        messages = [m for m in self._buffer if (m.topic, m.partition) in held]
        self._buffer = [m for m in self._buffer if (m.topic, m.partition) not in held]
        self._opened = time.monotonic()
        skipped_before = self.skipped
        chunk: list[_Action] = []
        size = 0
        for message in messages:
            action = self._action(message)
            if action is None:
                continue
            if chunk and (len(chunk) >= self.settings.batch_size or size + len(action.lines) > MAX_BULK_BYTES):
                self._bulk(chunk)
                chunk, size = [], 0
            chunk.append(action)
            size += len(action.lines)
        if chunk:
            self._bulk(chunk)
        self.records += len(messages) - (self.skipped - skipped_before)
        written: dict[TopicPartition, int] = {}
        for message in messages:
            written[(message.topic, message.partition)] = message.offset + 1
        return written

    def publish(self, tps: list[TopicPartition]) -> None:
        pass  # indexed when staged

    def abandon(self, tps: list[TopicPartition]) -> None:
        pass  # indexed when staged, under ids the next holder's replay overwrites

    def _action(self, m: Message) -> _Action | None:
        """The bulk lines of one record (None: it cannot be indexed and ``on_error`` is ``skip``)."""
        try:
            index = index_name(self.settings.index, topic=m.topic, partition=m.partition, timestamp_ms=m.timestamp)
        except (ValueError, OverflowError, OSError) as exc:  # a timestamp no date can be made of
            self._refused(f"{m.topic}/{m.partition}/{m.offset}: no index for timestamp {m.timestamp} ({exc})")
            return None
        target = {"_index": index, "_id": document_id(m.topic, m.partition, m.offset)}
        return _Action(
            orjson.dumps({"index": target}) + b"\n" + orjson.dumps(document(m, self.settings.metadata_field))
        )

    def _bulk(self, actions: list[_Action]) -> None:
        todo = actions
        attempt = 0
        while todo:
            try:
                self.requests += 1
                answer: dict[str, Any] = self.client.bulk(body=b"\n".join(a.lines for a in todo) + b"\n")
            except Exception as exc:
                if not retriable(exc):
                    raise
                self._wait(attempt, f"bulk request failed ({exc})")
                attempt += 1
                continue
            todo = self._outcome(todo, answer) if answer.get("errors") else []
            if todo:
                self._wait(attempt, f"{len(todo)} document(s) refused for now (429/5xx)")
                attempt += 1

    def _outcome(self, sent: list[_Action], answer: dict[str, Any]) -> list[_Action]:
        """The documents to send again; raises for one refused for good (unless ``on_error: skip``)."""
        again = []
        for action, item in zip(sent, answer["items"], strict=True):
            result = next(iter(item.values()))
            status = int(result.get("status", 500))
            if status < 300:
                continue
            if status in RETRIABLE_STATUSES:
                again.append(action)
                continue
            self._refused(f"{result.get('_index')}/{result.get('_id')}: {status} {result.get('error')}")
        return again

    def _refused(self, reason: str) -> None:
        if self.settings.on_error == "fail":
            raise DocumentRefusedError(reason)
        log.warning("%s: skipping a document that cannot be indexed: %s", self._status.name, reason)
        self.skipped += 1
        self._status.skipped += 1

    def _wait(self, attempt: int, why: str) -> None:
        delay = min(backoff_s(attempt) / 4, 10.0)
        self._status.state, self._status.error = "retrying", f"{self.settings.hosts[0]}: {why}"
        log.warning("%s: %s; retrying in %.2f s", self._status.name, self._status.error, delay)
        if self._stop.wait(delay):
            raise Stopped

    def drop(self, tps: list[TopicPartition]) -> None:
        gone = set(tps)
        self._buffer = [m for m in self._buffer if (m.topic, m.partition) not in gone]

    def describe(self) -> dict[str, object]:
        return {"bulk_requests": self.requests, "refused": self.skipped}

    def close(self) -> None:
        self._buffer.clear()
        self.client.close()
