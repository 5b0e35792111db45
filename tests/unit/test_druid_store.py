"""The Druid store. No Druid can run on these machines, so these tests check the requests the store sends
against Druid's documented formats (native batch ``index_parallel`` task with an inline input source;
task status API; Druid SQL over HTTP as pydruid sends it), using a recording stand-in for Druid's HTTP
API: a FAKE Druid, named as such, that answers in Druid's documented response shapes."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from metering.druid_store import DruidStore
from metering.store import MinuteUsage, Window


class FakeDruid:
    """Records every request; answers task submission, task status and SQL like Druid does."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, Any]] = []
        self.task_state = "SUCCESS"
        self.sql_rows: list[dict[str, object]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(("POST", self.path, body))
                if self.path == "/druid/indexer/v1/task":
                    self._answer({"task": "index_parallel_talos_usage_1"})
                else:
                    self._answer(fake.sql_rows)

            def do_GET(self) -> None:
                fake.requests.append(("GET", self.path, None))
                self._answer({"task": self.path.split("/")[-2], "status": {"statusCode": fake.task_state}})

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def sql(self) -> list[dict[str, Any]]:
        """The Druid SQL request bodies received, in order."""
        return [body for _, path, body in self.requests if path == "/druid/v2/sql/"]


@pytest.fixture
def druid() -> Iterator[FakeDruid]:
    fake = FakeDruid()
    try:
        yield fake
    finally:
        fake.server.shutdown()


ROW = MinuteUsage(1_800_000_000_000, "acme", "orders", 3, 100, 2, 50, 1, 3, 0, 4.5, 2.5)


def test_ingestion_is_a_documented_native_batch_task(druid: FakeDruid, tmp_path: Path) -> None:
    store = DruidStore(druid.url, positions_path=tmp_path / "positions.json")
    store.ingest([ROW], {0: 17})
    method, path, task = druid.requests[0]
    assert (method, path) == ("POST", "/druid/indexer/v1/task")
    assert task["type"] == "index_parallel"
    schema = task["spec"]["dataSchema"]
    assert schema["dataSource"] == "talos_usage"
    assert schema["timestampSpec"] == {"column": "minute_ms", "format": "millis"}
    assert "tenant" in schema["dimensionsSpec"]["dimensions"]
    assert {"type": "longSum", "name": "bytes_in", "fieldName": "bytes_in"} in schema["metricsSpec"]
    assert {"type": "doubleMax", "name": "latency_ms_max", "fieldName": "latency_ms_max"} in schema["metricsSpec"]
    assert schema["granularitySpec"]["queryGranularity"] == "minute"
    io = task["spec"]["ioConfig"]
    assert io["type"] == "index_parallel" and io["appendToExisting"] is True
    assert io["inputFormat"] == {"type": "json"} and io["inputSource"]["type"] == "inline"
    line = json.loads(io["inputSource"]["data"].splitlines()[0])
    assert (line["minute_ms"], line["tenant"], line["bytes_in"], line["batch"]) == (
        ROW.minute_ms,
        "acme",
        100,
        "0:0-17",
    )
    assert druid.requests[1][:2] == ("GET", "/druid/indexer/v1/task/index_parallel_talos_usage_1/status")
    assert store.positions() == {0: 17}  # moved only after the task succeeded


def test_a_failed_task_leaves_the_positions_alone(druid: FakeDruid, tmp_path: Path) -> None:
    druid.task_state = "FAILED"
    store = DruidStore(druid.url, positions_path=tmp_path / "positions.json")
    with pytest.raises(RuntimeError, match="failed"):
        store.ingest([ROW], {0: 17})
    assert store.positions() == {}


def test_queries_are_druid_sql_through_pydruid(druid: FakeDruid, tmp_path: Path) -> None:
    druid.sql_rows = [{"topic": "orders", "partition": 3, "bytes": 150}]
    store = DruidStore(druid.url, positions_path=tmp_path / "positions.json")
    window = Window(1_800_000_000_000, 1_800_000_060_000)
    assert store.top_partitions(window, 5) == [{"topic": "orders", "partition": 3, "bytes": 150}]
    assert store.partition_rates(window) == {"orders:3": 2.5}
    store.traffic(window, topic="o'rders")
    sql = [body for method, path, body in druid.requests if path == "/druid/v2/sql/"]
    assert set(sql[0]) >= {"query", "context"}  # Druid SQL over HTTP: {"query": ..., "context": ...}
    assert "MILLIS_TO_TIMESTAMP(1800000000000)" in sql[0]["query"] and "LIMIT 5" in sql[0]["query"]
    assert "topic = 'o''rders'" in sql[-1]["query"]  # a parameter is quoted, not pasted


SERIES_ROW: dict[str, object] = {
    "time_ms": 1_800_000_000_000,
    "topic": "orders",
    "bytes_in": 100,
    "messages_in": 2,
    "bytes_out": 50,
    "messages_out": 1,
    "requests": 3,
    "errors": 0,
}


def test_usage_series_is_one_druid_sql_query_with_quoted_filters(druid: FakeDruid, tmp_path: Path) -> None:
    # Druid's default SQL result format: an array of objects, longs as JSON numbers.
    druid.sql_rows = [SERIES_ROW, {**SERIES_ROW, "time_ms": 1_800_000_300_000, "bytes_in": 7}]
    store = DruidStore(druid.url, positions_path=tmp_path / "positions.json")
    window = Window(1_800_000_000_000, 1_800_003_600_000)
    series = store.usage_series(window, tenant="ac'me", topic="orders", step_ms=300_000)
    assert series == druid.sql_rows
    assert [list(row) for row in series] == [list(SERIES_ROW)] * 2
    assert all(type(row[c]) is int for row in series for c in SERIES_ROW if c != "topic")
    (body,) = druid.sql
    assert set(body) >= {"query", "context"}
    query = body["query"]
    # Millisecond arithmetic, so steps are multiples of step_ms since the epoch, as DuckDB's are.
    assert (
        "TIMESTAMP_TO_MILLIS(__time) - MOD(TIMESTAMP_TO_MILLIS(__time), 300000) AS time_ms, topic, "
        'SUM("bytes_in") AS "bytes_in", SUM("messages_in") AS "messages_in", SUM("bytes_out") AS "bytes_out", '
        'SUM("messages_out") AS "messages_out", SUM("requests") AS "requests", SUM("errors") AS "errors" '
        'FROM "talos_usage"'
    ) in query
    assert "latency" not in query
    assert ("__time >= MILLIS_TO_TIMESTAMP(1800000000000) AND __time < MILLIS_TO_TIMESTAMP(1800003600000)") in query
    # pydruid fills the parameters in client-side, quoted: the quote in the tenant is doubled, not pasted.
    assert "tenant = 'ac''me'" in query and "topic = 'orders'" in query
    assert query.endswith("GROUP BY 1, 2 ORDER BY time_ms, topic")


def test_usage_series_without_filters_sums_every_tenant_and_topic(druid: FakeDruid, tmp_path: Path) -> None:
    store = DruidStore(druid.url, positions_path=tmp_path / "positions.json")
    assert store.usage_series(Window(1_800_000_000_000, 1_800_000_060_000)) == []  # no rows: no steps
    (body,) = druid.sql
    query = body["query"]
    assert "MOD(TIMESTAMP_TO_MILLIS(__time), 60000)" in query  # the default step is a minute
    assert "tenant =" not in query and "topic =" not in query and "%(" not in query


@pytest.mark.parametrize("step_ms", [0, -60_000, 30_000, 90_000, 60_001])
def test_usage_series_refuses_a_step_that_is_not_whole_minutes(druid: FakeDruid, tmp_path: Path, step_ms: int) -> None:
    store = DruidStore(druid.url, positions_path=tmp_path / "positions.json")
    with pytest.raises(ValueError, match="multiple of 60000"):
        store.usage_series(Window(1_800_000_000_000, 1_800_000_060_000), step_ms=step_ms)
    assert druid.requests == []  # refused before asking Druid
