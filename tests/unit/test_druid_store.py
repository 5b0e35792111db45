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
