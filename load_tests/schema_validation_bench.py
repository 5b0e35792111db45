"""What produce-time schema validation costs: one ``talos standalone`` with a Kafka listener, two topics of
``PARTITIONS`` partitions, one with ``value_schema_validation`` on and one without, the same Avro schema
registered under both topics' subjects, and the same framed 1 KiB values (magic byte 0, the schema id, the body)
produced to each in turn.

    .venv/bin/python load_tests/schema_validation_bench.py [--seconds 8] [--rounds 3]

Two loads per topic each round: the SDK ``Producer`` (its batches, HTTP) and confluent-kafka's producer
(``acks=all``). The topics take turns round after round, so drift of this shared machine falls on both alike; each
ratio is the median of its per-round ratios. Every message sent is checked to have been stored. The server is
stopped by PID at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import httpx
from confluent_kafka import Producer as KafkaProducer

sys.path.insert(0, str(Path(__file__).parent))

from auth_bench import Measurement, median_ratio, medians
from tls_bench import SAMPLE, summary

from server.devservices import StandaloneServer, free_port
from talos import Admin, Producer, RecordFuture

PARTITIONS = 4
SCHEMA = json.dumps({"type": "record", "name": "Bench", "fields": [{"name": "body", "type": "string"}]})


def stored(url: str, topic: str) -> int:
    with Admin(url) as admin:
        return sum(p.latest for p in admin.describe_topic(topic).partition_offsets)


def sdk_load(url: str, topic: str, value: bytes, seconds: float) -> Measurement:
    latencies: list[float] = []

    def acknowledged(sent_at: float, _future: RecordFuture) -> None:
        latencies.append(time.perf_counter() - sent_at)

    before, sent = stored(url, topic), 0
    with Producer(url, linger_ms=5) as producer:
        started = time.perf_counter()
        while time.perf_counter() < started + seconds:
            for index in range(SAMPLE):
                at = time.perf_counter()
                future = producer.send(topic, value, partition=sent % PARTITIONS)
                if index == 0:
                    future.add_done_callback(lambda done, at=at: acknowledged(at, done))
                sent += 1
        producer.flush(timeout=120)
        elapsed = time.perf_counter() - started
    if stored(url, topic) - before != sent:
        raise RuntimeError(f"{topic}: the SDK sent {sent} messages, {stored(url, topic) - before} were stored")
    return summary(sent / elapsed, latencies)


def kafka_load(url: str, bootstrap: str, topic: str, value: bytes, seconds: float) -> Measurement:
    latencies: list[float] = []
    failed: list[object] = []

    def delivered(error: object, sent_at: float | None) -> None:
        if error is not None:
            failed.append(error)
        elif sent_at is not None:
            latencies.append(time.perf_counter() - sent_at)

    before, sent = stored(url, topic), 0
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    started = time.perf_counter()
    while time.perf_counter() < started + seconds:
        for index in range(SAMPLE):
            at = time.perf_counter() if index == 0 else None
            while True:
                try:
                    producer.produce(
                        topic, value, partition=sent % PARTITIONS, on_delivery=lambda e, _m, a=at: delivered(e, a)
                    )
                    break
                except BufferError:  # librdkafka's queue is full: let it drain
                    producer.poll(0.01)
            sent += 1
        producer.poll(0)
    producer.flush(120)
    elapsed = time.perf_counter() - started
    landed = stored(url, topic) - before
    if failed or landed != sent:
        raise RuntimeError(f"{topic}: Kafka sent {sent}, stored {landed}, failed {failed[:3]}")
    return summary(sent / elapsed, latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each load in each round [8]")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, the topics taking turns [3]")
    args = parser.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="validation-bench-") as tmp:
        server = StandaloneServer(Path(tmp) / "data", env={"TALOS_KAFKA_PORT": str(port)}).start()
        try:
            url, bootstrap = server.url, f"127.0.0.1:{port}"
            ids = {}
            with Admin(url) as admin, httpx.Client(base_url=f"{url}/schema-registry") as registry:
                for topic, on in (("plain", False), ("validated", True)):
                    admin.create_topic(topic, partitions=PARTITIONS, value_schema_validation=on)
                    answer = registry.post(f"/subjects/{topic}-value/versions", json={"schema": SCHEMA})
                    ids[topic] = answer.raise_for_status().json()["id"]
            assert len(set(ids.values())) == 1
            value = b"\x00" + ids["plain"].to_bytes(4, "big") + b"b" * 1019
            runs: dict[str, dict[str, list[Measurement]]] = {t: {"sdk": [], "kafka": []} for t in ids}
            for round_ in range(args.rounds):
                for topic in ids:
                    print(f"round {round_ + 1}/{args.rounds}: {topic} ...", file=sys.stderr, flush=True)
                    runs[topic]["sdk"].append(sdk_load(url, topic, value, args.seconds))
                    runs[topic]["kafka"].append(kafka_load(url, bootstrap, topic, value, args.seconds))
        finally:
            server.stop()
    out = [
        f"{args.seconds:g} s per load, {args.rounds} rounds, medians; 1 KiB framed values, {PARTITIONS} partitions",
        "",
        f"{'topic':<10} {'SDK msg/s':>10} {'p50 ms':>7} {'p99 ms':>7} {'Kafka msg/s':>12} {'p50 ms':>7} {'p99 ms':>7}",
    ]
    for topic, loads in runs.items():
        s, k = medians(loads["sdk"]), medians(loads["kafka"])
        out.append(
            f"{topic:<10} {s.rate:>10,.0f} {s.p50_ms:>7.1f} {s.p99_ms:>7.1f} "
            f"{k.rate:>12,.0f} {k.p50_ms:>7.1f} {k.p99_ms:>7.1f}"
        )
    sdk = median_ratio(runs["validated"]["sdk"], runs["plain"]["sdk"])
    kafka = median_ratio(runs["validated"]["kafka"], runs["plain"]["kafka"])
    out += ["", f"validation on / off (median of rounds): SDK {sdk:.3f}, Kafka {kafka:.3f}"]
    print("\n".join(out))


if __name__ == "__main__":
    main()
