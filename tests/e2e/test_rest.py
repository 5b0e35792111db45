"""The REST API v1 against a real standalone server, and its answers to bad input."""

from __future__ import annotations

import base64
import re
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import urllib3

from talos import RecordData, decode_records, encode_batch, iter_batches, partition_for_key, slot_range
from tests.e2e.conftest import StandaloneServer

http = urllib3.PoolManager(retries=False)


def call(
    server: StandaloneServer,
    method: str,
    path: str,
    body: object = None,
    *,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    data = raw if raw is not None else (orjson.dumps(body) if body is not None else None)
    answer = http.request(
        method,
        server.url + path,
        body=data,
        headers={"content-type": "application/json", **(headers or {})},
        timeout=30,
    )
    if answer.headers.get("content-type", "").startswith("application/json") and answer.data:
        return answer.status, orjson.loads(answer.data)
    return answer.status, answer.data


def create(server: StandaloneServer, name: str, partitions: int = 1) -> None:
    status, body = call(server, "POST", "/v1/topics", {"name": name, "partitions": partitions})
    assert status == 201, body


def latest(server: StandaloneServer, name: str) -> list[int]:
    status, body = call(server, "GET", f"/v1/topics/{name}")
    assert status == 200
    return [p["latest"] for p in body["partitions_detail"]]


def assert_error(status: int, body: Any, expected_status: int, code: str) -> None:
    assert status == expected_status, body
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str)
    assert isinstance(body["error"]["retriable"], bool)


@pytest.mark.slow
def test_topic_lifecycle(server: StandaloneServer, topic_name: str) -> None:
    status, body = call(server, "POST", "/v1/topics", {"name": topic_name, "partitions": 3, "retention_ms": 60000})
    assert status == 201
    assert (body["name"], body["partitions"], body["retention_ms"]) == (topic_name, 3, 60000)
    assert_error(*call(server, "POST", "/v1/topics", {"name": topic_name, "partitions": 1}), 409, "TOPIC_EXISTS")
    status, body = call(server, "GET", "/v1/topics")
    assert topic_name in [t["name"] for t in body["topics"]]
    status, body = call(server, "PATCH", f"/v1/topics/{topic_name}", {"partitions": 5, "retention_bytes": 1000})
    assert (status, body["partitions"], body["retention_bytes"], body["version"]) == (200, 5, 1000, 2)
    assert_error(*call(server, "PATCH", f"/v1/topics/{topic_name}", {"partitions": 2}), 400, "INVALID_REQUEST")
    assert latest(server, topic_name) == [0, 0, 0, 0, 0]
    status, _ = call(server, "DELETE", f"/v1/topics/{topic_name}")
    assert status == 204
    assert_error(*call(server, "GET", f"/v1/topics/{topic_name}"), 404, "UNKNOWN_TOPIC")
    assert_error(*call(server, "DELETE", f"/v1/topics/{topic_name}"), 404, "UNKNOWN_TOPIC")
    create(server, topic_name)  # the name is free again, with no old data
    assert latest(server, topic_name) == [0]


def test_produce_and_fetch_json(server: StandaloneServer, topic_name: str) -> None:
    create(server, topic_name, partitions=4)
    messages = [
        {"key": "customer-42", "value": "order 1", "headers": {"source": "web"}},
        {"key": "customer-42", "value": "order 2"},
        {"value_b64": base64.b64encode(b"\x00\xffbinary").decode(), "partition": 3},
        {"value": None, "key": "tombstone"},
    ]
    status, body = call(server, "POST", f"/v1/topics/{topic_name}/messages", {"messages": messages})
    assert status == 200, body
    results = body["results"]
    keyed = partition_for_key(b"customer-42", 4)
    start, end = slot_range(keyed, 4)
    assert start < end
    assert [r["partition"] for r in results[:2]] == [keyed, keyed]
    assert results[1]["offset"] == results[0]["offset"] + 1
    assert results[2]["partition"] == 3
    status, body = call(server, "GET", f"/v1/topics/{topic_name}/partitions/{keyed}/messages?offset=0")
    assert status == 200
    got = body["messages"]
    assert [(m["key"], m["value"]) for m in got[:2]] == [("customer-42", "order 1"), ("customer-42", "order 2")]
    assert got[0]["headers"] == {"source": "web"}
    assert body["high_watermark"] >= 2
    status, body = call(server, "GET", f"/v1/topics/{topic_name}/partitions/3/messages?offset=0")
    first = body["messages"][0]
    assert base64.b64decode(first["value_b64"]) == b"\x00\xffbinary"
    assert "value" not in first
    assert body["next_offset"] == first["offset"] + 1


