"""One confluent-kafka consumer group member as its own process: it logs (JSON lines, flushed) each assignment
change (``assign``, ``revoke``, ``lost``, with ``time.time()`` and the partitions), every message it processes
(partition, offset, value), and each commit that failed; it commits synchronously after each batch it processed.
Processing takes PROCESS_S a message (a sleep), so that a group of them takes a while over a topic.

    python -m tests.e2e.kafka_member BOOTSTRAP GROUP TOPIC NAME LOG PROCESS_S

SIGTERM: stop consuming, close (leaving the group), log ``closed``.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 1000


def main() -> None:
    bootstrap, group, topic, name, log_path, process_s = sys.argv[1:7]
    out = open(log_path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def log(event: str, **fields: object) -> None:
        out.write(json.dumps({"t": time.time(), "member": name, "event": event, **fields}) + "\n")

    def changed(event: str) -> Callable[[Consumer, list[TopicPartition]], None]:
        return lambda _consumer, tps: log(event, partitions=sorted(tp.partition for tp in tps))

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        }
    )
    consumer.subscribe([topic], on_assign=changed("assign"), on_revoke=changed("revoke"), on_lost=changed("lost"))
    log("started")
    try:
        while not stop.is_set():
            batch = consumer.consume(num_messages=50, timeout=0.2)
            processed: dict[int, int] = {}  # partition → the offset after the last one processed
            for message in batch:
                if message.error() is not None:
                    log("error", error=str(message.error()))
                    continue
                time.sleep(float(process_s))
                partition, offset = _where(message)
                processed[partition] = max(processed.get(partition, 0), offset + 1)
                value = (message.value() or b"").decode()
                log("msg", partition=partition, offset=offset, value=value)
            if processed:
                try:
                    consumer.commit(
                        offsets=[TopicPartition(topic, p, o) for p, o in processed.items()], asynchronous=False
                    )
                except KafkaException as exc:
                    log("commit-failed", error=str(exc.args[0]), offsets=processed)
    finally:
        consumer.close()
        log("closed")


def _where(message: Message) -> tuple[int, int]:
    partition, offset = message.partition(), message.offset()
    assert partition is not None and offset is not None  # a message that is no error has both
    return partition, offset


if __name__ == "__main__":
    main()
