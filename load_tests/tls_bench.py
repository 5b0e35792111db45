"""What TLS costs on the produce path: two ``talos standalone`` servers side by side, one plaintext, one with TLS on
every listener (a CA and certificate made for the run by ``server.devservices.make_local_certificates``).

    .venv/bin/python load_tests/tls_bench.py [--seconds 8] [--rounds 3] [--json [FILE]]

Two loads per server, each for ``--seconds``, 1 KiB messages over 4 partitions, durable:
- the SDK ``Producer`` (HTTP(S); latency from ``send()`` to the acknowledgement, one send in 64 timed);
- confluent-kafka's producer (``acks=all``, ``PLAINTEXT`` against ``SSL``; latency from ``produce()`` to the
  delivery report, one in 64 timed).

The servers take turns round after round, so drift of this shared machine falls on both alike; each ratio is the
median of its per-round ratios. Every message sent is checked to have been stored. Loopback only; both servers are
stopped by PID at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer as KafkaProducer

sys.path.insert(0, str(Path(__file__).parent))

from auth_bench import Measurement, median_ratio, medians

from server.devservices import StandaloneServer, TlsFiles, free_port, make_local_certificates
from talos import TLS, Admin, Producer, RecordFuture

TOPIC = "tls-bench"
PARTITIONS = 4
VALUE = b"v" * 1024
SAMPLE = 64  # one message in this many is timed


@dataclass
class Running:
    name: str
    server: StandaloneServer
    kafka_port: int
    tls: TlsFiles | None
    sdk: list[Measurement] = field(default_factory=list)
    kafka: list[Measurement] = field(default_factory=list)

    def client_tls(self) -> TLS | None:
        return None if self.tls is None else TLS(ca_file=str(self.tls.ca_file))

    def kafka_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{self.kafka_port}", "acks": "all"}
        if self.tls is not None:
            config.update({"security.protocol": "SSL", "ssl.ca.location": str(self.tls.ca_file)})
        return config


def start(name: str, base: Path, tls: TlsFiles | None, stack: ExitStack) -> Running:
    kafka_port = free_port()
    server = StandaloneServer(
        base / name / "data",
        args=tuple(tls.server_args()) if tls is not None else (),
        env={"TALOS_KAFKA_PORT": str(kafka_port), "TALOS_LOG_LEVEL": "warning"},
        tls_ca=tls.ca_file if tls is not None else None,
    )
    stack.callback(server.stop)
    server.start()
    running = Running(name, server, kafka_port, tls)
    with Admin(server.url, tls=running.client_tls()) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS)
    return running


def stored(running: Running) -> int:
    with Admin(running.server.url, tls=running.client_tls()) as admin:
        return sum(p.latest or 0 for p in admin.describe_topic(TOPIC).partition_offsets)


def summary(rate: float, latencies: list[float]) -> Measurement:
    latencies.sort()
    return Measurement(
        rate,
        latencies[len(latencies) // 2] * 1000,
        latencies[min(int(len(latencies) * 0.99), len(latencies) - 1)] * 1000,
    )


def sdk_load(running: Running, seconds: float) -> Measurement:
    latencies: list[float] = []

    def acknowledged(sent_at: float, _future: RecordFuture) -> None:
        latencies.append(time.perf_counter() - sent_at)

    before, sent = stored(running), 0
    with Producer(running.server.url, tls=running.client_tls(), linger_ms=5) as producer:
        started = time.perf_counter()
        while time.perf_counter() < started + seconds:
            for _ in range(SAMPLE - 1):
                producer.send(TOPIC, VALUE, partition=sent % PARTITIONS)
                sent += 1
            timed_at = time.perf_counter()
            producer.send(TOPIC, VALUE, partition=sent % PARTITIONS).add_done_callback(
                lambda future, at=timed_at: acknowledged(at, future)
            )
            sent += 1
        producer.flush(timeout=120)
        elapsed = time.perf_counter() - started
    if stored(running) - before != sent:
        raise RuntimeError(f"{running.name}: the SDK sent {sent} messages, {stored(running) - before} were stored")
    return summary(sent / elapsed, latencies)


def kafka_load(running: Running, seconds: float) -> Measurement:
    latencies: list[float] = []
    failed: list[object] = []

    def delivered(error: object, _message: object, sent_at: float | None = None) -> None:
        if error is not None:
            failed.append(error)
        elif sent_at is not None:
            latencies.append(time.perf_counter() - sent_at)

    def produce(partition: int, timed: bool) -> None:
        at = time.perf_counter() if timed else None
        while True:
            try:
                producer.produce(TOPIC, VALUE, partition=partition, on_delivery=lambda e, m: delivered(e, m, at))
                return
            except BufferError:  # librdkafka's queue is full: let it drain
                producer.poll(0.01)

    before, sent = stored(running), 0
    producer = KafkaProducer(running.kafka_config())
    started = time.perf_counter()
    while time.perf_counter() < started + seconds:
        for index in range(SAMPLE):
            produce(sent % PARTITIONS, timed=index == 0)
            sent += 1
        producer.poll(0)
    producer.flush(120)
    elapsed = time.perf_counter() - started
    landed = stored(running) - before
    if failed or landed != sent:
        raise RuntimeError(f"{running.name}: Kafka sent {sent}, stored {landed}, failed {failed[:3]}")
    return summary(sent / elapsed, latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each load in each round [8]")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, the servers taking turns [3]")
    parser.add_argument("--json", nargs="?", const="-", help="also write the figures as JSON (to FILE, or stdout)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tls-bench-") as tmp, ExitStack() as stack:
        base = Path(tmp)
        print("starting the servers ...", file=sys.stderr, flush=True)
        servers = [start("plain", base, None, stack), start("tls", base, make_local_certificates(base / "tls"), stack)]
        for round_ in range(args.rounds):
            for running in servers:
                print(f"round {round_ + 1}/{args.rounds}: {running.name} ...", file=sys.stderr, flush=True)
                running.sdk.append(sdk_load(running, args.seconds))
                running.kafka.append(kafka_load(running, args.seconds))
    plain, tls = servers
    out = [
        f"{args.seconds:g} s per load, {args.rounds} rounds, medians; 1 KiB messages, {PARTITIONS} partitions, durable",
        "",
        f"{'case':<6} {'SDK msg/s':>10} {'p50 ms':>7} {'p99 ms':>7} {'Kafka msg/s':>12} {'p50 ms':>7} {'p99 ms':>7}",
    ]
    for running in servers:
        s, k = medians(running.sdk), medians(running.kafka)
        out.append(
            f"{running.name:<6} {s.rate:>10,.0f} {s.p50_ms:>7.1f} {s.p99_ms:>7.1f} "
            f"{k.rate:>12,.0f} {k.p50_ms:>7.1f} {k.p99_ms:>7.1f}"
        )
    ratios = {"sdk": median_ratio(tls.sdk, plain.sdk), "kafka": median_ratio(tls.kafka, plain.kafka)}
    out += ["", f"TLS / plaintext (median of rounds): SDK {ratios['sdk']:.3f}, Kafka {ratios['kafka']:.3f}"]
    print("\n".join(out))
    if args.json:
        document = json.dumps(
            {
                "cases": {
                    r.name: {"sdk": [asdict(m) for m in r.sdk], "kafka": [asdict(m) for m in r.kafka]} for r in servers
                },
                "ratios": ratios,
            },
            indent=2,
        )
        if args.json == "-":
            print(document)
        else:
            Path(args.json).write_text(document)


if __name__ == "__main__":
    main()
