"""The Python SDK against a real standalone server (and the producer's retries against a scripted one)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping

import orjson
import pytest

from talos import (
    Admin,
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    ConflictError,
    Consumer,
    FunctionTransport,
    InvalidRequestError,
    NotFoundError,
    OffsetOutOfRangeError,
    Producer,
    RecordData,
    Response,
    UnavailableError,
    Urllib3Transport,
    decode_records,
    iter_batches,
    partition_for_key,
)
from talos._transport import check
from tests.e2e.conftest import StandaloneServer


@pytest.mark.slow
def test_admin(server: StandaloneServer, topic_name: str) -> None:
    with Admin(server.url) as admin:
        created = admin.create_topic(topic_name, partitions=2, retention_ms=3600_000)
        assert (created.name, created.partitions, created.retention_ms) == (topic_name, 2, 3600_000)
        with pytest.raises(ConflictError):
            admin.create_topic(topic_name)
        with pytest.raises(InvalidRequestError):
            admin.create_topic("../etc")
        assert topic_name in [t.name for t in admin.list_topics()]
        assert admin.alter_topic(topic_name, partitions=3).partitions == 3
        assert [p.partition for p in admin.describe_topic(topic_name).partition_offsets] == [0, 1, 2]
        offsets = admin.offsets(topic_name, 0)
        assert (offsets["partition"], offsets["earliest"], offsets["latest"]) == (0, 0, 0)
        admin.delete_topic(topic_name)
        with pytest.raises(NotFoundError):
            admin.describe_topic(topic_name)


def test_produce_and_consume_in_order(server: StandaloneServer, topic_name: str) -> None:
    Admin(server.url).create_topic(topic_name, partitions=4)
    count = 5000
    with Producer(server.url, linger_ms=2, batch_bytes=16 * 1024) as producer:
        futures = [
            producer.send(topic_name, f"v{i}".encode(), key=f"k{i % 37}", headers={"n": str(i)}) for i in range(count)
        ]
        producer.flush()
        stored = [f.result() for f in futures]
    for i, meta in enumerate(stored):
        assert meta.partition == partition_for_key(f"k{i % 37}".encode(), 4)
    with Consumer(server.url, topics=[topic_name]) as consumer:
        messages = []
        while len(messages) < count:
            batch = consumer.poll(5.0)
            assert batch, "no progress"
            messages += batch
        assert consumer.poll(0.2) == []
    by_value = {m.value: m for m in messages}
    assert len(by_value) == count
    for i, meta in enumerate(stored):
        message = by_value[f"v{i}".encode()]
        assert (message.partition, message.offset) == (meta.partition, meta.offset)
        assert message.key == f"k{i % 37}".encode()
        assert message.headers == (("n", str(i).encode()),)
    for partition in range(4):  # per-key order = send order
        values = [int(m.value[1:]) for m in messages if m.partition == partition]  # type: ignore[index]
        assert values == sorted(values)


def test_send_many_round_trip(server: StandaloneServer, topic_name: str) -> None:
    """One send_many call of values, keyed pairs and a record with headers, idempotent, over several batches
    per partition: the one future's answer is where the consumer finds each record."""
    Admin(server.url).create_topic(topic_name, partitions=3)
    records: list[bytes | tuple[bytes, bytes] | RecordData] = [
        f"v{i}".encode() if i % 3 else (f"k{i % 7}".encode(), f"v{i}".encode()) for i in range(3000)
    ]
    records[10] = RecordData(b"v10", b"k3", [("h", b"1")])
    with Producer(server.url, idempotent=True, linger_ms=2, batch_bytes=8 * 1024) as producer:
        stored = producer.send_many(topic_name, records).result(timeout=30)
    with Consumer(server.url, topics=[topic_name]) as consumer:
        messages = []
        while len(messages) < len(records):
            batch = consumer.poll(5.0)
            assert batch, "no progress"
            messages += batch
    at = {(m.partition, m.offset): m for m in messages}
    assert len(at) == len(records)
    for i, place in enumerate(stored):
        message = at[(place.partition, place.offset)]
        assert message.value == f"v{i}".encode()
        if i % 3 == 0:
            assert (message.key, place.partition) == (f"k{i % 7}".encode(), partition_for_key(message.key, 3))
    assert at[(stored[10].partition, stored[10].offset)].headers == (("h", b"1"),)


def test_consumer_seek_and_explicit_partitions(server: StandaloneServer, topic_name: str) -> None:
    Admin(server.url).create_topic(topic_name, partitions=2)
    with Producer(server.url) as producer:
        for i in range(20):
            producer.send(topic_name, f"{i}".encode(), partition=1)
    with Consumer(server.url, partitions=[(topic_name, 1)], start="latest") as consumer:
        assert consumer.poll(0.2) == []
        consumer.seek(topic_name, 1, 15)
        assert [m.offset for m in consumer.poll(2.0)] == [15, 16, 17, 18, 19]
        consumer.seek(topic_name, 1, 500)  # out of range: moves to the end instead of failing
        assert consumer.poll(0.3) == []
        assert consumer.position(topic_name, 1) == 20
        consumer.seek_to_beginning()
        assert consumer.poll(2.0)[0].offset == 0


@pytest.mark.slow
def test_consumer_long_poll_gets_new_messages(server: StandaloneServer, topic_name: str) -> None:
    Admin(server.url).create_topic(topic_name, partitions=3)
    # 2 s long polls: closing the consumer waits for those in flight (the partitions that got nothing).
    with Consumer(server.url, topics=[topic_name], start="latest", wait_ms=2000) as consumer:
        assert consumer.poll(0.1) == []

        def send_later() -> None:
            with Producer(server.url) as producer:
                producer.send(topic_name, b"hi", partition=2)

        timer = threading.Timer(0.3, send_later)
        timer.start()
        got = consumer.poll(10.0)
        timer.join()
        assert [(m.partition, m.value) for m in got] == [(2, b"hi")]


