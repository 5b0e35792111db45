"""Produce throughput with the message trace off, sampled 1 in 100, and on, in one run against one
``talos standalone`` (docs/trace.md):

    .venv/bin/python load_tests/trace_bench.py [--seconds 5] [--rounds 3] [--size 1024]

Three topics of one partition, one per setting; each round produces to each for ``--seconds`` with the SDK's
``Producer`` (1 KiB messages, keyed, acks durable), the settings in a rotating order so drift (page cache,
the index growing) falls on all of them; it prints messages/s per round and the medians' ratios to "off".
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from server.devservices import StandaloneServer
from talos import Admin, Producer

SETTINGS = {"off": 0, "sampled-100": 100, "on": 1}


def produce_for(url: str, topic: str, seconds: float, size: int) -> float:
    value = b"x" * size
    with Producer(url, linger_ms=5) as producer:
        sent = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            for _ in range(1000):
                producer.send(topic, value, key=f"k{sent % 10_000}")
                sent += 1
        producer.flush()
        return sent / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        server = StandaloneServer(Path(work) / "data")
        try:
            server.start()
            with Admin(server.url) as admin:
                for name, sample in SETTINGS.items():
                    admin.create_topic(name, partitions=1)
                    admin.alter_topic(name, trace_sample=sample)
            produce_for(server.url, "off", 1.0, args.size)  # warm-up
            rates: dict[str, list[float]] = {name: [] for name in SETTINGS}
            names = list(SETTINGS)
            for round_ in range(args.rounds):
                order = names[round_ % 3 :] + names[: round_ % 3]
                for name in order:
                    rates[name].append(produce_for(server.url, name, args.seconds, args.size))
                print(f"round {round_ + 1}: " + "  ".join(f"{n} {rates[n][-1]:,.0f}/s" for n in names), flush=True)
            medians = {name: statistics.median(values) for name, values in rates.items()}
            for name in names:
                ratio = medians[name] / medians["off"]
                print(f"{name:<12} median {medians[name]:>9,.0f} msg/s  {ratio:6.1%} of off")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
