"""Compacted topics through a real server: created and changed with cleanup.policy by REST, the SDK and a Kafka
client; keyless messages refused; tombstones written and shown by REST; the owner's background compaction
leaves the last value of every key."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError

from fencing import SegmentName
from talos import Admin, Consumer, Message
from tests.helpers import KafkaStandalone, running_kafka_standalone

# Maintenance every 0.2 s; small segments so that data is sealed (only sealed segments are compacted).
ENV = {"TALOS_MAINTENANCE_INTERVAL_S": "0.2"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaStandalone]:
    with running_kafka_standalone(tmp_path_factory.mktemp("compacted") / "data", env=ENV) as running:
        yield running


def fetch_all(url: str, topic: str, partition: int = 0) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    offset = 0
    while True:
        answer = httpx.get(f"{url}/v1/topics/{topic}/partitions/{partition}/messages", params={"offset": offset})
        answer.raise_for_status()
        doc = answer.json()
        if not doc["messages"]:
            return out
        out.extend(doc["messages"])
        offset = doc["next_offset"]


def produce(url: str, topic: str, messages: list[dict[str, object]]) -> httpx.Response:
    return httpx.post(f"{url}/v1/topics/{topic}/partitions/0/messages", json={"messages": messages})


def drain(consumer: Consumer, count: int) -> list[Message]:
    out: list[Message] = []
    deadline = time.monotonic() + 30
    while len(out) < count and time.monotonic() < deadline:
        out.extend(consumer.poll(1.0))
    return out


def wait_until(check: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_rest_creates_a_compacted_topic_refuses_keyless_messages_and_shows_tombstones(
    server: KafkaStandalone, topic_name: str
) -> None:
    created = httpx.post(
        f"{server.url}/v1/topics",
        json={"name": topic_name, "cleanup_policy": "compact", "delete_retention_ms": 3_600_000, "segment_bytes": 1024},
    )
    assert created.status_code == 201, created.text
    assert created.json()["cleanup_policy"] == "compact"
    refused = produce(server.url, topic_name, [{"key": "k", "value": "v"}, {"value": "no key"}])
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "INVALID_RECORD"
    assert produce(server.url, topic_name, [{"key": "k", "value": None}]).status_code == 200
    assert fetch_all(server.url, topic_name)[0]["value"] is None  # the tombstone, shown as null
    bad = httpx.post(f"{server.url}/v1/topics", json={"name": topic_name + "x", "cleanup_policy": "shred"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "INVALID_CONFIG"


def test_compaction_keeps_the_last_value_of_every_key_and_a_restart_serves_the_same(tmp_path: Path) -> None:
    with running_kafka_standalone(tmp_path / "data", env=ENV) as server:
        with Admin(server.url) as admin:
            admin.create_topic("table", cleanup_policy="compact", segment_bytes=2048, min_cleanable_dirty_ratio=0.1)
        keys = [f"k{i}" for i in range(10)]
        for round_ in range(30):
            answer = produce(server.url, "table", [{"key": k, "value": f"{k}={round_}"} for k in keys])
            assert answer.status_code == 200, answer.text
        assert produce(server.url, "table", [{"key": "k0", "value": None}]).status_code == 200
        for i in range(40):  # more writes so that the segment with the tombstone is sealed too
            assert produce(server.url, "table", [{"key": "filler", "value": str(i)}]).status_code == 200

        directory = tmp_path / "data" / "topics" / "table" / "0"

        def compacted_past_the_tombstone() -> bool:
            names = (SegmentName.parse(p.name) for p in directory.iterdir())
            return any(n is not None and n.generation > 0 and (n.end or 0) > 301 for n in names)

        wait_until(compacted_past_the_tombstone)
        # The server's tail cache may still serve recent batches as written (a reader may see more than the
        # compacted log; never less): a restart reads the segments alone.
        server.server.stop()
        server.server.start()
        seen = fetch_all(server.url, "table")
        assert len(seen) < 100
        offsets = [m["offset"] for m in seen]
        assert offsets == sorted(offsets)
        last = {m["key"]: m["value"] for m in seen}
        assert {k: last[k] for k in keys[1:]} == {k: f"{k}=29" for k in keys[1:]}
        assert last["k0"] is None  # the tombstone stays for delete.retention.ms (a day by default)
        assert max(offsets) == 300 + 1 + 40 - 1  # offsets never change
        # The SDK's consumer reads the same, across the gaps compaction left (a seek into one too).
        with Consumer(server.url, partitions=[("table", 0)], start="earliest") as consumer:
            polled = [(m.offset, m.value) for m in drain(consumer, len(seen))]
        assert polled == [(m["offset"], None if m["value"] is None else str(m["value"]).encode()) for m in seen]
        # A Kafka consumer too (the gaps are Kafka's own compacted-topic gaps to it).
        kafka = KafkaConsumer(
            bootstrap_servers=server.bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=5000
        )
        try:
            kafka.assign([TopicPartition("table", 0)])
            from_kafka = [(r.offset, r.value) for r in itertools.islice(kafka, len(seen))]
        finally:
            kafka.close()
        assert from_kafka == polled
        gap = next(o for o in range(max(offsets)) if o not in offsets)
        with Consumer(server.url, partitions=[("table", 0)]) as consumer:
            consumer.seek("table", 0, gap)
            assert drain(consumer, 1)[0].offset == min(o for o in offsets if o > gap)


def test_kafka_clients_create_alter_and_are_refused_keyless_records(server: KafkaStandalone, topic_name: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10_000)
    try:
        admin.create_topics(
            [NewTopic(topic_name, 1, 1, topic_configs={"cleanup.policy": "compact", "min.compaction.lag.ms": "1000"})]
        )
    finally:
        admin.close()
    with Admin(server.url) as talos_admin:
        described = talos_admin.describe_topic(topic_name)
        assert (described.cleanup_policy, described.min_compaction_lag_ms) == ("compact", 1000)
        changed = talos_admin.alter_topic(topic_name, cleanup_policy="compact,delete", retention_ms=60_000)
        assert (changed.cleanup_policy, changed.retention_ms) == ("compact,delete", 60_000)
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, retries=0)
    try:
        assert producer.send(topic_name, key=b"k", value=b"v").get(timeout=10).offset == 0
        with pytest.raises(KafkaError) as refused:
            producer.send(topic_name, value=b"no key").get(timeout=10)
        assert "InvalidRecord" in type(refused.value).__name__ or "87" in str(refused.value)
    finally:
        producer.close()


def test_an_operator_compacts_a_partition_now(server: KafkaStandalone, topic_name: str) -> None:
    with Admin(server.url) as admin:
        # A dirty ratio of 1: the background never compacts it (the share is never above 1), the operator does.
        admin.create_topic(topic_name, cleanup_policy="compact", segment_bytes=1024, min_cleanable_dirty_ratio=1.0)
    for round_ in range(20):
        assert produce(server.url, topic_name, [{"key": f"k{i}", "value": f"{round_}"} for i in range(5)]).is_success
    answer = httpx.post(f"{server.url}/v1/topics/{topic_name}/partitions/0/compact")
    assert answer.status_code == 200, answer.text
    report = answer.json()
    assert report["compacted"] and report["records_removed"] > 0 and report["bytes_written"] < report["bytes_read"]
    for round_ in range(20, 40):  # dirty again: the SDK and the CLI compact it too
        assert produce(server.url, topic_name, [{"key": f"k{i}", "value": f"{round_}"} for i in range(5)]).is_success
    with Admin(server.url) as admin:
        again = admin.compact(topic_name, 0)
    assert again["compacted"] and again["records_removed"] > 0
    for round_ in range(40, 60):
        assert produce(server.url, topic_name, [{"key": f"k{i}", "value": f"{round_}"} for i in range(5)]).is_success
    cli = subprocess.run(
        [sys.executable, "-m", "talos.cli", "topics", "compact", topic_name, "--url", server.url],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    assert "partition 0\tcleaned to" in cli.stdout and "records removed" in cli.stdout, cli.stdout
    plain = httpx.post(f"{server.url}/v1/topics", json={"name": topic_name + "-plain"})
    assert plain.status_code == 201
    refused = httpx.post(f"{server.url}/v1/topics/{topic_name}-plain/partitions/0/compact")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "NOT_COMPACTED"
