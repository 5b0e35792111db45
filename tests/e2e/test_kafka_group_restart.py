"""A Kafka group's membership outlives its coordinator's restart, as Kafka's group metadata does: a
confluent-kafka member that joined before the server was killed (kill -9) and restarted commits afterwards
with its member id and generation and is not told UNKNOWN_MEMBER_ID (Quix Streams stops on that)."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition

from talos import Admin, Producer
from tests.helpers import running_kafka_standalone


def test_a_member_commits_after_the_server_restarted_with_its_old_membership(tmp_path: Path) -> None:
    with running_kafka_standalone(tmp_path / "data") as kafka:
        with Admin(kafka.url) as admin:
            admin.create_topic("orders", partitions=2)
        with Producer(kafka.url) as producer:
            for i in range(20):
                producer.send("orders", f"m{i}", partition=i % 2)
        consumer = Consumer(
            {
                "bootstrap.servers": kafka.bootstrap,
                "group.id": "restartable",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 30_000,
                "heartbeat.interval.ms": 500,
            }
        )
        try:
            consumer.subscribe(["orders"])
            read = []
            deadline = time.monotonic() + 30
            while len(read) < 20 and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    read.append(message)
            assert len(read) == 20
            kafka.server.kill()
            kafka.server.start()  # same data directory, same ports
            last = read[-1]
            # A synchronous commit of what was read, by the member that joined before the restart.
            committed = None
            refusals: list[int] = []
            deadline = time.monotonic() + 30
            while committed is None and 25 not in refusals and time.monotonic() < deadline:
                try:
                    committed = consumer.commit(
                        offsets=[TopicPartition("orders", last.partition(), last.offset() + 1)], asynchronous=False
                    )
                except KafkaException as exc:
                    refusals.append(exc.args[0].code())
                    time.sleep(0.5)  # the coordinator is still starting (retriable)
            assert 25 not in refusals, "UNKNOWN_MEMBER_ID: the membership did not outlive the restart"
            assert committed is not None and committed[0].error is None, refusals
            assert consumer.committed([TopicPartition("orders", last.partition())], timeout=10)[0].offset == (
                last.offset() + 1
            )
        finally:
            consumer.close()
