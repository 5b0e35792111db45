"""Message trace against a real ``talos standalone --auth on``: off records nothing; on, a message's produced
event (tenant, producer id, client address, durable time, traceparent), its delivery to a group member and
the group's commit; the query by key over a time range; only the owning tenant and the admin see a topic's
trace; ``talos trace``; and what was flushed survives kill -9 of the server."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry import trace as otel
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from server.devservices import StandaloneServer, wait_until
from talos import Admin, Consumer, NotFoundError, Producer
from tests.helpers import running_standalone

pytestmark = pytest.mark.slow  # a server per module, and each test waits for a flush

ADMIN_TOKEN = f"admin-{secrets.token_urlsafe(24)}"
ENV = {"TALOS_ADMIN_TOKEN": ADMIN_TOKEN, "TALOS_AUTH": "on", "TALOS_TRACE_FLUSH_INTERVAL_S": "0.2"}
TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
SPAN_ID = 0xB7AD6B7169203331


@dataclass
class Traced:
    server: StandaloneServer
    acme: str  # tokens
    globex: str

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    data = tmp_path_factory.mktemp("traced") / "data"
    with running_standalone(data, env=ENV) as server, Admin(server.url, token=ADMIN_TOKEN) as admin:
        admin.create_tenant("acme")
        admin.create_tenant("globex")
        acme = admin.create_token("acme")["token"]
        globex = admin.create_token("globex")["token"]
        with Admin(server.url, token=acme) as tenant:
            tenant.create_topic("orders", partitions=2)
            tenant.create_topic("plain", partitions=1)
            assert tenant.alter_topic("orders", trace_sample=1).trace_sample == 1
        yield Traced(server, acme, globex)


def timeline_with(admin: Admin, topic: str, partition: int, offset: int, *events: str) -> dict[str, Any]:
    """The message's timeline once it shows every one of ``events`` (the writers flush every 0.2 s)."""
    found: dict[str, Any] = {}

    def has_all() -> bool:
        found.update(admin.trace(topic, partition, offset))
        return set(events) <= {e["event"] for e in found["events"]}

    wait_until(has_all, timeout=15, what=f"{events} in the trace of {topic}/{partition}@{offset}")
    return found


def test_trace_off_records_nothing(traced: Traced) -> None:
    with Producer(traced.url, token=traced.acme) as producer:
        record = producer.send("plain", b"x", key=b"k").result(30)
    time.sleep(1.0)  # five flush intervals
    with Admin(traced.url, token=traced.acme) as admin:
        answer = admin.trace("plain", record.partition, record.offset)
        assert answer["events"] == [] and answer["trace_sample"] == 0 and not answer["sampled"]
        assert admin.trace_key("plain", "k") == []


def test_produced_event_keeps_who_when_and_the_traceparent(traced: Traced) -> None:
    parent = SpanContext(TRACE_ID, SPAN_ID, is_remote=True, trace_flags=TraceFlags(1))
    with (
        Producer(traced.url, token=traced.acme, idempotent=True, trace_context=True) as producer,
        otel.use_span(NonRecordingSpan(parent)),
    ):
        before = int(time.time() * 1000)
        record = producer.send("orders", b"v" * 1024, key=b"customer-1").result(30)
    with Admin(traced.url, token=traced.acme) as admin:
        answer = timeline_with(admin, "orders", record.partition, record.offset, "produced")
    (produced,) = answer["events"]
    assert produced["tenant"] == "acme"
    assert isinstance(produced["producer_id"], int) and produced["producer_id"] >= 0
    assert produced["client"].startswith("127.0.0.1:")
    assert before <= produced["durable_ts"] <= int(time.time() * 1000)
    assert answer["key"] == "customer-1"
    assert answer["traceparent"] == f"00-{TRACE_ID:032x}-{SPAN_ID:016x}-01"


def test_group_delivery_and_commit_show_in_the_trace(traced: Traced) -> None:
    with Producer(traced.url, token=traced.acme) as producer:
        record = producer.send("orders", b"to consume", partition=1).result(30)
    with Consumer(traced.url, token=traced.acme, group="billing", topics=["orders"], start="earliest") as consumer:
        deadline = time.monotonic() + 30
        seen = False
        while not seen and time.monotonic() < deadline:
            seen = any((m.partition, m.offset) == (1, record.offset) for m in consumer.poll(timeout=1.0))
        assert seen
        consumer.commit()
    with Admin(traced.url, token=traced.acme) as admin:
        answer = timeline_with(admin, "orders", 1, record.offset, "produced", "delivered", "committed")
    kinds = [e["event"] for e in answer["events"]]
    assert kinds.index("produced") < kinds.index("delivered") < kinds.index("committed")
    delivered = next(e for e in answer["events"] if e["event"] == "delivered")
    committed = next(e for e in answer["events"] if e["event"] == "committed")
    assert delivered["group"] == "billing" and delivered["member"]
    assert committed["group"] == "billing"


