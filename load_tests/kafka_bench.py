"""The Kafka listener against the Talos SDK over REST, in one run against ``talos standalone`` (local disk).

    .venv/bin/python load_tests/kafka_bench.py [--messages 100000] [--latency-messages 1000] [--profile] [--json]

1. Produce throughput: MESSAGES messages of 1 KiB, durable (Kafka ``acks=all``; REST ``acks=durable``), by one
   confluent-kafka (librdkafka) producer to the Kafka listener and by one Talos SDK ``Producer``, each with its
   default batching (librdkafka ``linger.ms=5``), to a 4-partition topic: messages per second until everything
   is acknowledged; then both again as idempotent producers (librdkafka then keeps at most 5 requests in flight
   per connection).
2. Consume throughput: the same messages read back from the start by a confluent-kafka consumer and by a Talos
   ``Consumer``.
3. Single-message produce latency: one message at a time, each waited for (confluent ``produce`` + ``flush``;
   SDK ``send().result()`` with ``linger_ms=0``): p50, p99.
4. The record format decision (no server): converting a 100-record batch each way against checking its CRC only.
5. The Kafka produce against the disk: raw ``write`` + ``fdatasync`` of the same bytes in 1 MiB buffers in
   the same directory, just before and just after the Kafka produce (``produce_kafka_over_raw``: the Kafka
   produce's MiB/s over the mean of the two).
6. The server's CPU per request: its process CPU time (``/proc/<pid>/stat``) over each phase, divided by the
   requests it answered (``talos_kafka_requests`` for Kafka; the SDK's HTTP requests are its batches). With
   ``--profile``, py-spy samples the server during the Kafka produce and consume phases and the report says
   where the event loop's time goes (codec, record conversion, handlers, the log, the rest); sampling slows
   the server, so take throughput from a run without it.
7. The clients' CPU per message (this process: the Python loop and librdkafka's threads), and
   ``cpu_bound_msgs_per_s``: the rate at which server and client together would keep every core of this
   machine busy. Raw ``write`` needs no client; the Kafka produce cannot pass that bound on a machine the
   client shares.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition

from fencing import open_storage
from fencing.bench import MIB, make_batches, raw_run
from server.devservices import StandaloneServer, free_port
from talos import Admin, Consumer, Producer

PARTITIONS = 4
_RATE = 200  # py-spy samples per second (more slows the server it samples)
VALUE = b"x" * 1024


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _kafka_requests(url: str, api: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("talos_kafka_requests_total{") and f'api="{api}"' in line
    )


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1000, 3),
    }


def _own_cpu_seconds() -> float:
    """This process's CPU time, its client library's threads (librdkafka's) included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Phase:
    """Times a phase, and the server's CPU and the clients' (this process) over it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def __enter__(self) -> Phase:
        self.started, self.cpu, self.client_cpu = time.perf_counter(), _cpu_seconds(self.pid), _own_cpu_seconds()
        return self

    def __exit__(self, *_: object) -> None:
        self.seconds = time.perf_counter() - self.started
        self.cpu = _cpu_seconds(self.pid) - self.cpu
        self.client_cpu = _own_cpu_seconds() - self.client_cpu


def _profiled(pid: int, enabled: bool, out: Path) -> subprocess.Popen[bytes] | None:
    if not enabled:
        return None
    py_spy = Path(sys.executable).parent / "py-spy"
    return subprocess.Popen(
        [
            str(py_spy),
            "record",
            "--pid",
            str(pid),
            "--format",
            "raw",
            "--rate",
            str(_RATE),
            "--threads",
            "--output",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _stop_profile(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None:
        process.send_signal(2)  # py-spy writes its output on SIGINT
        process.wait(timeout=60)


_PLACES = (
    ("kafka protocol codec", "server/kafka/protocol/"),
    ("kafka record conversion", "server/kafka/records.py"),
    ("kafka listener and handlers", "server/kafka/"),
    ("partition log and storage", ("server/partition/", "fencing/")),
    ("shared REST produce/fetch code", "server/http/messages.py"),
    ("talos codec and compression", ("talos/_codec.py", "talos/_compression.py")),
)


def _listener_share(raw: Path) -> dict[str, Any]:
    """Where the event loop's time went (the main thread's samples in py-spy's collapsed stacks; the I/O threads
    are left out: py-spy counts their waits as work), by the innermost frame of ours; and its busy seconds."""
    places: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if "MainThread" not in frames[0]:
            continue
        samples = int(count)
        total += samples
        place = "other (event loop, asyncio, uvicorn)"
        for frame in reversed(frames):
            found = next((name for name, where in _PLACES if _in(frame, where)), None)
            if found:
                place = found
                break
        places[place] += samples
    return {
        "loop_busy_s": round(total / _RATE, 2),
        "share": {k: round(v / max(1, total), 3) for k, v in places.most_common()},
    }


def _in(frame: str, where: str | tuple[str, ...]) -> bool:
    return any(w in frame for w in ((where,) if isinstance(where, str) else where))


def kafka_produce(bootstrap: str, topic: str, messages: int, *, idempotent: bool = False) -> None:
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": idempotent}
    producer = KafkaProducer(conf)
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, VALUE, key=str(i % 64).encode())
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0


def rest_produce(url: str, topic: str, messages: int, *, idempotent: bool = False) -> None:
    with Producer(url, idempotent=idempotent) as producer:
        for i in range(messages):
            producer.send(topic, VALUE, key=str(i % 64).encode())
        producer.flush()


def kafka_consume(bootstrap: str, topic: str, messages: int) -> None:
    consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen = 0
    try:
        while seen < messages:
            for message in consumer.consume(1000, 1.0):
                if message.error() is None:
                    seen += 1
    finally:
        consumer.close()


def rest_consume(url: str, topic: str, messages: int) -> None:
    seen = 0
    with Consumer(url, topics=[topic], start="earliest", wait_ms=500) as consumer:
        while seen < messages:
            seen += len(consumer.poll(1.0))


def kafka_latency(bootstrap: str, topic: str, count: int) -> list[float]:
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        producer.produce(topic, VALUE, partition=0)
        producer.flush(30)
        samples.append(time.perf_counter() - started)
    return samples


def rest_latency(url: str, topic: str, count: int) -> list[float]:
    samples = []
    with Producer(url, linger_ms=0) as producer:
        for _ in range(count):
            started = time.perf_counter()
            producer.send(topic, VALUE, partition=0).result()
            samples.append(time.perf_counter() - started)
    return samples


def raw_mib_s(directory: Path, total: int) -> float:
    """Raw ``write`` + ``fdatasync`` of ``total`` bytes in 1 MiB buffers on the server's disk: what the disk
    does at its best, for the Kafka produce to be measured against in the same run."""
    fs, root = open_storage(str(directory))
    fs.mkdirs(root)
    started = time.perf_counter()
    written = raw_run(fs, f"{root}/raw", make_batches(8), total)
    seconds = time.perf_counter() - started
    fs.delete(f"{root}/raw")
    return written / MIB / seconds


def conversion(rounds: int = 200) -> dict[str, Any]:
    """The record format decision: converting a 100-record batch of 1 KiB values each way, against checking its
    CRC only (the least that storing Kafka batches natively would cost on produce)."""
    import crc32c

    from server.kafka.records import kafka_to_talos, talos_to_kafka
    from talos import RecordData, encode_batch

    records = [RecordData(VALUE, str(i).encode(), [], 1_700_000_000_000 + i) for i in range(100)]
    talos = bytes(encode_batch(records))
    kafka = talos_to_kafka(talos)
    out: dict[str, Any] = {}
    for name, work in (
        ("kafka_to_talos", lambda: kafka_to_talos(kafka)),
        ("talos_to_kafka", lambda: talos_to_kafka(talos)),
        ("crc_only", lambda: crc32c.crc32c(kafka[21:])),
    ):
        started = time.perf_counter()
        for _ in range(rounds):
            work()
        per_batch = (time.perf_counter() - started) / rounds
        out[name] = {"us_per_batch": round(per_batch * 1e6, 1), "records_per_s": round(100 / per_batch)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--latency-messages", type=int, default=1000)
    parser.add_argument("--profile", action="store_true", help="sample the server with py-spy (Kafka phases)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report: dict[str, Any] = {"messages": args.messages, "value_bytes": len(VALUE), "conversion": conversion()}
    with tempfile.TemporaryDirectory(prefix="talos-kafka-bench-") as tmp:
        kafka_port = free_port()
        server = StandaloneServer(
            Path(tmp) / "data",
            args=("--log-format", "text"),
            env={"TALOS_LOG_LEVEL": "warning", "TALOS_KAFKA_PORT": str(kafka_port), "TALOS_METERING_INTERVAL_S": "0"},
        )
        server.start()
        try:
            assert server.process is not None
            pid, url, bootstrap = server.process.pid, server.url, f"127.0.0.1:{kafka_port}"
            with Admin(url) as admin:
                for name in (
                    "via-kafka",
                    "via-kafka-idempotent",
                    "via-rest",
                    "via-rest-idempotent",
                    "latency-kafka",
                    "latency-rest",
                ):
                    admin.create_topic(name, partitions=PARTITIONS)
            runs: list[tuple[str, Callable[[], None], str | None]] = [
                ("produce_kafka", lambda: kafka_produce(bootstrap, "via-kafka", args.messages), "Produce"),
                ("produce_rest", lambda: rest_produce(url, "via-rest", args.messages), None),
                (
                    "produce_kafka_idempotent",
                    lambda: kafka_produce(bootstrap, "via-kafka-idempotent", args.messages, idempotent=True),
                    "Produce",
                ),
                (
                    "produce_rest_idempotent",
                    lambda: rest_produce(url, "via-rest-idempotent", args.messages, idempotent=True),
                    None,
                ),
                ("consume_kafka", lambda: kafka_consume(bootstrap, "via-kafka", args.messages), "Fetch"),
                ("consume_rest", lambda: rest_consume(url, "via-rest", args.messages), None),
            ]
            raw_rates = [raw_mib_s(Path(tmp) / "raw", args.messages * len(VALUE))]
            for name, run, api in runs:
                before = _kafka_requests(url, api) if api else 0.0
                profile = _profiled(pid, args.profile and api is not None, Path(tmp) / f"{name}.txt")
                with Phase(pid) as phase:
                    run()
                _stop_profile(profile)
                entry: dict[str, Any] = {
                    "msgs_per_s": round(args.messages / phase.seconds),
                    "server_cpu_s": round(phase.cpu, 2),
                    "server_cpu_us_per_msg": round(phase.cpu / args.messages * 1e6, 1),
                    "client_cpu_us_per_msg": round(phase.client_cpu / args.messages * 1e6, 1),
                    # Both sides share this machine's cores: the rate at which together they would fill them.
                    "cpu_bound_msgs_per_s": round(
                        (os.cpu_count() or 1) / ((phase.cpu + phase.client_cpu) / args.messages)
                    ),
                }
                if api:
                    requests = _kafka_requests(url, api) - before
                    entry.update(requests=int(requests), server_cpu_us_per_request=round(phase.cpu / requests * 1e6))
                if profile is not None:
                    entry["profile"] = _listener_share(Path(tmp) / f"{name}.txt")
                report[name] = entry
                if name == "produce_kafka":  # raw runs on both sides of it: the disk's rate moves between runs
                    raw_rates.append(raw_mib_s(Path(tmp) / "raw", args.messages * len(VALUE)))
            kafka_mib_s = report["produce_kafka"]["msgs_per_s"] * len(VALUE) / MIB
            report["raw_mib_s"] = [round(rate) for rate in raw_rates]
            report["produce_kafka_over_raw"] = round(kafka_mib_s / statistics.mean(raw_rates), 2)
            bound_mib_s = report["produce_kafka"]["cpu_bound_msgs_per_s"] * len(VALUE) / MIB
            report["produce_kafka_cpu_bound_over_raw"] = round(bound_mib_s / statistics.mean(raw_rates), 2)
            for side in ("produce", "produce_idempotent", "consume"):
                kafka = "produce_kafka_idempotent" if side == "produce_idempotent" else f"{side}_kafka"
                rest = "produce_rest_idempotent" if side == "produce_idempotent" else f"{side}_rest"
                report[f"{side}_kafka_over_rest"] = round(report[kafka]["msgs_per_s"] / report[rest]["msgs_per_s"], 2)
            report["latency_kafka"] = _percentiles(kafka_latency(bootstrap, "latency-kafka", args.latency_messages))
            report["latency_rest"] = _percentiles(rest_latency(url, "latency-rest", args.latency_messages))
        finally:
            server.stop()
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for key, value in report.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
