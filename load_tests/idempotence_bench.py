"""What exactly-once costs, in one run against ``talos standalone`` on the local disk.

    .venv/bin/python load_tests/idempotence_bench.py [--messages 200000] [--size 100]

1. Throughput of a batching producer with idempotence off and on (the owner checks each batch's
   producer sequence; the SDK stamps id, epoch and sequence into the header).
2. Latency of one message at a time with ``acks="durable"`` (answered after the flush) and
   ``acks="accepted"`` (answered once the partition has it in memory): the price of waiting for the disk.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from server.devservices import StandaloneServer
from talos import Admin, Producer


def throughput(url: str, topic: str, *, idempotent: bool, messages: int, size: int) -> float:
    value = b"v" * size
    with Producer(url, idempotent=idempotent, linger_ms=5) as producer:
        for i in range(2000):
            producer.send(topic, value, partition=i % 4)
        producer.flush()
        started = time.perf_counter()
        for i in range(messages):
            producer.send(topic, value, partition=i % 4)
        producer.flush()
        return messages / (time.perf_counter() - started)


def latency(url: str, topic: str, *, acks: str, messages: int) -> tuple[float, float]:
    samples = []
    with Producer(url, acks=acks, linger_ms=0) as producer:
        for i in range(200):
            producer.send(topic, b"warm", partition=i % 4).result()
        for i in range(messages):
            started = time.perf_counter()
            producer.send(topic, b"x" * 100, partition=i % 4).result()
            samples.append(time.perf_counter() - started)
    samples.sort()
    return statistics.median(samples) * 1000, samples[int(len(samples) * 0.95)] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="talos-idem-bench-") as tmp:
        server = StandaloneServer(Path(tmp) / "data", args=("--log-format", "text"), env={"TALOS_LOG_LEVEL": "warning"})
        server.start()
        try:
            with Admin(server.url) as admin:
                admin.create_topic("plain", partitions=4)
                admin.create_topic("idem", partitions=4)
                admin.create_topic("lat", partitions=4)
            runs: dict[bool, list[float]] = {False: [], True: []}
            for _round in range(3):  # interleaved, so drift (page cache, CPU clock) hits both alike
                for idempotent in (False, True):
                    topic = "idem" if idempotent else "plain"
                    rate = throughput(server.url, topic, idempotent=idempotent, messages=args.messages, size=args.size)
                    runs[idempotent].append(rate)
            plain, idem = statistics.median(runs[False]), statistics.median(runs[True])
            print(f"1. throughput, {args.messages} x {args.size} B, batching producer, 4 partitions (median of 3)")
            print(f"   idempotence off {plain:10.0f} msg/s")
            print(f"   idempotence on  {idem:10.0f} msg/s   on/off = {idem / plain:.2f}")
            durable = latency(server.url, "lat", acks="durable", messages=3000)
            accepted = latency(server.url, "lat", acks="accepted", messages=3000)
            print("2. one message at a time: p50 / p95")
            print(f"   acks=durable   {durable[0]:6.2f} / {durable[1]:6.2f} ms")
            print(f"   acks=accepted  {accepted[0]:6.2f} / {accepted[1]:6.2f} ms")
            print(f"   durable adds   {durable[0] - accepted[0]:6.2f} / {durable[1] - accepted[1]:6.2f} ms")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
