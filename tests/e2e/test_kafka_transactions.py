"""Kafka transactions through the Kafka listener, with clients no one here wrote — confluent-kafka (librdkafka),
aiokafka and kafka-python — against a real ``talos standalone --kafka-port``: a committed transaction is seen
by read_committed consumers and an aborted one is not (read_uncommitted consumers see both), a second instance
of a transactional id fences the first, and offsets sent to a transaction are committed with it
(consume-transform-produce) or not at all."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka import Producer as KafkaProducer

from server.kafka.protocol.errors import ErrorCode
from server.kafka.records import talos_to_kafka
from talos import Admin, RecordData, encode_batch
from talos._codec import TRANSACTIONAL
from tests.helpers import KafkaStandalone, running_kafka_standalone
from tests.kafka_wire import KafkaWire

pytestmark = pytest.mark.slow  # real servers and clients, seconds each


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaStandalone]:
    with running_kafka_standalone(tmp_path_factory.mktemp("kafka-txn") / "data") as running:
        yield running


def _topic(kafka: KafkaStandalone, partitions: int = 2) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    with Admin(kafka.url) as admin:
        admin.create_topic(name, partitions=partitions)
    return name


def _txn_producer(kafka: KafkaStandalone, transactional_id: str) -> KafkaProducer:
    producer = KafkaProducer({"bootstrap.servers": kafka.bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(30)
    return producer


def _read_until(kafka: KafkaStandalone, topic: str, partitions: int, last: set[bytes], isolation: str) -> list[bytes]:
    """Every value of the topic from the start, read until each value in ``last`` was seen (a committed
    transaction written after everything the test looks at: once it is read, nothing before it is pending)."""
    consumer = KafkaConsumer({"bootstrap.servers": kafka.bootstrap, "group.id": "unused", "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while not last <= set(seen) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            seen.append(message.value())
    finally:
        consumer.close()
    assert last <= set(seen), f"{isolation}: read {seen}"
    return seen


def test_confluent_commit_and_abort_across_partitions(kafka: KafkaStandalone) -> None:
    topic = _topic(kafka)
    producer = _txn_producer(kafka, f"tx-{uuid.uuid4().hex[:8]}")
    producer.begin_transaction()
    for p in (0, 1):
        producer.produce(topic, value=f"committed-{p}".encode(), partition=p)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for p in (0, 1):
        producer.produce(topic, value=f"aborted-{p}".encode(), partition=p)
    producer.flush(30)  # written, then aborted: the records are in the log, behind an abort marker
    producer.abort_transaction(30)
    producer.begin_transaction()
    for p in (0, 1):
        producer.produce(topic, value=f"end-{p}".encode(), partition=p)
    producer.commit_transaction(30)
    ends = {b"end-0", b"end-1"}

    committed = _read_until(kafka, topic, 2, ends, "read_committed")
    assert sorted(committed) == [b"committed-0", b"committed-1", b"end-0", b"end-1"]
    uncommitted = _read_until(kafka, topic, 2, ends, "read_uncommitted")
    assert sorted(uncommitted) == [
        b"aborted-0",
        b"aborted-1",
        b"committed-0",
        b"committed-1",
        b"end-0",
        b"end-1",
    ]


def test_confluent_second_instance_fences_the_first(kafka: KafkaStandalone) -> None:
    topic = _topic(kafka)
    transactional_id = f"tx-{uuid.uuid4().hex[:8]}"
    first = _txn_producer(kafka, transactional_id)
    first.begin_transaction()
    first.produce(topic, value=b"zombie", partition=0)
    first.flush(30)
    second = _txn_producer(kafka, transactional_id)  # aborts the first's open transaction, at a newer epoch
    with pytest.raises(KafkaException) as caught:
        first.produce(topic, value=b"zombie-2", partition=1)
        first.commit_transaction(30)
    error: KafkaError = caught.value.args[0]
    assert error.fatal() or error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED), error
    second.begin_transaction()
    second.produce(topic, value=b"survivor", partition=0)
    second.commit_transaction(30)
    assert _read_until(kafka, topic, 2, {b"survivor"}, "read_committed") == [b"survivor"]


def test_confluent_consume_transform_produce(kafka: KafkaStandalone) -> None:
    """Offsets sent to a transaction are committed with it, and not at all when it aborts."""
    source, sink = _topic(kafka, partitions=1), _topic(kafka, partitions=1)
    feeder = KafkaProducer({"bootstrap.servers": kafka.bootstrap})
    for i in range(6):
        feeder.produce(source, value=f"in-{i}".encode(), partition=0)
    assert feeder.flush(30) == 0
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = KafkaConsumer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    producer = _txn_producer(kafka, f"tx-{uuid.uuid4().hex[:8]}")
    try:
        consumer.subscribe([source])
        taken: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(taken) < 3 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                taken.append(message.value())
        assert len(taken) == 3
        producer.begin_transaction()
        for value in taken:
            producer.produce(sink, value=value.replace(b"in", b"out"), partition=0)
        producer.send_offsets_to_transaction([TopicPartition(source, 0, 3)], consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        producer.begin_transaction()
        producer.produce(sink, value=b"out-aborted", partition=0)
        producer.send_offsets_to_transaction([TopicPartition(source, 0, 6)], consumer.consumer_group_metadata(), 30)
        producer.abort_transaction(30)
        deadline = time.monotonic() + 30
        while True:  # the commit's marker settles the offset; until then it is unstable
            (committed,) = consumer.committed([TopicPartition(source, 0)], 10)
            if committed.offset == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert committed.offset == 3  # the aborted transaction's offset 6 was dropped
    finally:
        consumer.close()
    producer.begin_transaction()
    producer.produce(sink, value=b"out-end", partition=0)
    producer.commit_transaction(30)
    assert _read_until(kafka, sink, 1, {b"out-end"}, "read_committed") == [b"out-0", b"out-1", b"out-2", b"out-end"]


def test_aiokafka_transactions(kafka: KafkaStandalone) -> None:
    topic = _topic(kafka)

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, transactional_id=f"tx-{uuid.uuid4().hex[:8]}")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait(topic, b"aio-committed", partition=0)
                await producer.send_and_wait(topic, b"aio-committed-1", partition=1)
            with pytest.raises(RuntimeError):
                async with producer.transaction():
                    await producer.send_and_wait(topic, b"aio-aborted", partition=1)
                    raise RuntimeError("abort it")
            async with producer.transaction():
                await producer.send_and_wait(topic, b"aio-end", partition=1)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=kafka.bootstrap, isolation_level="read_committed", auto_offset_reset="earliest"
        )
        await consumer.start()
        seen: list[bytes] = []
        try:
            consumer.assign([AioTopicPartition(topic, 0), AioTopicPartition(topic, 1)])
            await consumer.seek_to_beginning()
            deadline = time.monotonic() + 30
            while b"aio-end" not in seen and time.monotonic() < deadline:
                for messages in (await consumer.getmany(timeout_ms=500)).values():
                    seen += [m.value for m in messages]
        finally:
            await consumer.stop()
        return seen

    assert sorted(asyncio.run(run())) == [b"aio-committed", b"aio-committed-1", b"aio-end"]


def test_kafka_python_transactions(kafka: KafkaStandalone) -> None:
    from kafka import KafkaProducer as PythonProducer

    topic = _topic(kafka)
    producer = PythonProducer(bootstrap_servers=kafka.bootstrap, transactional_id=f"tx-{uuid.uuid4().hex[:8]}")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"py-committed", partition=0)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, b"py-aborted", partition=1).get(30)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"py-end", partition=1)
        producer.commit_transaction()
    finally:
        producer.close(10)
    assert sorted(_read_until(kafka, topic, 2, {b"py-end"}, "read_committed")) == [b"py-committed", b"py-end"]


# ---------------------------------------------------------------------------------------------------- on the wire


def _txn_batch(values: list[bytes], producer_id: int, epoch: int, sequence: int) -> bytes:
    batch = encode_batch(
        [RecordData(v, None, [], None) for v in values],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        attributes=TRANSACTIONAL,
    )
    return talos_to_kafka(bytes(batch))


def _produce(wire: KafkaWire, transactional_id: str, topic: str, partition: int, records: bytes) -> int:
    body = {
        "transactional_id": transactional_id,
        "acks": -1,
        "timeout_ms": 10000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    }
    return int(wire.call(0, 9, body)["responses"][0]["partition_responses"][0]["error_code"])


def _add(
    wire: KafkaWire, version: int, transactional_id: str, pid: int, epoch: int, topics: dict[str, list[int]]
) -> dict[str, int]:
    body = {
        "v3_and_below_transactional_id": transactional_id,
        "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": t, "partitions": p} for t, p in topics.items()],
    }
    answer = wire.call(24, version, body)
    return {
        f"{t['name']}/{p['partition_index']}": p["partition_error_code"]
        for t in answer["results_by_topic_v3_and_below"]
        for p in t["results_by_partition"]
    }


def test_wire_error_codes_and_admin_views(kafka: KafkaStandalone) -> None:
    """What a client library would retry or hide: each answer's exact code, by request version."""
    topic = _topic(kafka)
    transactional_id = f"tx-{uuid.uuid4().hex[:8]}"
    with KafkaWire(kafka.bootstrap) as wire:
        found = wire.call(10, 1, {"key": transactional_id, "key_type": 1})
        assert found["error_code"] == 0 and found["port"] == kafka.port
        init = wire.call(22, 1, {"transactional_id": transactional_id, "transaction_timeout_ms": 60000})
        assert init["error_code"] == 0
        pid, epoch = init["producer_id"], init["producer_epoch"]
        # All or nothing: an unknown partition fails the request, the others are not attempted.
        refused = _add(wire, 1, transactional_id, pid, epoch, {topic: [0], "no-such-topic": [0]})
        assert refused == {
            f"{topic}/0": ErrorCode.OPERATION_NOT_ATTEMPTED,
            "no-such-topic/0": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        assert _add(wire, 1, transactional_id, pid, epoch, {topic: [0]}) == {f"{topic}/0": 0}
        # A batch for a partition the transaction did not add is refused by the partition (KIP-890 part 1).
        assert (
            _produce(wire, transactional_id, topic, 1, _txn_batch([b"x"], pid, epoch, 0)) == ErrorCode.INVALID_TXN_STATE
        )
        assert _produce(wire, transactional_id, topic, 0, _txn_batch([b"in"], pid, epoch, 0)) == 0
        assert (
            _produce(wire, "", topic, 0, _txn_batch([b"x"], pid, epoch, 1))
            == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        )

        (described,) = wire.call(65, 0, {"transactional_ids": [transactional_id]})["transaction_states"]
        assert described["error_code"] == 0 and described["transaction_state"] == "Ongoing"
        assert described["topics"] == [{"topic": topic, "partitions": [0]}]
        listed = wire.call(66, 1, {"state_filters": ["Ongoing", "Bogus"], "producer_id_filters": [pid]})
        assert listed["unknown_state_filters"] == ["Bogus"]
        assert [t["transactional_id"] for t in listed["transaction_states"]] == [transactional_id]
        producers = wire.call(61, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]})
        (state,) = producers["topics"][0]["partitions"][0]["active_producers"]
        assert (state["producer_id"], state["producer_epoch"], state["current_txn_start_offset"]) == (pid, epoch, 0)

        # A new instance fences this one: its end is refused, PRODUCER_FENCED only for clients that know it.
        again = wire.call(22, 1, {"transaction_timeout_ms": 60000, "transactional_id": transactional_id})
        for _ in range(50):  # the open transaction is aborted first: CONCURRENT_TRANSACTIONS, then the new epoch
            if again["error_code"] != ErrorCode.CONCURRENT_TRANSACTIONS:
                break
            time.sleep(0.1)
            again = wire.call(22, 1, {"transaction_timeout_ms": 60000, "transactional_id": transactional_id})
        assert again["error_code"] == 0 and again["producer_epoch"] > epoch
        end = {"transactional_id": transactional_id, "producer_id": pid, "producer_epoch": epoch, "committed": True}
        assert wire.call(26, 1, end)["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH
        assert wire.call(26, 2, end)["error_code"] == ErrorCode.PRODUCER_FENCED
        (aborted,) = wire.call(65, 0, {"transactional_ids": [transactional_id]})["transaction_states"]
        assert aborted["transaction_state"] in ("Empty", "CompleteAbort")
        unknown = wire.call(65, 0, {"transactional_ids": [f"never-{transactional_id}"]})["transaction_states"]
        assert unknown[0]["error_code"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