def test_fetch_limits_and_offsets(server: StandaloneServer, topic_name: str) -> None:
    create(server, topic_name)
    values = [{"value": f"m{i}", "timestamp": 1_000_000 + i * 1000} for i in range(50)]
    assert call(server, "POST", f"/v1/topics/{topic_name}/messages", {"messages": values})[0] == 200
    path = f"/v1/topics/{topic_name}/partitions/0"
    status, body = call(server, "GET", f"{path}/messages?offset=10&max_messages=5")
    assert [m["offset"] for m in body["messages"]] == [10, 11, 12, 13, 14]
    assert body["next_offset"] == 15
    status, body = call(server, "GET", f"{path}/offsets")
    assert {k: body[k] for k in ("partition", "earliest", "latest")} == {"partition": 0, "earliest": 0, "latest": 50}
    assert body["session"] >= 1  # the partition's load session (Swift): its epoch
    status, body = call(server, "GET", f"{path}/offsets?timestamp={1_000_000 + 20_500}")
    assert body["offset"] == 21
    status, body = call(server, "GET", f"{path}/offsets?timestamp=9999999999999")
    assert body["offset"] == 50
    assert call(server, "GET", f"{path}/messages?offset=50")[1]["messages"] == []
    status, body = call(server, "GET", f"{path}/messages?offset=51")
    assert_error(status, body, 416, "OFFSET_OUT_OF_RANGE")
    assert (body["error"]["earliest"], body["error"]["latest"]) == (0, 50)


def test_long_poll_wakes_when_data_arrives(server: StandaloneServer, topic_name: str) -> None:
    create(server, topic_name)
    path = f"/v1/topics/{topic_name}/partitions/0/messages"
    started = time.monotonic()
    assert call(server, "GET", f"{path}?offset=0&wait_ms=300")[1]["messages"] == []
    assert time.monotonic() - started >= 0.29
    timer = threading.Timer(
        0.3, lambda: call(server, "POST", f"/v1/topics/{topic_name}/messages", {"messages": [{"value": "late"}]})
    )
    timer.start()
    started = time.monotonic()
    _status, body = call(server, "GET", f"{path}?offset=0&wait_ms=10000")
    waited = time.monotonic() - started
    timer.join()
    assert [m["value"] for m in body["messages"]] == ["late"]
    assert 0.25 <= waited < 5


def test_binary_batches_on_the_wire(server: StandaloneServer, topic_name: str) -> None:
    create(server, topic_name)
    first = encode_batch([RecordData(b"a", b"k"), RecordData(b"b")])
    second = encode_batch([RecordData(b"c")])
    path = f"/v1/topics/{topic_name}/partitions/0/messages"
    status, body = call(
        server, "POST", path, raw=first + second, headers={"content-type": "application/vnd.talos.batch"}
    )
    assert status == 200, body
    assert [(r["offset"], r["count"]) for r in body["results"]] == [(0, 2), (2, 1)]
    answer = http.request("GET", f"{server.url}{path}?offset=1", headers={"accept": "application/vnd.talos.batch"})
    assert answer.status == 200
    assert answer.headers["x-talos-high-watermark"] == "3"
    records = [r for pos, _ in iter_batches(answer.data) for r in decode_records(answer.data, pos)]
    assert [(r.offset, r.value) for r in records] == [(0, b"a"), (1, b"b"), (2, b"c")]  # whole batches come back
    damaged = bytearray(first)
    damaged[-1] ^= 1
    status, body = call(
        server, "POST", path, raw=bytes(damaged), headers={"content-type": "application/vnd.talos.batch"}
    )
    assert_error(status, body, 400, "CORRUPT_BATCH")
    status, body = call(server, "POST", path, raw=first[:-3], headers={"content-type": "application/vnd.talos.batch"})
    assert_error(status, body, 400, "CORRUPT_BATCH")
    assert latest(server, topic_name) == [3]


