"""``talos bench``: produce and consume throughput against a running server, with the SDK.

May import: click, the public SDK and ``talos.cli``'s shared modules.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import click

from talos import Admin, ConflictError, Consumer, Producer, TalosError
from talos.cli._common import URL, fail

__all__ = ["bench"]


@click.group()
def bench() -> None:
    """Measure produce and consume throughput against a running server."""


@bench.command("produce")
@URL
@click.option("--topic", default="bench", show_default=True, help="Created if missing.")
@click.option("--partitions", default=1, show_default=True)
@click.option("--messages", default=200_000, show_default=True)
@click.option("--size", default=1024, show_default=True, help="Value bytes per message.")
@click.option("--linger-ms", default=5.0, show_default=True)
@click.option("--acks", type=click.Choice(["durable", "accepted"]), default="durable", show_default=True)
def bench_produce(url: str, topic: str, partitions: int, messages: int, size: int, linger_ms: float, acks: str) -> None:
    """Produce MESSAGES of SIZE bytes with the SDK; print msgs/s, MB/s and ack latency percentiles."""
    _ensure_topic(url, topic, partitions)
    payload = os.urandom(size)
    latencies: list[float] = []
    started = time.perf_counter()
    try:
        with Producer(url, linger_ms=linger_ms, acks=acks) as producer:
            for _ in range(messages):
                now = time.perf_counter()
                producer.send(topic, payload).add_done_callback(_latency_recorder(latencies, now))
            producer.flush()
    except TalosError as exc:
        fail(exc)
    elapsed = time.perf_counter() - started
    _report("produce", messages, messages * size, elapsed, latencies)


@bench.command("consume")
@URL
@click.option("--topic", default="bench", show_default=True)
@click.option("--messages", default=200_000, show_default=True, help="Stop after this many.")
def bench_consume(url: str, topic: str, messages: int) -> None:
    """Consume from the beginning of TOPIC; print msgs/s and MB/s."""
    received = 0
    volume = 0
    started = time.perf_counter()
    try:
        with Consumer(url, topics=[topic], start="earliest", wait_ms=200) as consumer:
            while received < messages:
                batch = consumer.poll(2.0)
                if not batch:
                    break
                received += len(batch)
                volume += sum(len(m.value or b"") for m in batch)
    except TalosError as exc:
        fail(exc)
    _report("consume", received, volume, time.perf_counter() - started, [])


def _latency_recorder(into: list[float], started: float) -> Callable[[object], None]:
    def record(_future: object) -> None:
        into.append(time.perf_counter() - started)

    return record


def _ensure_topic(url: str, topic: str, partitions: int) -> None:
    with Admin(url) as admin:
        try:
            admin.create_topic(topic, partitions=partitions)
        except ConflictError:
            pass
        except TalosError as exc:
            fail(exc)


def _report(what: str, count: int, volume: int, elapsed: float, latencies: list[float]) -> None:
    click.echo(
        f"{what}: {count} messages in {elapsed:.2f}s = {count / elapsed:,.0f} msgs/s, "
        f"{volume / elapsed / 1e6:,.1f} MB/s"
    )
    if latencies:
        ordered = sorted(latencies)
        pick = [ordered[min(int(len(ordered) * q), len(ordered) - 1)] * 1000 for q in (0.5, 0.95, 0.99)]
        click.echo(f"ack latency: p50 {pick[0]:.1f} ms, p95 {pick[1]:.1f} ms, p99 {pick[2]:.1f} ms")