def test_asyncio_twins(server: StandaloneServer, topic_name: str) -> None:
    async def run() -> None:
        async with AsyncAdmin(server.url) as admin:
            await admin.create_topic(topic_name, partitions=2)
            with pytest.raises(ConflictError):
                await admin.create_topic(topic_name)
        async with AsyncProducer(server.url) as producer:
            futures = [await producer.send(topic_name, f"{i}".encode(), key=f"{i % 5}") for i in range(500)]
            await producer.flush()
            stored = [await f for f in futures]
        async with AsyncConsumer(server.url, topics=[topic_name]) as consumer:
            got = []
            while len(got) < 500:
                got += await consumer.poll(5.0)
        assert {(m.partition, m.offset) for m in got} == {(s.partition, s.offset) for s in stored}

    asyncio.run(run())


def test_unknown_topic_fails_the_send(server: StandaloneServer) -> None:
    with Producer(server.url) as producer, pytest.raises(NotFoundError):
        producer.send("no-such-topic", b"x")


def test_out_of_range_error_carries_the_bounds(server: StandaloneServer, topic_name: str) -> None:
    Admin(server.url).create_topic(topic_name)
    answer = Urllib3Transport().request(
        "GET", f"{server.url}/v1/topics/{topic_name}/partitions/0/messages", params={"offset": 9}
    )
    with pytest.raises(OffsetOutOfRangeError) as info:
        check(answer)
    assert (info.value.earliest, info.value.latest) == (0, 0)


class ScriptedServer:
    """Answers produce requests from a script: 503 a few times, then success; records what it got."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.batches: list[bytes] = []
        self.offset = 0

    def __call__(self, method: str, url: str, params: Mapping[str, str | int], body: bytes | None) -> Response:
        if method == "GET":  # routes
            routes = {"mode": "standalone", "ring_version": 0, "topics": {"t": [{"partition": 0, "url": None}]}}
            return Response(200, {}, orjson.dumps(routes))
        if self.failures > 0:
            self.failures -= 1
            error = {"error": {"code": "NOT_OWNER", "message": "moving", "retriable": True}}
            return Response(503, {"retry-after": "0.01"}, orjson.dumps(error))
        assert body is not None
        self.batches.append(body)
        count = len(decode_records(body))
        base, self.offset = self.offset, self.offset + count
        return Response(200, {}, orjson.dumps({"results": [{"partition": 0, "offset": base, "count": count}]}))


def test_producer_retries_retriable_errors_in_order() -> None:
    script = ScriptedServer(failures=3)
    with Producer(
        "http://scripted", transport=FunctionTransport(script), linger_ms=1, batch_bytes=64, retry_backoff_ms=1
    ) as producer:
        futures = [producer.send("t", f"{i}".encode()) for i in range(30)]
        producer.flush()
    assert [f.result().offset for f in futures] == list(range(30))
    sent = [r.value for batch in script.batches for r in decode_records(batch)]
    assert sent == [f"{i}".encode() for i in range(30)]  # no reordering, nothing twice


def test_producer_gives_up_after_the_delivery_timeout() -> None:
    script = ScriptedServer(failures=10**9)
    with Producer(
        "http://scripted", transport=FunctionTransport(script), retry_backoff_ms=1, delivery_timeout_s=0.2
    ) as producer:
        future = producer.send("t", b"x")
        producer.flush()
    with pytest.raises(UnavailableError):
        future.result()


def test_compressed_batches_through_the_server(server: StandaloneServer, topic_name: str) -> None:
    """Each codec: produced with the SDK, stored compressed as sent, read back by the SDK consumer, the JSON
    fetch and the time index."""
    admin = Admin(server.url)
    http = Urllib3Transport()
    for codec, kafka_id in {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}.items():
        topic = f"{topic_name}-{codec}"
        admin.create_topic(topic, partitions=1)
        sent = [
            (f"k{i % 5}".encode(), orjson.dumps({"n": i, "msg": "served " * 8}), 1_700_000_000_000 + i)
            for i in range(300)
        ]
        with Producer(server.url, compression=codec, batch_bytes=8 * 1024, linger_ms=20) as producer:
            for key, value, stamp in sent:
                producer.send(topic, value, key=key, headers={"c": codec}, timestamp=stamp)
            producer.flush()
        path = f"{server.url}/v1/topics/{topic}/partitions/0/messages"
        raw = http.request("GET", path, params={"offset": 0}, headers={"accept": "application/vnd.talos.batch"})
        stored = [header for _, header in iter_batches(raw.body)]
        assert len(stored) > 1 and {h.flags for h in stored} == {kafka_id}
        assert sum(h.length for h in stored) < len(sent) * 60  # compressed: the values alone are ~75 bytes each
        with Consumer(server.url, topics=[topic], start="earliest") as consumer:
            got = consumer.poll(5.0)
            while len(got) < len(sent):
                batch = consumer.poll(5.0)
                assert batch, "no progress"
                got += batch
        assert [(m.offset, m.key, m.value, m.headers, m.timestamp) for m in got] == [
            (i, key, value, (("c", codec.encode()),), stamp) for i, (key, value, stamp) in enumerate(sent)
        ]
        answer = http.request("GET", path, params={"offset": 100, "max_messages": 1000}).json()
        assert isinstance(answer, dict) and "skipped" not in answer
        assert [(m["key"], m["value"], m["headers"]) for m in answer["messages"]] == [
            (key.decode(), value.decode(), {"c": codec}) for key, value, _ in sent[100:]
        ]
        assert admin.offsets(topic, 0, timestamp=sent[150][2])["offset"] == 150