def test_a_transactions_commit_and_abort_show_in_its_messages_trace(traced: Traced) -> None:
    with Producer(traced.url, token=traced.acme, transactional_id="traced-tx") as producer:
        producer.begin_transaction()
        committed = [producer.send("orders", f"c{i}".encode(), partition=0) for i in range(2)]
        producer.commit_transaction()
        producer.begin_transaction()
        aborted = producer.send("orders", b"a", partition=0)
        producer.abort_transaction()
    first, second, dropped = committed[0].result(30), committed[1].result(30), aborted.result(30)
    with Admin(traced.url, token=traced.acme) as admin:
        answer = timeline_with(admin, "orders", 0, second.offset, "produced", "transaction_committed")
        ended = next(e for e in answer["events"] if e["event"] == "transaction_committed")
        low, high = ended["range"]  # from the transaction's first message to just before its marker
        assert low == first.offset and high == ended["marker_offset"] - 1 and high < dropped.offset
        assert ended["producer_id"] == answer["events"][0]["producer_id"]
        answer = timeline_with(admin, "orders", 0, dropped.offset, "produced", "transaction_aborted")
        assert "transaction_committed" not in {e["event"] for e in answer["events"]}


def test_query_by_key_over_a_time_range(traced: Traced) -> None:
    key = f"key-{secrets.token_hex(4)}"
    with Producer(traced.url, token=traced.acme) as producer:
        first = producer.send("orders", b"one", key=key).result(30)
        middle = int(time.time() * 1000)
        time.sleep(0.05)
        second = producer.send("orders", b"two", key=key).result(30)
    with Admin(traced.url, token=traced.acme) as admin:
        timeline_with(admin, "orders", second.partition, second.offset, "produced")
        found = admin.trace_key("orders", key)
        assert [(m["partition"], m["offset"]) for m in found] == [
            (first.partition, first.offset),
            (second.partition, second.offset),
        ]
        later = admin.trace_key("orders", key, since_ms=middle + 1)
        assert [(m["partition"], m["offset"]) for m in later] == [(second.partition, second.offset)]
        assert admin.trace_key("orders", key, until_ms=middle - 60_000) == []


def test_only_the_owning_tenant_and_the_admin_see_a_trace(traced: Traced) -> None:
    with Producer(traced.url, token=traced.acme) as producer:
        record = producer.send("orders", b"private", partition=0).result(30)
    with Admin(traced.url, token=traced.acme) as owner:
        timeline_with(owner, "orders", 0, record.offset, "produced")
    with Admin(traced.url, token=ADMIN_TOKEN) as admin:
        assert admin.trace("orders", 0, record.offset)["events"]
    with Admin(traced.url, token=traced.globex) as other:
        with pytest.raises(NotFoundError):
            other.trace("orders", 0, record.offset)
        with pytest.raises(NotFoundError):
            other.trace_key("orders", "customer-1")
    path = f"/v1/topics/orders/partitions/0/messages/{record.offset}/trace"
    answer = httpx.get(traced.url + path, headers={"authorization": f"Bearer {traced.globex}"})
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "UNKNOWN_TOPIC"
    assert httpx.get(traced.url + path).status_code == 401
    assert httpx.get(traced.url + "/v1/topics/orders/trace", params={"key": "x"}).status_code == 401


def test_trace_setting_is_validated(traced: Traced) -> None:
    headers = {"authorization": f"Bearer {traced.acme}"}
    for bad in (-1, "often", 10**9):
        answer = httpx.patch(f"{traced.url}/v1/topics/orders", json={"trace_sample": bad}, headers=headers)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["code"] == "INVALID_REQUEST"


def talos(url: str, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TALOS_URL": url, "TALOS_TOKEN": token}
    return subprocess.run(
        [sys.executable, "-m", "talos.cli", *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


def test_cli_shows_a_message_and_a_key(traced: Traced) -> None:
    key = f"cli-{secrets.token_hex(4)}"
    with Producer(traced.url, token=traced.acme) as producer:
        record = producer.send("orders", b"cli", key=key).result(30)
    with Admin(traced.url, token=traced.acme) as admin:
        timeline_with(admin, "orders", record.partition, record.offset, "produced")
    shown = talos(traced.url, traced.acme, "trace", "orders", str(record.partition), str(record.offset))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"orders/{record.partition}@{record.offset}  key={key}"
    assert "produced" in lines[1] and "tenant=acme" in lines[1] and "client=127.0.0.1:" in lines[1]
    by_key = talos(traced.url, traced.acme, "trace", "orders", "--key", key, "--since", "1h")
    assert by_key.returncode == 0, by_key.stderr
    assert by_key.stdout.splitlines()[0] == lines[0]
    hidden = talos(traced.url, traced.globex, "trace", "orders", str(record.partition), str(record.offset))
    assert hidden.returncode != 0 and "orders" in hidden.stderr
    setting = talos(traced.url, traced.acme, "trace", "plain", "--sample", "100")
    assert setting.returncode == 0 and setting.stdout.strip() == "plain: trace_sample=100"


def test_flushed_events_survive_kill_9(tmp_path: Path) -> None:
    server = StandaloneServer(tmp_path / "data", env={"TALOS_TRACE_FLUSH_INTERVAL_S": "0.2"})
    try:
        server.start()
        with Admin(server.url) as admin:
            admin.create_topic("crash", partitions=1)
            admin.alter_topic("crash", trace_sample=1)
            with Producer(server.url) as producer:
                records = [producer.send("crash", b"m", key=f"k{i}") for i in range(20)]
                offsets = [r.result(30).offset for r in records]
            for offset in offsets:  # flushed: in __talos_trace, durable
                timeline_with(admin, "crash", 0, offset, "produced")
        server.kill()
        server.start()  # same port, same data directory
        with Admin(server.url) as admin:
            for offset in offsets:
                assert [e["event"] for e in admin.trace("crash", 0, offset)["events"]] == ["produced"]
            assert len(admin.trace_key("crash", "k7")) == 1
    finally:
        server.stop()
