"""The Druid store: rows go in through Druid's native batch ingestion API (an ``index_parallel`` task with
an inline input source, appended to the datasource), and queries go out as Druid SQL through ``pydruid``.

Druid has no transaction that spans a task and our positions, so positions live in a small JSON file
beside the job and move only after Druid reports the task ``SUCCESS``. A crash between the two re-ingests
one micro-batch: counted twice, and visible as such in ``talos_usage``'s ``batch`` dimension, which names
the ``__talos_metrics`` offsets each row came from.

No Druid runs on our test machines: the tests check these requests against Druid's documented formats
with a recording stand-in for Druid's HTTP API.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import orjson
import urllib3

from metering.store import COUNTERS, MINUTE_MS, SERIES_COUNTERS, MinuteUsage, Window, check_step, rates

__all__ = ["DruidStore", "ingestion_spec"]

DATASOURCE = "talos_usage"
_DIMENSIONS = ["tenant", "topic", {"type": "long", "name": "partition"}, "batch"]
_DOUBLES = ("latency_ms_sum",)


def ingestion_spec(datasource: str, rows: Sequence[MinuteUsage], batch: str) -> dict[str, Any]:
    """A native batch task (``index_parallel``) appending ``rows`` from inline newline-delimited JSON."""
    data = "\n".join(
        orjson.dumps({**{k: getattr(r, k) for k in MinuteUsage.__slots__}, "batch": batch}).decode() for r in rows
    )
    metrics: list[dict[str, str]] = [{"type": "count", "name": "rows"}]
    for name in COUNTERS:
        kind = "doubleSum" if name in _DOUBLES else "longSum"
        metrics.append({"type": kind, "name": name, "fieldName": name})
    metrics.append({"type": "doubleMax", "name": "latency_ms_max", "fieldName": "latency_ms_max"})
    return {
        "type": "index_parallel",
        "spec": {
            "dataSchema": {
                "dataSource": datasource,
                "timestampSpec": {"column": "minute_ms", "format": "millis"},
                "dimensionsSpec": {"dimensions": _DIMENSIONS},
                "metricsSpec": metrics,
                "granularitySpec": {"segmentGranularity": "day", "queryGranularity": "minute", "rollup": True},
            },
            "ioConfig": {
                "type": "index_parallel",
                "inputSource": {"type": "inline", "data": data},
                "inputFormat": {"type": "json"},
                "appendToExisting": True,
            },
            "tuningConfig": {"type": "index_parallel", "maxNumConcurrentSubTasks": 1},
        },
    }


def _time_filter(window: Window) -> str:
    return (
        f"__time >= MILLIS_TO_TIMESTAMP({int(window.start_ms)}) AND __time < MILLIS_TO_TIMESTAMP({int(window.end_ms)})"
    )


def _int(value: object) -> int:
    if not isinstance(value, int | float | str):
        raise TypeError(f"Druid answered {value!r} where a number belongs")
    return int(value)


_SUMS = ", ".join(f'SUM("{c}") AS "{c}"' for c in COUNTERS) + ', MAX("latency_ms_max") AS "latency_ms_max"'


class DruidStore:
    def __init__(
        self,
        url: str,
        *,
        positions_path: str | Path,
        datasource: str = DATASOURCE,
        task_timeout_s: float = 600.0,
        http: urllib3.PoolManager | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.datasource = datasource
        self._positions_path = Path(positions_path)
        self._task_timeout_s = task_timeout_s
        self._http = http or urllib3.PoolManager(retries=urllib3.Retry(total=3, backoff_factor=0.5))

    # ---------------------------------------------------------------- positions and ingestion

    def positions(self) -> dict[int, int]:
        if not self._positions_path.exists():
            return {}
        return {int(k): int(v) for k, v in json.loads(self._positions_path.read_text()).items()}

    def _request(self, method: str, path: str, body: object | None = None) -> Any:
        answer = self._http.request(
            method,
            self.url + path,
            body=orjson.dumps(body) if body is not None else None,
            headers={"Content-Type": "application/json"},
            timeout=30.0,
        )
        if answer.status >= 300:
            raise RuntimeError(f"Druid {method} {path}: {answer.status} {answer.data[:300]!r}")
        return orjson.loads(answer.data) if answer.data else None

    def ingest(self, rows: Sequence[MinuteUsage], positions: Mapping[int, int]) -> None:
        if rows:
            old = self.positions()
            batch = ",".join(f"{p}:{old.get(p, 0)}-{end}" for p, end in sorted(positions.items()))
            task = self._request("POST", "/druid/indexer/v1/task", ingestion_spec(self.datasource, rows, batch))
            self._wait(str(task["task"]))
        merged = {**self.positions(), **positions}
        temporary = self._positions_path.with_suffix(".tmp")
        temporary.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(json.dumps({str(k): v for k, v in sorted(merged.items())}))
        temporary.replace(self._positions_path)  # atomic: old or new positions, never half

    def _wait(self, task: str) -> None:
        deadline = time.monotonic() + self._task_timeout_s
        while True:
            status = self._request("GET", f"/druid/indexer/v1/task/{quote(task, safe='')}/status")["status"]
            state = status.get("statusCode") or status.get("status")
            if state == "SUCCESS":
                return
            if state == "FAILED":
                raise RuntimeError(f"Druid task {task} failed: {status.get('errorMsg', 'no message')}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"Druid task {task} still {state} after {self._task_timeout_s:.0f}s")
            time.sleep(1.0)

    # ---------------------------------------------------------------- queries (Druid SQL through pydruid)

    def _sql(self, query: str, parameters: Mapping[str, object] | None = None) -> list[dict[str, object]]:
        from pydruid.db import connect

        parts = urlsplit(self.url)
        connection = connect(
            host=parts.hostname or "localhost",
            port=parts.port or (443 if parts.scheme == "https" else 8082),
            path="/druid/v2/sql/",
            scheme=parts.scheme or "http",
        )
        try:
            cursor = connection.cursor()
            cursor.execute(query, dict(parameters or {}))
            names = [d[0] for d in cursor.description or []]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        finally:
            connection.close()

    def traffic(self, window: Window, *, topic: str | None = None) -> list[dict[str, object]]:
        where = _time_filter(window) + (" AND topic = %(topic)s" if topic is not None else "")
        return self._sql(
            f'SELECT topic, "partition", {_SUMS} FROM "{self.datasource}" WHERE {where} '
            'GROUP BY topic, "partition" ORDER BY topic, "partition"',
            {"topic": topic} if topic is not None else None,
        )

    def tenants(self, window: Window) -> list[dict[str, object]]:
        return self._sql(
            f'SELECT tenant, {_SUMS} FROM "{self.datasource}" WHERE {_time_filter(window)} '
            "GROUP BY tenant ORDER BY tenant"
        )

    def top_partitions(self, window: Window, limit: int) -> list[dict[str, object]]:
        return self._sql(
            f'SELECT topic, "partition", SUM(bytes_in) + SUM(bytes_out) AS bytes FROM "{self.datasource}" '
            f'WHERE {_time_filter(window)} GROUP BY topic, "partition" ORDER BY bytes DESC LIMIT {int(limit)}'
        )

    def partition_rates(self, window: Window) -> dict[str, float]:
        return rates(self.top_partitions(window, 100_000), window)

    def usage_series(
        self, window: Window, *, tenant: str | None = None, topic: str | None = None, step_ms: int = MINUTE_MS
    ) -> list[dict[str, object]]:
        step = check_step(step_ms)
        where = _time_filter(window)
        parameters: dict[str, object] = {}
        if tenant is not None:
            where += " AND tenant = %(tenant)s"
            parameters["tenant"] = tenant
        if topic is not None:
            where += " AND topic = %(topic)s"
            parameters["topic"] = topic
        sums = ", ".join(f'SUM("{c}") AS "{c}"' for c in SERIES_COUNTERS)
        # Millisecond arithmetic, not TIME_FLOOR: a period like PT7M or PT90M floors within the hour or day,
        # not to multiples of the step since the epoch, and the steps must match DuckDB's. MOD, not the %
        # operator: pydruid fills parameters in with Python's % formatting, which would take a bare % as its own.
        millis = "TIMESTAMP_TO_MILLIS(__time)"
        rows = self._sql(
            f'SELECT {millis} - MOD({millis}, {step}) AS time_ms, topic, {sums} FROM "{self.datasource}" '
            f"WHERE {where} GROUP BY 1, 2 ORDER BY time_ms, topic",
            parameters or None,
        )
        # The Protocol promises ints, and pydruid hands back whatever types the JSON held: pin them here.
        return [
            {"time_ms": _int(r["time_ms"]), "topic": r["topic"], **{c: _int(r[c]) for c in SERIES_COUNTERS}}
            for r in rows
        ]
