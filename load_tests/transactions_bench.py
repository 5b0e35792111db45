"""What transactions cost, in one run against ``talos standalone`` on the local disk.

    .venv/bin/python load_tests/transactions_bench.py [--seconds 10] [--size 1024]

1. Throughput of 1 KiB messages from a batching producer over 4 partitions: idempotent, then transactional
   committing every 100 ms, then transactional committing every 1,000 messages (ratios to idempotent).
2. Commit latency (``commit_transaction`` of a transaction of one message per partition, 4 partitions):
   p50 and p99.
3. Produce to read-committed visible: the time from ``send`` of a message in a transaction to a
   read-committed consumer's ``poll`` returning it (the commit in between), p50 and p99.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

from server.devservices import StandaloneServer
from talos import Admin, Consumer, Producer

PARTITIONS = 4


def percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))] * 1000


def idempotent_rate(url: str, topic: str, seconds: float, value: bytes) -> float:
    with Producer(url, idempotent=True, linger_ms=5) as producer:
        sent, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            producer.send(topic, value, partition=sent % PARTITIONS)
            sent += 1
        producer.flush()
        return sent / (time.perf_counter() - started)


def transactional_rate(
    url: str, topic: str, seconds: float, value: bytes, *, every_s: float | None, every_n: int | None
) -> float:
    with Producer(url, transactional_id=f"bench-{topic}", linger_ms=5) as producer:
        sent, started = 0, time.perf_counter()
        producer.begin_transaction()
        opened, in_txn = time.perf_counter(), 0
        while time.perf_counter() - started < seconds:
            producer.send(topic, value, partition=sent % PARTITIONS)
            sent += 1
            in_txn += 1
            due = (every_s is not None and time.perf_counter() - opened >= every_s) or (
                every_n is not None and in_txn >= every_n
            )
            if due:
                producer.commit_transaction()
                producer.begin_transaction()
                opened, in_txn = time.perf_counter(), 0
        producer.commit_transaction()
        return sent / (time.perf_counter() - started)


def commit_latency(url: str, topic: str, rounds: int) -> list[float]:
    samples = []
    with Producer(url, transactional_id="bench-commit", linger_ms=0) as producer:
        for _ in range(rounds):
            producer.begin_transaction()
            for partition in range(PARTITIONS):
                producer.send(topic, b"c", partition=partition)
            producer.flush()
            started = time.perf_counter()
            producer.commit_transaction()
            samples.append(time.perf_counter() - started)
    return samples


def visible_latency(url: str, topic: str, rounds: int) -> list[float]:
    """send → commit → a read-committed consumer polling the partition sees it."""
    samples: list[float] = []
    seen = threading.Event()
    stop = threading.Event()
    wanted: list[bytes] = []

    def read() -> None:
        with Consumer(url, partitions=[(topic, 0)], start="latest", isolation="read_committed", wait_ms=500) as c:
            ready.set()
            while not stop.is_set():
                for message in c.poll(0.5):
                    if wanted and message.value == wanted[-1]:
                        seen.set()

    ready = threading.Event()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    ready.wait(30)
    time.sleep(1.0)  # the reader's first long poll is in place
    with Producer(url, transactional_id="bench-visible", linger_ms=0) as producer:
        for i in range(rounds):
            value = b"m%d" % i
            wanted.append(value)
            seen.clear()
            started = time.perf_counter()
            producer.begin_transaction()
            producer.send(topic, value, partition=0)
            producer.commit_transaction()
            if seen.wait(10):
                samples.append(time.perf_counter() - started)
    stop.set()
    reader.join(5)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    value = b"v" * args.size
    with tempfile.TemporaryDirectory(prefix="talos-txn-bench-") as tmp:
        server = StandaloneServer(Path(tmp) / "data", env={"TALOS_LOG_LEVEL": "warning"})
        server.start()
        try:
            with Admin(server.url) as admin:
                for name in ("idem", "txn-100ms", "txn-1000", "commit", "visible"):
                    admin.create_topic(name, partitions=PARTITIONS)
            runs: dict[str, list[float]] = {"idem": [], "100ms": [], "1000": []}
            for _round in range(3):  # interleaved, so drift (page cache, CPU clock) hits all alike
                runs["idem"].append(idempotent_rate(server.url, "idem", args.seconds, value))
                runs["100ms"].append(
                    transactional_rate(server.url, "txn-100ms", args.seconds, value, every_s=0.1, every_n=None)
                )
                runs["1000"].append(
                    transactional_rate(server.url, "txn-1000", args.seconds, value, every_s=None, every_n=1000)
                )
            idem, by_time, by_count = (statistics.median(runs[k]) for k in ("idem", "100ms", "1000"))
            print(f"1. throughput, {args.size} B messages, batching producer, {PARTITIONS} partitions (median of 3)")
            print(f"   idempotent                      {idem:10.0f} msg/s")
            print(f"   transactional, commit / 100 ms  {by_time:10.0f} msg/s   ratio {by_time / idem:.2f}")
            print(f"   transactional, commit / 1000    {by_count:10.0f} msg/s   ratio {by_count / idem:.2f}")
            commits = commit_latency(server.url, "commit", args.rounds)
            print(f"2. commit latency ({PARTITIONS} partitions, {len(commits)} commits): "
                  f"p50 {percentile(commits, 0.5):.2f} ms, p99 {percentile(commits, 0.99):.2f} ms")  # fmt: skip
            visible = visible_latency(server.url, "visible", args.rounds)
            print(f"3. send to read-committed visible ({len(visible)} of {args.rounds}): "
                  f"p50 {percentile(visible, 0.5):.2f} ms, p99 {percentile(visible, 0.99):.2f} ms, "
                  f"mean {statistics.mean(visible) * 1000:.2f} ms")  # fmt: skip
        finally:
            server.stop()


if __name__ == "__main__":
    main()
