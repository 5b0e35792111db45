"""Consumer groups against a real standalone server: REST errors, sharing, commits and lag, retry and dead
letters, broadcast, seek and reset-offsets, the asyncio twin and the CLI. (The distributed properties,
with kills, are in tests/cluster/test_groups_cluster.py.)"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import threading
import time

import orjson
import pytest

from talos import Admin, AsyncConsumer, CommitFailedError, Consumer, Message, Producer, Urllib3Transport
from tests.e2e.conftest import StandaloneServer


def produce(url: str, topic: str, count: int, *, partitions: int = 1, prefix: str = "m") -> None:
    with Admin(url) as admin:
        admin.create_topic(topic, partitions=partitions)
    with Producer(url) as producer:
        for i in range(count):
            producer.send(topic, value=f"{prefix}{i}".encode(), partition=i % partitions)
        producer.flush()


def request(url: str, method: str, path: str, body: object = None) -> tuple[int, dict[str, object]]:
    transport = Urllib3Transport()
    try:
        payload = body if isinstance(body, bytes) else (orjson.dumps(body) if body is not None else None)
        answer = transport.request(method, url + path, body=payload, headers={"content-type": "application/json"})
        return answer.status, (orjson.loads(answer.body) if answer.body else {})
    finally:
        transport.close()


def error_code(answer: tuple[int, dict[str, object]]) -> tuple[int, str]:
    status, doc = answer
    error = doc["error"]
    assert isinstance(error, dict) and set(error) >= {"code", "message", "retriable"}
    return status, str(error["code"])


@pytest.mark.slow
def test_bad_group_requests_get_clear_errors(server: StandaloneServer, topic_name: str) -> None:
    url = server.url
    produce(url, topic_name, 1)
    join = {"topics": [topic_name], "session_timeout_ms": 3000}
    assert error_code(request(url, "POST", "/v1/groups/..bad/members", join)) == (400, "INVALID_GROUP_NAME")
    assert error_code(request(url, "POST", "/v1/groups/g/members", b"{not json")) == (400, "INVALID_REQUEST")
    assert error_code(request(url, "POST", "/v1/groups/g/members", {"topics": []})) == (400, "INVALID_REQUEST")
    assert error_code(request(url, "POST", "/v1/groups/g/members", {"topics": ["nope"]})) == (404, "UNKNOWN_TOPIC")
    too_short = {"topics": [topic_name], "session_timeout_ms": 10}
    assert error_code(request(url, "POST", "/v1/groups/g/members", too_short)) == (400, "INVALID_REQUEST")
    assert error_code(request(url, "GET", "/v1/groups/never-joined")) == (404, "UNKNOWN_GROUP")
    status, answer = request(url, "POST", f"/v1/groups/{topic_name}-g/members", join)
    assert status == 200 and answer["assignment"]
    stranger = request(url, "POST", f"/v1/groups/{topic_name}-g/members/nobody/heartbeat", {"owned": []})
    assert error_code(stranger) == (409, "UNKNOWN_MEMBER") and stranger[1]["error"]["retriable"]  # type: ignore[index]
    commit = {"offsets": [{"topic": topic_name, "partition": 0, "offset": 1}]}
    assert error_code(request(url, "POST", f"/v1/groups/{topic_name}-g/offsets", commit)) == (409, "GROUP_ACTIVE")
    negative = {"member_id": answer["member_id"], "offsets": [{"topic": topic_name, "partition": 0, "offset": -1}]}
    assert error_code(request(url, "POST", f"/v1/groups/{topic_name}-g/offsets", negative)) == (400, "INVALID_REQUEST")
    reset = {"topic": topic_name, "to": "earliest"}
    assert error_code(request(url, "POST", f"/v1/groups/{topic_name}-g/offsets/reset", reset)) == (409, "GROUP_ACTIVE")
    no_offset = {"topic": topic_name, "to": "offset"}
    assert error_code(request(url, "POST", f"/v1/groups/{topic_name}-g/offsets/reset", no_offset))[0] == 400
    assert request(url, "DELETE", f"/v1/groups/{topic_name}-g/members/{answer['member_id']}")[0] == 204


@pytest.mark.slow
def test_members_share_the_partitions_and_every_message_is_consumed_once(
    server: StandaloneServer, topic_name: str
) -> None:
    produce(server.url, topic_name, 400, partitions=4)
    seen: list[tuple[str, int, int]] = []
    held: dict[str, set[tuple[str, int]]] = {"a": set(), "b": set()}
    lock = threading.Lock()

    def member(name: str) -> None:
        with Consumer(server.url, group=topic_name, topics=[topic_name], session_timeout_s=3, instance=name) as c:
            quiet = 0
            while quiet < 4:
                batch = c.poll(0.5)
                quiet = 0 if batch else quiet + 1
                with lock:
                    seen.extend((name, m.partition, m.offset) for m in batch)
                    held[name] |= {tp for tp in c.assignment if tp[0] == topic_name}
                c.commit()

    threads = [threading.Thread(target=member, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted((p, o) for _, p, o in seen) == sorted((p, o) for p in range(4) for o in range(100))
    assert held["a"] and held["b"]  # both held partitions of the topic at some point
    with Admin(server.url) as admin:
        described = admin.describe_group(topic_name)
    rows = [r for r in described["partitions"] if r["topic"] == topic_name]
    assert [(r["committed"], r["high_watermark"], r["lag"]) for r in rows] == [(100, 100, 0)] * 4
    assert described["state"] == "empty" and described["members"] == []  # both left on close


@pytest.mark.slow
def test_lag_is_the_high_watermark_minus_the_committed_offset(server: StandaloneServer, topic_name: str) -> None:
    produce(server.url, topic_name, 10)
    with Consumer(server.url, group=topic_name, topics=[topic_name], auto_commit=False, session_timeout_s=3) as c:
        got: list[Message] = []
        while len(got) < 10:
            got += c.poll(1.0)
        c.commit({(topic_name, 0): 4})
    with Admin(server.url) as admin:
        row = next(r for r in admin.describe_group(topic_name)["partitions"] if r["topic"] == topic_name)
    assert (row["committed"], row["high_watermark"], row["lag"]) == (4, 10, 6)
    # A new member starts at the commit, not at the beginning.
    with Consumer(server.url, group=topic_name, topics=[topic_name], session_timeout_s=3) as c:
        first = c.poll(5.0)
    assert first and first[0].offset == 4
    cli = subprocess.run(
        [sys.executable, "-m", "talos.cli", "groups", "describe", topic_name, "--url", server.url],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert f"{topic_name}" in cli.stdout and "LAG" in cli.stdout


@pytest.mark.slow
def test_retry_redelivers_after_the_delay_and_the_last_failure_goes_to_dead_letters(
    server: StandaloneServer, topic_name: str
) -> None:
    produce(server.url, topic_name, 1, prefix="order-")
    deliveries: list[tuple[float, Message]] = []
    group = f"{topic_name}-retry"
    with Consumer(server.url, group=group, topics=[topic_name], max_retries=2, session_timeout_s=3) as consumer:
        deadline = time.monotonic() + 30
        while len(deliveries) < 3 and time.monotonic() < deadline:
            for message in consumer.poll(0.5):
                deliveries.append((time.monotonic(), message))
                used = consumer.retry(message, delay=1.5, reason=f"failure {message.attempt + 1}")
                assert used == (f"__dlq.{group}" if message.attempt == 2 else f"__retry.{group}")
        consumer.commit()
    assert [m.attempt for _, m in deliveries] == [0, 1, 2]
    assert [m.value for _, m in deliveries] == [b"order-0"] * 3
    assert deliveries[1][1].topic == f"__retry.{group}"
    for (before, _), (after, _) in itertools.pairwise(deliveries):
        assert after - before >= 1.4  # redelivered only after the delay
    with Consumer(server.url, topics=[f"__dlq.{group}"]) as reader:
        dead = reader.poll(5.0)
    assert len(dead) == 1
    letter = dead[0]
    assert letter.value == b"order-0"
    assert letter.header("talos-attempt") == b"3"
    assert letter.header("talos-reason") == b"failure 3"
    assert letter.header("talos-origin-topic") == topic_name.encode()
    assert letter.header("talos-origin-offset") == b"0"


def test_broadcast_gives_every_member_every_message_with_offsets_per_instance(
    server: StandaloneServer, topic_name: str
) -> None:
    produce(server.url, topic_name, 30, partitions=3)
    options = {"group": topic_name, "topics": [topic_name], "broadcast": True, "session_timeout_s": 3}
    with Consumer(server.url, instance="one", **options) as one, Consumer(server.url, instance="two", **options) as two:
        for consumer in (one, two):
            got: list[Message] = []
            deadline = time.monotonic() + 20
            while len(got) < 30 and time.monotonic() < deadline:
                got += consumer.poll(0.5)
            assert sorted((m.partition, m.offset) for m in got) == [(p, o) for p in range(3) for o in range(10)]
            consumer.commit()
        with pytest.raises(Exception, match="exclusive"):
            one.retry(got[0])
    with Admin(server.url) as admin:
        rows = admin.describe_group(topic_name)["partitions"]
    assert sorted((r["instance"], r["partition"], r["lag"]) for r in rows if r["instance"]) == [
        (name, p, 0) for name in ("one", "two") for p in range(3)
    ]


@pytest.mark.slow
def test_reset_offsets_and_seek(server: StandaloneServer, topic_name: str) -> None:
    produce(server.url, topic_name, 20)
    with Consumer(server.url, group=topic_name, topics=[topic_name], session_timeout_s=3) as c:
        got: list[Message] = []
        while len(got) < 20:
            got += c.poll(1.0)
        middle = got[10].timestamp
    cli = [sys.executable, "-m", "talos.cli", "groups", "reset-offsets", topic_name, "--topic", topic_name]
    moved = subprocess.run([*cli, "--to-earliest", "--url", server.url], capture_output=True, text=True, check=True)
    assert f"{topic_name}/0 -> 0" in moved.stdout
    with Consumer(server.url, group=topic_name, topics=[topic_name], session_timeout_s=3, auto_commit=False) as c:
        first = c.poll(5.0)
        assert first[0].offset == 0  # re-read from the beginning
        c.seek(topic_name, 0, 15)
        assert c.poll(5.0)[0].offset == 15
    with Admin(server.url) as admin:
        at_time = admin.reset_offsets(topic_name, topic_name, to="timestamp", timestamp=middle)
        assert at_time[0]["offset"] <= 10
        assert admin.reset_offsets(topic_name, topic_name, to="offset", offset=999)[0]["offset"] == 20  # clamped


def test_rebalance_callbacks_and_a_fenced_commit(server: StandaloneServer, topic_name: str) -> None:
    produce(server.url, topic_name, 4, partitions=2)
    events: list[tuple[str, list[tuple[str, int]]]] = []
    first = Consumer(
        server.url,
        group=topic_name,
        topics=[topic_name],
        session_timeout_s=2,
        on_assign=lambda tps: events.append(("assign", sorted(tps))),
        on_revoke=lambda tps: events.append(("revoke", sorted(tps))),
    )
    try:
        first.poll(1.0)
        assert events[0][0] == "assign" and (topic_name, 0) in events[0][1] and (topic_name, 1) in events[0][1]
        with Consumer(server.url, group=topic_name, topics=[topic_name], session_timeout_s=2) as second:
            deadline = time.monotonic() + 15
            while not any(kind == "revoke" for kind, _ in events) and time.monotonic() < deadline:
                first.poll(0.3)
                second.poll(0.3)
            assert any(kind == "revoke" for kind, _ in events)
            lost = next(tps for kind, tps in events if kind == "revoke")
            with pytest.raises(CommitFailedError):
                first.commit({lost[0]: 1})  # no longer the holder: fenced
    finally:
        first.close()


def test_async_consumer_in_a_group(server: StandaloneServer, topic_name: str) -> None:
    produce(server.url, topic_name, 12, partitions=2)

    async def consume() -> list[Message]:
        got: list[Message] = []
        async with AsyncConsumer(server.url, group=topic_name, topics=[topic_name], session_timeout_s=3) as c:
            deadline = time.monotonic() + 20
            while len(got) < 12 and time.monotonic() < deadline:
                got += await c.poll(0.5)
            await c.commit()
        return got

    got = asyncio.run(consume())
    assert sorted((m.partition, m.offset) for m in got) == [(p, o) for p in range(2) for o in range(6)]
    with Admin(server.url) as admin:
        rows = [r for r in admin.describe_group(topic_name)["partitions"] if r["topic"] == topic_name]
        assert [r["lag"] for r in rows] == [0, 0]
        assert topic_name in admin.list_groups()
    status = Urllib3Transport().request("GET", f"{server.url}/metrics")
    samples = dict(line.rsplit(" ", 1) for line in status.body.decode().splitlines() if line.startswith("talos_group"))
    assert float(samples["talos_group_commits_total"]) >= 1
    assert float(samples["talos_groups_coordinated"]) >= 1