def test_acks_accepted_answers_with_the_durable_checkpoint(server: StandaloneServer, topic_name: str) -> None:
    create(server, topic_name)
    status, body = call(
        server, "POST", f"/v1/topics/{topic_name}/messages", {"messages": [{"value": "x"}], "acks": "accepted"}
    )
    assert status == 200
    assert body["results"][0]["offset"] == 0
    assert body["results"][0]["durable_offset"] in (0, 1)


BAD_PRODUCE: list[tuple[str, bytes, int, str]] = [
    ("malformed JSON", b'{"messages": [', 400, "INVALID_JSON"),
    ("not an object", b"[1, 2]", 400, "INVALID_REQUEST"),
    ("no messages", b'{"messages": []}', 400, "INVALID_REQUEST"),
    ("value not a string", b'{"messages": [{"value": 5}]}', 400, "INVALID_REQUEST"),
    ("no value", b'{"messages": [{"key": "k"}]}', 400, "INVALID_REQUEST"),
    ("bad base64", b'{"messages": [{"value_b64": "@@@"}]}', 400, "INVALID_REQUEST"),
    ("both value forms", b'{"messages": [{"value": "a", "value_b64": "YQ=="}]}', 400, "INVALID_REQUEST"),
    ("partition not int", b'{"messages": [{"value": "a", "partition": "0"}]}', 400, "INVALID_REQUEST"),
    ("unknown partition", b'{"messages": [{"value": "a", "partition": 7}]}', 404, "UNKNOWN_PARTITION"),
    ("negative partition", b'{"messages": [{"value": "a", "partition": -1}]}', 404, "UNKNOWN_PARTITION"),
    ("headers not strings", b'{"messages": [{"value": "a", "headers": {"h": 1}}]}', 400, "INVALID_REQUEST"),
    ("bad acks", b'{"messages": [{"value": "a"}], "acks": "maybe"}', 400, "INVALID_REQUEST"),
    ("negative timestamp", b'{"messages": [{"value": "a", "timestamp": -5}]}', 400, "INVALID_REQUEST"),
    ("message over 1 MiB", orjson.dumps({"messages": [{"value": "x" * (1024 * 1024 + 1)}]}), 413, "MESSAGE_TOO_LARGE"),
    ("request over 8 MiB", orjson.dumps({"messages": [{"value": "x" * 1000}] * 9000}), 413, "REQUEST_TOO_LARGE"),
]


@pytest.mark.parametrize(("what", "body", "status", "code"), BAD_PRODUCE, ids=[b[0] for b in BAD_PRODUCE])
def test_bad_produce_requests_change_nothing(
    server: StandaloneServer, topic_name: str, what: str, body: bytes, status: int, code: str
) -> None:
    create(server, topic_name, partitions=2)
    assert_error(*call(server, "POST", f"/v1/topics/{topic_name}/messages", raw=body), status, code)
    assert latest(server, topic_name) == [0, 0]


@pytest.mark.parametrize(
    "name", ["..", ".hidden", "a/b", "a\x00b", "-dash", "x" * 250, "", "sp ace", "__internal", "naïve"]
)
def test_invalid_topic_names(server: StandaloneServer, name: str) -> None:
    status, body = call(server, "POST", "/v1/topics", {"name": name, "partitions": 1})
    assert_error(status, body, 400, "INVALID_TOPIC_NAME")
    assert name not in [t["name"] for t in call(server, "GET", "/v1/topics")[1]["topics"]]


@pytest.mark.parametrize(
    ("query", "status", "code"),
    [
        ("offset=-1", 400, "INVALID_REQUEST"),
        ("offset=abc", 400, "INVALID_REQUEST"),
        ("", 400, "INVALID_REQUEST"),
        ("offset=0&max_bytes=0", 400, "INVALID_REQUEST"),
        ("offset=0&wait_ms=-5", 400, "INVALID_REQUEST"),
    ],
)
def test_bad_fetch_parameters(server: StandaloneServer, topic_name: str, query: str, status: int, code: str) -> None:
    create(server, topic_name)
    assert_error(*call(server, "GET", f"/v1/topics/{topic_name}/partitions/0/messages?{query}"), status, code)


