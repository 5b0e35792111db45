"""Push subscriptions against a real standalone server: REST and WebSocket errors, sharing message by message,
redelivery after the ack timeout, dead letters, the window, key order, the asyncio twin, the CLI, kill -9 and
tenants. (Subscribers killed and paused while a cluster server dies: tests/cluster/test_subscriptions_cluster.py.)"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from talos import Admin, AsyncSubscriber, Consumer, NotFoundError, Producer, Subscriber, Urllib3Transport
from tests.e2e.conftest import StandaloneServer
from tests.helpers import running_standalone, secured_standalone

pytestmark = pytest.mark.slow


def request(url: str, method: str, path: str, body: object = None, token: str | None = None) -> tuple[int, dict]:
    transport = Urllib3Transport()
    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    try:
        payload = body if isinstance(body, bytes) else (orjson.dumps(body) if body is not None else None)
        answer = transport.request(method, url + path, body=payload, headers=headers)
        return answer.status, (orjson.loads(answer.body) if answer.body else {})
    finally:
        transport.close()


def code(answer: tuple[int, dict]) -> tuple[int, str]:
    status, doc = answer
    assert set(doc["error"]) >= {"code", "message", "retriable"}
    return status, doc["error"]["code"]


def ws_url(url: str, query: str) -> str:
    return url.replace("http://", "ws://") + "/v1/subscribe?" + query


def produce(url: str, topic: str, values: list[bytes], keys: list[bytes | None] | None = None) -> None:
    with Producer(url) as producer:
        for index, value in enumerate(values):
            producer.send(topic, value=value, key=keys[index] if keys else None)
        producer.flush()


def test_bad_requests_get_clear_errors(server: StandaloneServer, topic_name: str) -> None:
    url = server.url
    Admin(url).create_topic(topic_name, partitions=2)
    made = {"name": f"{topic_name}-s", "topic": topic_name}
    assert request(url, "POST", "/v1/subscriptions", made)[0] == 201
    assert code(request(url, "POST", "/v1/subscriptions", made)) == (409, "SUBSCRIPTION_EXISTS")
    assert code(request(url, "POST", "/v1/subscriptions", {**made, "name": "..x"})) == (
        400,
        "INVALID_SUBSCRIPTION_NAME",
    )
    assert code(request(url, "POST", "/v1/subscriptions", {"name": "n", "topic": "nope"}))[0] == 404
    assert code(request(url, "POST", "/v1/subscriptions", {**made, "ack_timeout_ms": -1})) == (400, "INVALID_REQUEST")
    assert code(request(url, "POST", "/v1/subscriptions", b"{oops")) == (400, "INVALID_REQUEST")
    assert code(request(url, "GET", "/v1/subscriptions/never")) == (404, "UNKNOWN_SUBSCRIPTION")
    settle = {"subscriber": "me", "op": "ack", "messages": [{"partition": 0, "offset": -1, "delivery": 1}]}
    assert code(request(url, "POST", f"/v1/subscriptions/{topic_name}-s/settle", settle)) == (400, "INVALID_REQUEST")
    # An unknown subscription over the WebSocket: an error frame, then a close with 4000 + the status.
    with connect(ws_url(url, "subscription=never")) as ws:
        frame = orjson.loads(ws.recv(timeout=5))
        assert frame["type"] == "error" and frame["error"]["code"] == "UNKNOWN_SUBSCRIPTION"
        with pytest.raises(ConnectionClosed):  # closed by the server
            ws.recv(timeout=5)
        assert ws.close_code == 4404
    # Bad frames are answered and the connection goes on.
    with connect(ws_url(url, f"subscription={topic_name}-s")) as ws:
        hello = orjson.loads(ws.recv(timeout=5))
        assert hello["type"] == "hello" and hello["local"] and hello["coordinator_url"] == url
        for bad in (
            "not json",
            "[1]",
            '{"type": "ack", "partition": "x", "offset": 0, "delivery": 1}',
            '{"type": "?"}',
        ):
            ws.send(bad)
            assert orjson.loads(ws.recv(timeout=5))["error"]["code"] == "INVALID_REQUEST"
        ws.send('{"type": "ping"}')
        assert orjson.loads(ws.recv(timeout=5)) == {"type": "pong"}
    with Subscriber(url, "never") as subscriber, pytest.raises(NotFoundError, match="never"):
        subscriber.receive(timeout=10)  # the SDK raises what the server closed with
    assert topic_name + "-s" in Admin(url).list_subscriptions()
    Admin(url).delete_subscription(topic_name + "-s")
    assert code(request(url, "GET", f"/v1/subscriptions/{topic_name}-s")) == (404, "UNKNOWN_SUBSCRIPTION")


def test_subscribers_share_messages_one_by_one(server: StandaloneServer, topic_name: str) -> None:
    url = server.url
    Admin(url).create_topic(topic_name, partitions=1)  # one partition: sharing is message by message
    Admin(url).create_subscription("share-" + topic_name, topic_name)
    received: dict[str, list[bytes]] = {"a": [], "b": []}
    confirmed: list[bool] = []

    def run(name: str) -> None:
        with Subscriber(url, "share-" + topic_name, window=5) as subscriber:
            while (message := subscriber.receive(timeout=3)) is not None:
                received[name].append(message.value or b"")
                time.sleep(0.005)  # both are busy: neither can take everything
                confirmed.append(message.ack().result(timeout=10))

    threads = [threading.Thread(target=run, args=(name,)) for name in received]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    produce(url, topic_name, [f"m{i}".encode() for i in range(200)])
    for thread in threads:
        thread.join(timeout=60)
    both = received["a"] + received["b"]
    assert sorted(both) == sorted(f"m{i}".encode() for i in range(200))  # each exactly once
    assert received["a"] and received["b"]
    assert all(confirmed) and len(confirmed) == 200
    partitions = Admin(url).describe_subscription("share-" + topic_name)["partitions"]
    assert partitions == [{"partition": 0, "floor": 200, "read_to": 200, "unsettled": 0, "leased": 0}]


def test_unacknowledged_messages_come_again_then_go_to_the_dead_letter_topic(
    server: StandaloneServer, topic_name: str
) -> None:
    url = server.url
    name = "dl-" + topic_name
    Admin(url).create_topic(topic_name, partitions=1)
    Admin(url).create_subscription(name, topic_name, ack_timeout_ms=400, max_deliveries=2)
    produce(url, topic_name, [b"poison", b"fine"])
    deliveries: list[tuple[bytes | None, int]] = []
    with Subscriber(url, name) as subscriber:
        while (message := subscriber.receive(timeout=2)) is not None:
            deliveries.append((message.value, message.delivery))
            if message.value == b"fine":
                assert message.ack().result(timeout=5)
            elif message.delivery == 1:
                message.nack()  # given back: at once to the next
            # the second delivery of the poison message is neither acked nor nacked: its lease runs out
    assert deliveries.count((b"fine", 1)) == 1
    assert [d for d in deliveries if d[0] == b"poison"] == [(b"poison", 1), (b"poison", 2)]
    with Consumer(url, topics=["__sub-dlq." + name], start="earliest") as consumer:
        dead = consumer.poll(timeout=5)
    assert [m.value for m in dead] == [b"poison"]
    headers = dict(dead[0].headers)
    assert headers["talos-topic"] == topic_name.encode() and headers["talos-offset"] == b"0"
    assert headers["talos-deliveries"] == b"2"
    assert Admin(url).describe_subscription(name)["partitions"][0]["floor"] == 2


def test_the_window_limits_what_a_subscriber_holds(server: StandaloneServer, topic_name: str) -> None:
    url = server.url
    Admin(url).create_topic(topic_name, partitions=2)
    produce(url, topic_name, [f"w{i}".encode() for i in range(50)])
    with Subscriber(url, "win-" + topic_name, topic=topic_name, start="earliest", window=5) as subscriber:
        held = [subscriber.receive(timeout=3) for _ in range(5)]
        assert all(held)
        assert subscriber.receive(timeout=1) is None  # five unsettled: nothing more comes
        held[0].ack()  # type: ignore[union-attr]
        assert subscriber.receive(timeout=3) is not None
        assert subscriber.receive(timeout=1) is None


def test_key_order_holds_a_keys_next_message_until_the_earlier_is_acknowledged(
    server: StandaloneServer, topic_name: str
) -> None:
    url = server.url
    Admin(url).create_topic(topic_name, partitions=1)
    keys: list[bytes | None] = [b"k1", b"k2", b"k1", b"k2", b"k1"]
    produce(url, topic_name, [f"v{i}".encode() for i in range(5)], keys)
    with Subscriber(url, "ko-" + topic_name, topic=topic_name, start="earliest", key_ordered=True) as subscriber:
        first = [subscriber.receive(timeout=3) for _ in range(2)]
        assert [m.value for m in first if m] == [b"v0", b"v1"]
        assert subscriber.receive(timeout=1) is None  # v2 waits for v0, v3 for v1
        first[1].ack()  # type: ignore[union-attr]
        assert subscriber.receive(timeout=3).value == b"v3"  # type: ignore[union-attr]
        first[0].nack()  # type: ignore[union-attr]
        again = subscriber.receive(timeout=3)
        assert again is not None and (again.value, again.delivery) == (b"v0", 2)


def test_the_asyncio_subscriber_and_the_cli(server: StandaloneServer, topic_name: str) -> None:
    url = server.url
    Admin(url).create_topic(topic_name, partitions=2)
    produce(url, topic_name, [f"a{i}".encode() for i in range(10)])

    async def consume() -> list[bytes | None]:
        values = []
        async with AsyncSubscriber(url, "as-" + topic_name, topic=topic_name, start="earliest") as subscriber:
            async for message in subscriber:
                values.append(message.value)
                assert await message.ack()
                if len(values) == 6:
                    break
        return values

    values = asyncio.run(consume())
    assert len(set(values)) == 6
    cli = subprocess.run(
        [sys.executable, "-m", "talos.cli", "subscribe", "as-" + topic_name, "--url", url, "--timeout", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    rest = [orjson.loads(line)["value"].encode() for line in cli.stdout.splitlines()]
    assert sorted(values + rest) == sorted(f"a{i}".encode() for i in range(10))  # type: ignore[type-var]
    assert "4 messages" in cli.stderr


def test_the_state_survives_kill_9(tmp_path: Path) -> None:
    with running_standalone(tmp_path / "data") as server:
        url = server.url
        Admin(url).create_topic("jobs", partitions=2)
        Admin(url).create_subscription("workers", "jobs", ack_timeout_ms=1000, start="earliest")
        produce(url, "jobs", [f"j{i}".encode() for i in range(60)])
        acked: set[bytes] = set()
        with Subscriber(url, "workers", window=40) as subscriber:
            held = [subscriber.receive(timeout=5) for _ in range(40)]
            for message in held[:25]:
                assert message is not None and message.ack().result(timeout=5)
                acked.add(message.value or b"")
            leased = {m.value for m in held[25:] if m}
            server.kill()  # 15 leased, 20 never delivered
        server.start()
        again: dict[bytes, int] = {}
        with Subscriber(url, "workers", window=100) as subscriber:
            while (message := subscriber.receive(timeout=3)) is not None:
                again[message.value or b""] = message.delivery
                assert message.ack().result(timeout=5)
        assert not acked & set(again)  # nothing acknowledged comes again
        assert set(again) | acked == {f"j{i}".encode() for i in range(60)}
        assert all(again[value] == 2 for value in leased)  # the leases were kept, and counted


def test_a_subscription_is_its_tenants(tmp_path: Path) -> None:
    with secured_standalone(tmp_path / "data", {"acme": None, "globex": None}) as secured:
        url = secured.url
        acme, globex = secured.token("acme"), secured.token("globex")
        with secured.admin("acme") as admin:
            admin.create_topic("orders", partitions=1)
            admin.create_subscription("billing", "orders", ack_timeout_ms=300, max_deliveries=1, start="earliest")
            admin.grant("orders", "globex", actions=["consume"])
        with Producer(url, token=acme) as producer:
            producer.send("orders", value=b"secret")
        # globex may consume the topic, but the subscription is acme's: 404 as if it did not exist
        assert code(request(url, "GET", "/v1/subscriptions/billing", token=globex)) == (404, "UNKNOWN_SUBSCRIPTION")
        pull = {"subscriber": "x", "max_messages": 10}
        assert code(request(url, "POST", "/v1/subscriptions/billing/pull", pull, token=globex))[0] == 404
        assert request(url, "GET", "/v1/subscriptions", token=globex)[1] == {"subscriptions": []}
        assert code(request(url, "DELETE", "/v1/subscriptions/billing", token=globex))[0] == 404
        with connect(ws_url(url, f"subscription=billing&token={globex}")) as ws:
            assert orjson.loads(ws.recv(timeout=5))["error"]["code"] == "UNKNOWN_SUBSCRIPTION"
        with connect(ws_url(url, "subscription=billing")) as ws:  # no token at all
            assert orjson.loads(ws.recv(timeout=5))["error"]["code"] == "UNAUTHENTICATED"
        # its state is reached only through the API; its dead letters only by its tenant, and read-only
        assert (
            code(request(url, "GET", "/v1/topics/__sub.billing/partitions/0/messages?offset=0", token=acme))[0] == 403
        )
        with Subscriber(url, "billing", token=acme) as subscriber:
            message = subscriber.receive(timeout=5)
            assert message is not None and message.value == b"secret"  # not acked: dead after 300 ms
            assert subscriber.receive(timeout=1.5) is None
        dlq = "/v1/topics/__sub-dlq.billing/partitions/0/messages?offset=0"
        status, page = request(url, "GET", dlq, token=acme)
        assert status == 200 and [m["value"] for m in page["messages"]] == ["secret"]
        assert code(request(url, "GET", dlq, token=globex)) == (404, "UNKNOWN_TOPIC")
        forged = {"messages": [{"value": "forged"}]}
        assert code(request(url, "POST", "/v1/topics/__sub-dlq.billing/messages", forged, token=acme))[0] == 403
        assert request(url, "GET", "/v1/subscriptions", token=acme)[1] == {"subscriptions": ["billing"]}


def test_a_traced_topics_pushed_messages_show_delivery_and_acknowledgement(
    server: StandaloneServer, topic_name: str
) -> None:
    url = server.url
    with Admin(url) as admin:
        admin.create_topic(topic_name, partitions=1)
        admin.alter_topic(topic_name, trace_sample=1)
        admin.create_subscription("tr-" + topic_name, topic_name)
    with Producer(url) as producer:
        stored = producer.send(topic_name, value=b"traced").result(timeout=10)
    with Subscriber(url, "tr-" + topic_name) as subscriber:
        message = subscriber.receive(timeout=5)
        assert message is not None and message.ack().result(timeout=5)

    def events() -> list[dict]:
        with Admin(url) as admin:
            return admin.trace(topic_name, stored.partition, stored.offset)["events"]  # type: ignore[no-any-return]

    deadline = time.monotonic() + 15
    while not {"delivered", "acked"} <= {e["event"] for e in events()} and time.monotonic() < deadline:
        time.sleep(0.3)  # the trace is written every second
    by_kind = {e["event"]: e for e in events()}
    assert by_kind["delivered"]["subscription"] == "tr-" + topic_name and by_kind["delivered"]["delivery"] == 1
    assert by_kind["acked"]["subscriber"] == by_kind["delivered"]["subscriber"]


def test_a_subscriptions_reads_are_under_its_tenants_fetch_quota(tmp_path: Path) -> None:
    with secured_standalone(tmp_path / "data", {"acme": {"fetch_bytes_per_s": 4000}}) as secured:
        url, token = secured.url, secured.token("acme")
        with secured.admin("acme") as admin:
            admin.create_topic("big", partitions=1)
        with Producer(url, token=token) as producer:
            for n in range(24):
                producer.send("big", value=bytes([65 + n]) * 1000)
        started = time.monotonic()
        with Subscriber(url, "bulk", token=token, topic="big", start="earliest", window=100) as subscriber:
            got = []
            while len(got) < 24 and (message := subscriber.receive(timeout=30)) is not None:
                got.append(message.value)
                message.ack()
        elapsed = time.monotonic() - started
        assert sorted(got) == sorted(bytes([65 + n]) * 1000 for n in range(24))
        # 24,000 bytes at acme's 4,000 bytes/s: the coordinator's reads wait for the quota (unlimited, well
        # under a second; a burst of a second's worth at most is read at once)
        assert elapsed > 3.0, elapsed


def test_partitions_added_to_the_topic_are_delivered_too(server: StandaloneServer, topic_name: str) -> None:
    url = server.url
    with Admin(url) as admin:
        admin.create_topic(topic_name, partitions=1)
        admin.create_subscription("grow-" + topic_name, topic_name)
        with Subscriber(url, "grow-" + topic_name) as subscriber:
            assert subscriber.receive(timeout=0.5) is None
            admin.alter_topic(topic_name, partitions=3)
            with Producer(url) as producer:
                for partition in range(3):
                    producer.send(topic_name, value=f"p{partition}".encode(), partition=partition)
            got = set()
            while len(got) < 3 and (message := subscriber.receive(timeout=15)) is not None:
                got.add((message.partition, message.value))
                message.ack()
    assert got == {(p, f"p{p}".encode()) for p in range(3)}
