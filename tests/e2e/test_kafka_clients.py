"""The Kafka listener against Kafka clients no one here wrote — confluent-kafka (librdkafka), kafka-python,
aiokafka and kcat — and a real ``talos standalone --kafka-port``: round trips with keys, headers, timestamps
and every compression codec, consumer groups, topics made and deleted, offsets by time, messages crossing
between the Kafka listener and REST both ways, and malformed requests."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient, NewTopic

from talos import Admin, Consumer, Producer
from tests.helpers import KafkaStandalone, running_kafka_standalone

pytestmark = pytest.mark.slow  # real servers and clients, seconds each


MAX_CONNECTIONS = 40


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaStandalone]:
    # A short body timeout and few connections, for the tests of stalled and flooding clients.
    env = {"TALOS_BODY_TIMEOUT_S": "2", "TALOS_MAX_CONNECTIONS": str(MAX_CONNECTIONS)}
    with running_kafka_standalone(tmp_path_factory.mktemp("kafka") / "data", env=env) as running:
        yield running


def _topic(kafka: KafkaStandalone, partitions: int = 1) -> str:
    name = f"k-{uuid.uuid4().hex[:10]}"
    with Admin(kafka.url) as admin:
        admin.create_topic(name, partitions=partitions)
    return name


def _consume_all(kafka: KafkaStandalone, topic: str, partitions: int, count: int, **conf: object) -> list[object]:
    """``count`` messages read from the start of every partition by a confluent-kafka consumer (no group)."""
    consumer = KafkaConsumer({"bootstrap.servers": kafka.bootstrap, "group.id": "unused", **conf})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[object] = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            out.append(message)
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_round_trip_keys_headers_timestamps_and_codecs(kafka: KafkaStandalone, codec: str) -> None:
    topic = _topic(kafka, partitions=3)
    producer = KafkaProducer(
        {"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True, "compression.type": codec, "linger.ms": 5}
    )
    sent = {}
    base = 1_700_000_000_000
    for i in range(300):
        key = f"key-{i % 11}".encode()
        value = f"value-{i}-{codec}".encode() * (1 + i % 5)
        headers = [("n", str(i).encode()), ("empty", b""), ("null", None)]
        producer.produce(topic, key=key, value=value, headers=headers, timestamp=base + i)
        sent[value] = (key, base + i, i)
    assert producer.flush(30) == 0
    received = _consume_all(kafka, topic, 3, len(sent))
    assert len(received) == len(sent)
    by_partition: dict[int, list[int]] = {}
    for message in received:
        key, timestamp, i = sent[message.value()]  # type: ignore[attr-defined]
        assert message.key() == key  # type: ignore[attr-defined]
        assert message.timestamp()[1] == timestamp  # type: ignore[attr-defined]
        assert message.headers() == [("n", str(i).encode()), ("empty", b""), ("null", None)]  # type: ignore[attr-defined]
        by_partition.setdefault(message.partition(), []).append(message.offset())  # type: ignore[attr-defined]
    for offsets in by_partition.values():  # every offset once, in order
        assert offsets == list(range(len(offsets)))
    # The same records through REST: one storage path.
    with Consumer(kafka.url, topics=[topic], start="earliest", wait_ms=0) as consumer:
        values: set[bytes] = set()
        deadline = time.monotonic() + 30
        while len(values) < len(sent) and time.monotonic() < deadline:
            values |= {m.value or b"" for m in consumer.poll(1.0)}
    assert values == set(sent)


CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _expected(i: int) -> tuple[bytes, bytes, int, list[tuple[str, bytes]]]:
    """Message ``i`` of the other clients' tests: key, value, timestamp and headers."""
    return f"k{i % 3}".encode(), f"v{i}".encode() * (1 + i % 4), 1_600_000_000_000 + i, [("i", str(i).encode())]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_producer_and_group_consumer(kafka: KafkaStandalone, codec: str) -> None:
    from kafka import KafkaConsumer as PyConsumer
    from kafka import KafkaProducer as PyProducer

    topic = _topic(kafka, partitions=2)
    compression = None if codec == "none" else codec
    producer = PyProducer(bootstrap_servers=kafka.bootstrap, compression_type=compression, acks="all")
    for i in range(100):
        key, value, timestamp, headers = _expected(i)
        producer.send(topic, key=key, value=value, headers=headers, timestamp_ms=timestamp)
    producer.flush(30)
    producer.close()
    group = f"py-{uuid.uuid4().hex[:6]}"
    consumer = PyConsumer(
        topic,
        bootstrap_servers=kafka.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=5000,
    )
    seen = sorted((m.key, m.value, m.timestamp, list(m.headers)) for m in consumer)
    consumer.commit()
    consumer.close()
    assert seen == sorted(_expected(i) for i in range(100))
    with Admin(kafka.url) as admin:  # the group's commits are Talos group offsets
        described = admin.describe_group(group)
    committed = {p["partition"]: p.get("committed") for p in described["partitions"]}
    assert sum(v or 0 for v in committed.values()) == 100, described


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_idempotent_producer_and_group(kafka: KafkaStandalone, codec: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = _topic(kafka, partitions=2)
    group = f"aio-{uuid.uuid4().hex[:6]}"

    async def run() -> list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes]]]]:
        producer = AIOKafkaProducer(
            bootstrap_servers=kafka.bootstrap,
            enable_idempotence=True,
            compression_type=None if codec == "none" else codec,
            linger_ms=5,
        )
        await producer.start()
        try:
            sent = [
                await producer.send(topic, key=key, value=value, timestamp_ms=timestamp, headers=headers)
                for key, value, timestamp, headers in map(_expected, range(50))
            ]
            await asyncio.gather(*sent)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=kafka.bootstrap, group_id=group, auto_offset_reset="earliest"
        )
        await consumer.start()
        got: list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes]]]] = []
        try:
            while len(got) < 50:
                batch = await consumer.getmany(timeout_ms=5000)
                assert batch, f"nothing more after {len(got)} messages"
                got += [(m.key, m.value, m.timestamp, list(m.headers)) for messages in batch.values() for m in messages]
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(run())
    assert sorted(got) == sorted(_expected(i) for i in range(50))  # type: ignore[arg-type]


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_produces_and_consumes(kafka: KafkaStandalone, codec: str) -> None:
    kcat = shutil.which("kcat")
    assert kcat, "kcat is missing: scripts/install --dev installs Debian's kcat"
    topic = _topic(kafka)
    lines = "".join(f"key{i}:line {i}\n" for i in range(20))
    subprocess.run(
        [kcat, "-b", kafka.bootstrap, "-t", topic, "-P", "-K:", "-H", "origin=kcat", "-z", codec],
        input=lines.encode(),
        check=True,
        timeout=60,
    )
    out = subprocess.run(
        [kcat, "-b", kafka.bootstrap, "-t", topic, "-C", "-o", "beginning", "-e", "-f", "%k|%s|%h|%o|%T\n"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    rows = [line.rsplit("|", 1) for line in out.splitlines()]
    assert [row for row, _ in rows] == [f"key{i}|line {i}|origin=kcat|{i}" for i in range(20)]
    stamps = [int(stamp) for _, stamp in rows]  # kcat's produce time, kept
    assert all(abs(stamp - time.time() * 1000) < 120_000 for stamp in stamps)


def test_rest_to_kafka_and_kafka_to_rest(kafka: KafkaStandalone) -> None:
    topic = _topic(kafka)
    with Producer(kafka.url) as producer:
        producer.send(topic, b"from rest", key=b"r", headers={"via": b"rest"}).result(30)
    [message] = _consume_all(kafka, topic, 1, 1)
    assert (message.key(), message.value(), message.headers()) == (b"r", b"from rest", [("via", b"rest")])  # type: ignore[attr-defined]
    kp = KafkaProducer({"bootstrap.servers": kafka.bootstrap})
    kp.produce(topic, key=b"k", value=b"from kafka", headers=[("via", b"kafka")])
    assert kp.flush(30) == 0
    with Consumer(kafka.url, topics=[topic], start="earliest", wait_ms=0) as consumer:
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            got += consumer.poll(1.0)
    assert [(m.key, m.value, dict(m.headers).get("via")) for m in got] == [
        (b"r", b"from rest", b"rest"),
        (b"k", b"from kafka", b"kafka"),
    ]


def test_create_and_delete_topics_through_kafka_admin(kafka: KafkaStandalone) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    name = f"made-{uuid.uuid4().hex[:8]}"
    topic = NewTopic(name, num_partitions=4, config={"retention.ms": "3600000"})
    admin.create_topics([topic])[name].result(30)
    with Admin(kafka.url) as talos:
        info = talos.describe_topic(name)
    assert (info.partitions, info.retention_ms) == (4, 3_600_000)
    with pytest.raises(KafkaException) as exists:
        admin.create_topics([NewTopic(name, num_partitions=1)])[name].result(30)
    assert exists.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    with pytest.raises(KafkaException) as invalid:
        admin.create_topics([NewTopic("../escape", num_partitions=1)])["../escape"].result(30)
    assert invalid.value.args[0].code() == 17  # INVALID_TOPIC_EXCEPTION
    metadata = admin.list_topics(timeout=10)
    assert len(metadata.topics[name].partitions) == 4
    dry = f"dry-{uuid.uuid4().hex[:8]}"  # validate_only: checked, not made
    admin.create_topics([NewTopic(dry, num_partitions=2)], validate_only=True)[dry].result(30)
    with pytest.raises(KafkaException) as dry_invalid:
        admin.create_topics([NewTopic("bad name", num_partitions=1)], validate_only=True)["bad name"].result(30)
    assert dry_invalid.value.args[0].code() == 17
    with Admin(kafka.url) as talos:
        assert dry not in [t.name for t in talos.list_topics()]
    admin.delete_topics([name])[name].result(30)
    with Admin(kafka.url) as talos:
        assert name not in [t.name for t in talos.list_topics()]


def test_offsets_for_times(kafka: KafkaStandalone) -> None:
    topic = _topic(kafka)
    producer = KafkaProducer({"bootstrap.servers": kafka.bootstrap})
    for i in range(10):
        producer.produce(topic, value=b"t%d" % i, timestamp=1_000_000 + i * 1000)
        producer.flush(30)  # one batch each: Talos finds a time to the batch
    consumer = KafkaConsumer({"bootstrap.servers": kafka.bootstrap, "group.id": "times"})
    try:
        [found] = consumer.offsets_for_times([TopicPartition(topic, 0, 1_000_000 + 4500)], timeout=10)
        assert found.offset == 5
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert (low, high) == (0, 10)
    finally:
        consumer.close()


def _frame(api_key: int, version: int, correlation: int, body: bytes = b"", client: bytes = b"raw") -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation, len(client)) + client
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def _read_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", _recv_exactly(sock, 4))[0]
    return _recv_exactly(sock, size)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(10)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_malformed_requests_close_the_connection_and_nothing_else(kafka: KafkaStandalone) -> None:
    hostile = [
        b"\x00\x00\x00\x05garba",  # a frame that is no request header
        struct.pack(">i", -1),  # a negative size
        struct.pack(">i", 1 << 30),  # a gigabyte: refused before it is read
        _frame(3, 12, 1, b"\xff\xff\xff\xff\xff\xff"),  # Metadata whose array length runs off the end
        _frame(26, 0, 1),  # EndTxn: not an API this listener speaks
        _frame(3, 99, 1),  # Metadata at a version no one has
    ]
    for request in hostile:
        with socket.create_connection(("127.0.0.1", kafka.port), timeout=10) as sock:
            sock.sendall(request)
            assert _closed(sock), request[:20]
    # ApiVersions at a version it does not know: Kafka's answer, error 35 and what it does support
    with socket.create_connection(("127.0.0.1", kafka.port), timeout=10) as sock:
        sock.sendall(_frame(18, 99, 7))
        answer = _read_frame(sock)
        correlation, error = struct.unpack(">ih", answer[:6])
        assert (correlation, error) == (7, 35)
    # and the listener still serves everyone
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    assert admin.list_topics(timeout=10).brokers


def test_a_stalled_request_is_closed_after_the_body_timeout(kafka: KafkaStandalone) -> None:
    with socket.create_connection(("127.0.0.1", kafka.port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", 100) + b"\x00\x12")  # 100 bytes announced, 2 sent, then nothing
        started = time.monotonic()
        assert _closed(sock)
        assert 1.5 < time.monotonic() - started < 8  # TALOS_BODY_TIMEOUT_S=2, checked every 0.25 s


def test_connections_past_the_limit_are_closed_and_the_others_served(kafka: KafkaStandalone) -> None:
    opened = [socket.create_connection(("127.0.0.1", kafka.port), timeout=10) for _ in range(MAX_CONNECTIONS + 10)]
    answered = 0
    try:
        for sock in opened:
            with contextlib.suppress(ConnectionError):
                sock.sendall(_frame(18, 0, 1))
                answered += struct.unpack(">ih", _read_frame(sock)[:6]) == (1, 0)
    finally:
        for sock in opened:
            sock.close()
    assert 1 <= answered <= MAX_CONNECTIONS  # (clients of earlier tests may hold some of the 40)


def test_transactional_producer_commits(kafka: KafkaStandalone) -> None:
    """Transactions are served (tests/e2e/test_kafka_transactions.py has the aborts, fencing and offsets): a
    committed transaction reaches a read_committed consumer."""
    topic = _topic(kafka, partitions=2)
    producer = KafkaProducer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for p in (0, 1):
        producer.produce(topic, value=f"v{p}".encode(), partition=p)
    producer.commit_transaction(30)
    got = _consume_all(kafka, topic, 2, 2, **{"isolation.level": "read_committed"})
    assert sorted(m.value() for m in got) == [b"v0", b"v1"]  # type: ignore[attr-defined]