def test_bad_admin_requests(server: StandaloneServer) -> None:
    assert_error(*call(server, "POST", "/v1/topics", {"name": "ok", "partitions": 0}), 400, "INVALID_REQUEST")
    assert_error(*call(server, "POST", "/v1/topics", {"name": "ok", "partitions": 5000}), 400, "INVALID_REQUEST")
    assert_error(*call(server, "POST", "/v1/topics", raw=b"{nope"), 400, "INVALID_REQUEST")
    assert_error(*call(server, "GET", "/v1/topics/none/partitions/0/messages?offset=0"), 404, "UNKNOWN_TOPIC")
    assert_error(*call(server, "GET", "/v1/nothing-here"), 404, "NOT_FOUND")


def test_health_metrics_and_openapi(server: StandaloneServer, topic_name: str) -> None:
    create(server, topic_name)
    call(server, "POST", f"/v1/topics/{topic_name}/messages", {"messages": [{"value": "m"}]})
    assert call(server, "GET", "/healthz") == (200, {"status": "ok"})
    assert call(server, "GET", "/readyz") == (200, {"status": "ready"})
    status, metrics = call(server, "GET", "/metrics")
    assert status == 200
    assert f'talos_messages_in_total{{topic="{topic_name}"}} 1.0' in metrics.decode()
    io = dict(re.findall(r'^talos_io_tasks\{pool="(\w+)"\} ([\d.e+]+)$', metrics.decode(), re.M))
    assert float(io["write"]) >= 1 and "read" in io  # the produce's flush ran on the write pool
    assert re.search(r'^talos_io_queue_seconds\{pool="write"\} ', metrics.decode(), re.M)
    status, schema = call(server, "GET", "/openapi.json")
    paths = schema["paths"]
    for path, method in [
        ("/v1/topics", "post"),
        ("/v1/topics", "get"),
        ("/v1/topics/{topic}", "get"),
        ("/v1/topics/{topic}", "patch"),
        ("/v1/topics/{topic}", "delete"),
        ("/v1/topics/{topic}/messages", "post"),
        ("/v1/topics/{topic}/partitions/{partition}/messages", "post"),
        ("/v1/topics/{topic}/partitions/{partition}/messages", "get"),
        ("/v1/topics/{topic}/partitions/{partition}/offsets", "get"),
        ("/healthz", "get"),
        ("/readyz", "get"),
        ("/metrics", "get"),
    ]:
        assert method in paths[path], (path, method)
    assert "requestBody" in paths["/v1/topics/{topic}/messages"]["post"]
    assert call(server, "GET", "/docs")[0] == 200


def _reads(server: StandaloneServer) -> dict[str, float]:
    text = call(server, "GET", "/metrics")[1].decode()
    found = dict(re.findall(r'^talos_fetch_reads_total\{source="(\w+)"\} ([\d.]+)$', text, re.M))
    return {source: float(found.get(source, 0)) for source in ("cache", "storage")}


@pytest.mark.slow
def test_fetches_of_recent_data_come_from_memory(tmp_path: Path) -> None:
    """Fresh data is served by the tail cache; after a restart (empty cache) the same fetch reads storage."""
    server = StandaloneServer(tmp_path / "data")
    try:
        server.start()
        create(server, "hot")
        call(server, "POST", "/v1/topics/hot/messages", {"messages": [{"value": f"m{i}"} for i in range(10)]})
        before = _reads(server)
        for offset in range(10):
            assert call(server, "GET", f"/v1/topics/hot/partitions/0/messages?offset={offset}")[0] == 200
        after = _reads(server)
        assert (after["cache"] - before["cache"], after["storage"] - before["storage"]) == (10, 0)
        server.stop()
        server.start()
        _status, body = call(server, "GET", "/v1/topics/hot/partitions/0/messages?offset=3")
        assert [m["value"] for m in body["messages"]] == [f"m{i}" for i in range(3, 10)]
        assert _reads(server)["storage"] == 1
    finally:
        server.stop()
