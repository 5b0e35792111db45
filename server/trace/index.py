"""The trace index: one SQLite file per partition of ``__talos_trace``, kept by the server that owns that
partition and fed from it (docs/trace.md says why SQLite: measured against DuckDB and a scan of the topic).

The topic is the truth; the index is derived from it and remembers, in the same transaction as the rows, the
trace offset it has read up to. So a crash (kill -9) loses nothing: the next catch-up reads on from there, and
a server that takes a trace partition over with no file (or an old one) reads the partition from its
earliest offset. Each event covers an offset range of one source partition; a 2-D R*Tree (source partition
id by offsets) finds the events covering an offset in O(log n). R*Tree coordinates are 32-bit floats rounded
outwards, so the tree is a superset and the exact range is checked on the row. Keys of produced messages go
into a plain B-tree, ``(topic, key, ts)``.

Blocking: call from the I/O threads, one call at a time per partition (``server.trace.keeper`` holds a lock).
"""

from __future__ import annotations

import base64
import os
import sqlite3
from collections.abc import Iterable

from server.trace.events import TraceEvent, decode_event

__all__ = ["PartitionIndex", "key_bytes"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS position (id INTEGER PRIMARY KEY CHECK (id = 0), next INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS sources (
    id INTEGER PRIMARY KEY, topic TEXT NOT NULL, partition INTEGER NOT NULL, UNIQUE (topic, partition)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY, source INTEGER NOT NULL, first INTEGER NOT NULL, last INTEGER NOT NULL,
    ts INTEGER NOT NULL, body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_ts ON events (ts);
CREATE VIRTUAL TABLE IF NOT EXISTS spans USING rtree(id, source_low, source_high, first, last);
CREATE TABLE IF NOT EXISTS keys (
    topic TEXT NOT NULL, key BLOB NOT NULL, ts INTEGER NOT NULL, partition INTEGER NOT NULL, offset INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS keys_by_key ON keys (topic, key, ts);
"""


def key_bytes(message: dict[str, object]) -> bytes | None:
    """A produced message's key as the trace event holds it (text, or base64 when not UTF-8)."""
    if isinstance(key := message.get("key"), str):
        return key.encode()
    if isinstance(encoded := message.get("key_b64"), str):
        return base64.b64decode(encoded)
    return None


class PartitionIndex:
    """The index of one ``__talos_trace`` partition, in ``path``."""

    def __init__(self, path: str) -> None:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # a lost tail is read again from the topic
        self._db.executescript(_SCHEMA)
        self._sources: dict[tuple[str, int], int] = {
            (topic, partition): source for source, topic, partition in self._db.execute("SELECT * FROM sources")
        }

    @property
    def position(self) -> int:
        """The trace offset read up to (the next one to index)."""
        row = self._db.execute("SELECT next FROM position WHERE id = 0").fetchone()
        return int(row[0]) if row else 0

    def clear(self, position: int) -> None:
        """Forget everything; index from ``position`` on (the trace partition was made again, or trimmed)."""
        with self._transaction():
            for table in ("events", "spans", "keys", "sources"):
                self._db.execute(f"DELETE FROM {table}")  # the table names above, not input
            self._set_position(position)
        self._sources.clear()

    def add(self, records: Iterable[tuple[int, bytes | None]], next_position: int) -> int:
        """Index ``(trace offset, value)`` records and move the position to ``next_position``; events added."""
        added = 0
        with self._transaction():
            for _offset, value in records:
                event = decode_event(value) if value is not None else None
                if event is None:
                    continue
                self._insert(event, value or b"")
                added += 1
            self._set_position(next_position)
        return added

    def _insert(self, event: TraceEvent, body: bytes) -> None:
        source = self._source(event.topic, event.partition)
        cursor = self._db.execute(
            "INSERT INTO events (source, first, last, ts, body) VALUES (?, ?, ?, ?, ?)",
            (source, event.first, event.last, event.ts, body),
        )
        self._db.execute(
            "INSERT INTO spans VALUES (?, ?, ?, ?, ?)", (cursor.lastrowid, source, source, event.first, event.last)
        )
        keyed = [(m, k) for m in event.messages if (k := key_bytes(m)) is not None]
        if keyed:
            self._db.executemany(
                "INSERT INTO keys VALUES (?, ?, ?, ?, ?)",
                [(event.topic, key, event.ts, event.partition, int(str(m["offset"]))) for m, key in keyed],
            )

    def _source(self, topic: str, partition: int) -> int:
        source = self._sources.get((topic, partition))
        if source is None:
            cursor = self._db.execute("INSERT INTO sources (topic, partition) VALUES (?, ?)", (topic, partition))
            source = self._sources[(topic, partition)] = int(cursor.lastrowid or 0)
        return source

    def _set_position(self, position: int) -> None:
        self._db.execute("INSERT OR REPLACE INTO position VALUES (0, ?)", (position,))

    def events_at(self, topic: str, partition: int, offset: int) -> list[TraceEvent]:
        """Every event covering ``offset`` of ``topic``/``partition``."""
        source = self._sources.get((topic, partition))
        if source is None:
            return []
        rows = self._db.execute(
            "SELECT e.body FROM spans s JOIN events e ON e.id = s.id"
            " WHERE s.source_low <= ?1 AND s.source_high >= ?1 AND s.first <= ?2 AND s.last >= ?2"
            " AND e.source = ?1 AND e.first <= ?2 AND e.last >= ?2",
            (source, offset),
        ).fetchall()
        return [event for (body,) in rows if (event := decode_event(body)) is not None]

    def keyed(self, topic: str, key: bytes, since_ms: int, until_ms: int, limit: int) -> list[tuple[int, int]]:
        """``(partition, offset)`` of the messages of ``topic`` with ``key`` produced in the time range."""
        rows = self._db.execute(
            "SELECT partition, offset FROM keys WHERE topic = ? AND key = ? AND ts >= ? AND ts <= ?"
            " ORDER BY ts LIMIT ?",
            (topic, key, since_ms, until_ms, limit),
        ).fetchall()
        return [(int(p), int(o)) for p, o in rows]

    def prune(self, before_ms: int) -> int:
        """Drop what the trace topic's retention dropped (events older than ``before_ms``); rows dropped."""
        with self._transaction():
            ids = [row[0] for row in self._db.execute("SELECT id FROM events WHERE ts < ?", (before_ms,))]
            self._db.executemany("DELETE FROM spans WHERE id = ?", [(i,) for i in ids])
            self._db.execute("DELETE FROM events WHERE ts < ?", (before_ms,))
            self._db.execute("DELETE FROM keys WHERE ts < ?", (before_ms,))
        return len(ids)

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)

    def close(self) -> None:
        self._db.close()


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN")

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        self._db.execute("COMMIT" if kind is None else "ROLLBACK")
