"""The embedded default store: a DuckDB file.

DuckDB lets one process open a file at a time, so the store connects per call and closes at once: the
metering job writes between micro-batches, and ``talos metering query`` or a server reading ring weights
gets in between (each retrying briefly while another has the file).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb

from metering.store import COLUMNS, COUNTERS, MINUTE_MS, SERIES_COUNTERS, MinuteUsage, Window, check_step, rates

__all__ = ["DuckDbStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS usage_minute (
    minute_ms BIGINT, tenant VARCHAR, topic VARCHAR, partition INTEGER,
    bytes_in BIGINT, messages_in BIGINT, bytes_out BIGINT, messages_out BIGINT,
    requests BIGINT, errors BIGINT, latency_ms_sum DOUBLE, latency_ms_max DOUBLE,
    PRIMARY KEY (minute_ms, tenant, topic, partition)
);
CREATE TABLE IF NOT EXISTS positions (partition INTEGER PRIMARY KEY, next_offset BIGINT);
"""
_SUMS = ", ".join(f"sum({c}) AS {c}" for c in COUNTERS) + ", max(latency_ms_max) AS latency_ms_max"


class DuckDbStore:
    def __init__(self, path: str | Path, *, lock_timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self._lock_timeout_s = lock_timeout_s
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute(_SCHEMA)

    @contextlib.contextmanager
    def _connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        # Always read-write: DuckDB refuses two connections to one file in one process with different
        # settings (the job writing, a query reading), and across processes only one may have it open.
        deadline = time.monotonic() + self._lock_timeout_s
        while True:
            try:
                db = duckdb.connect(str(self.path))
                break
            except duckdb.IOException:  # another process has the file open for writing
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        try:
            yield db
        finally:
            db.close()

    def positions(self) -> dict[int, int]:
        with self._connect() as db:
            return {int(p): int(o) for p, o in db.execute("SELECT partition, next_offset FROM positions").fetchall()}

    def ingest(self, rows: Sequence[MinuteUsage], positions: Mapping[int, int]) -> None:
        updates = ", ".join(f"{c} = usage_minute.{c} + excluded.{c}" for c in COUNTERS)
        with self._connect() as db:
            db.begin()
            try:
                if rows:
                    db.executemany(
                        f"INSERT INTO usage_minute VALUES ({', '.join('?' for _ in COLUMNS)}) "
                        f"ON CONFLICT DO UPDATE SET {updates}, "
                        "latency_ms_max = greatest(usage_minute.latency_ms_max, excluded.latency_ms_max)",
                        [[getattr(r, c) for c in COLUMNS] for r in rows],
                    )
                db.executemany(
                    "INSERT INTO positions VALUES (?, ?) ON CONFLICT DO UPDATE SET next_offset = excluded.next_offset",
                    sorted(positions.items()),
                )
                db.commit()
            except BaseException:
                db.rollback()
                raise

    def _rows(self, sql: str, params: Sequence[Any]) -> list[dict[str, object]]:
        with self._connect() as db:
            cursor = db.execute(sql, params)
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def traffic(self, window: Window, *, topic: str | None = None) -> list[dict[str, object]]:
        where = "minute_ms >= ? AND minute_ms < ?" + (" AND topic = ?" if topic is not None else "")
        params: list[Any] = [window.start_ms, window.end_ms] + ([topic] if topic is not None else [])
        return self._rows(
            f"SELECT topic, partition, {_SUMS} FROM usage_minute WHERE {where} "
            "GROUP BY topic, partition ORDER BY topic, partition",
            params,
        )

    def tenants(self, window: Window) -> list[dict[str, object]]:
        return self._rows(
            f"SELECT tenant, {_SUMS} FROM usage_minute WHERE minute_ms >= ? AND minute_ms < ? "
            "GROUP BY tenant ORDER BY tenant",
            [window.start_ms, window.end_ms],
        )

    def top_partitions(self, window: Window, limit: int) -> list[dict[str, object]]:
        return self._rows(
            "SELECT topic, partition, sum(bytes_in + bytes_out) AS bytes FROM usage_minute "
            "WHERE minute_ms >= ? AND minute_ms < ? GROUP BY topic, partition ORDER BY bytes DESC, topic, partition "
            "LIMIT ?",
            [window.start_ms, window.end_ms, limit],
        )

    def partition_rates(self, window: Window) -> dict[str, float]:
        return rates(self.top_partitions(window, 1_000_000), window)

    def usage_series(
        self, window: Window, *, tenant: str | None = None, topic: str | None = None, step_ms: int = MINUTE_MS
    ) -> list[dict[str, object]]:
        step = check_step(step_ms)
        where = "minute_ms >= ? AND minute_ms < ?"
        params: list[Any] = [step, window.start_ms, window.end_ms]
        if tenant is not None:
            where += " AND tenant = ?"
            params.append(tenant)
        if topic is not None:
            where += " AND topic = ?"
            params.append(topic)
        sums = ", ".join(f"sum({c}) AS {c}" for c in SERIES_COUNTERS)
        return self._rows(
            # The bucket is epoch-aligned by construction (minute_ms is never negative), the same steps Druid
            # forms, so a chart does not shift when the window's start moves.
            f"SELECT minute_ms - minute_ms % CAST(? AS BIGINT) AS time_ms, topic, {sums} FROM usage_minute "
            f"WHERE {where} GROUP BY time_ms, topic ORDER BY time_ms, topic",
            params,
        )
