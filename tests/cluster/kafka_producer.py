"""An idempotent confluent-kafka producer as its own process, for the cluster tests: it writes ``kafka:<n>`` for
n < COUNT to partition n % PARTITIONS, RATE a second, over SASL PLAIN with the token in TALOS_TOKEN, and logs
(JSON lines, flushed) each delivery report: the value and its partition and offset, or its error. Its last line
is ``{"event": "done", ...}`` once every report is in (or the flush gave up).

    python -m tests.cluster.kafka_producer BOOTSTRAP TOPIC PARTITIONS COUNT RATE LOG
"""

from __future__ import annotations

import json
import os
import sys
import time

from confluent_kafka import KafkaError, Message, Producer

MESSAGE_TIMEOUT_MS = 90_000  # far beyond a failover (session 3 s + reassignment 2-4 s)


def main() -> None:
    bootstrap, topic, partitions, count, rate, log_path = sys.argv[1:7]
    out = open(log_path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process

    def log(**fields: object) -> None:
        out.write(json.dumps({"t": time.time(), **fields}) + "\n")

    def report(error: KafkaError | None, message: Message) -> None:
        value = (message.value() or b"").decode()
        if error is not None:
            log(event="error", value=value, partition=message.partition(), error=str(error))
        else:
            log(event="ack", value=value, partition=message.partition(), offset=message.offset())

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "kafka-producer",
            "sasl.password": os.environ["TALOS_TOKEN"],
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": MESSAGE_TIMEOUT_MS,
            "reconnect.backoff.max.ms": 1000,
            "client.id": "kafka-cluster-producer",
        }
    )
    log(event="started")
    interval = 1.0 / float(rate)
    started = time.monotonic()
    for n in range(int(count)):
        while time.monotonic() < started + n * interval:  # a steady pace, serving delivery reports meanwhile
            producer.poll(min(interval, 0.01))
        producer.produce(topic, value=f"kafka:{n}".encode(), partition=n % int(partitions), on_delivery=report)
        producer.poll(0)
    log(event="produced", count=int(count))
    left = producer.flush(MESSAGE_TIMEOUT_MS / 1000 + 30)
    log(event="done", unflushed=left)


if __name__ == "__main__":
    main()
