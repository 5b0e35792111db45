"""``talos bench``: produce and consume throughput against a running server, with the SDK.

May import: click, orjson, the public SDK and ``talos.cli``'s shared modules.
"""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import click
import orjson

from talos import Admin, ConflictError, Consumer, Producer, Response, TalosError, Urllib3Transport
from talos.cli._common import COMPRESSION, URL, fail

__all__ = ["CountingTransport", "bench", "json_log_lines"]


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
@COMPRESSION
@click.option(
    "--values",
    type=click.Choice(["random", "json"]),
    default="random",
    show_default=True,
    help="Random bytes (incompressible) or JSON log lines (text-like, as logs compress).",
)
@click.option(
    "--many",
    default=0,
    show_default=True,
    help="Queue this many messages per Producer.send_many call instead of one send() each: the SDK's fast "
    "path (records encoded straight into their batch, one future per call), several times the messages per "
    "second of a send() loop; the ack latencies are then per call. 0: send() per message, as most code does.",
)
def bench_produce(
    url: str,
    topic: str,
    partitions: int,
    messages: int,
    size: int,
    linger_ms: float,
    acks: str,
    compression: str,
    values: str,
    many: int,
) -> None:
    """Produce MESSAGES of SIZE bytes with the SDK; print msgs/s, MB/s and ack latency percentiles (and with
    --compression the ratio of value bytes to bytes sent, and MiB/s of uncompressed input)."""
    _ensure_topic(url, topic, partitions)
    payloads = json_log_lines(size) if values == "json" else [os.urandom(size)]
    latencies: list[float] = []
    counting = CountingTransport()
    started = time.perf_counter()
    try:
        with Producer(url, linger_ms=linger_ms, acks=acks, compression=compression, transport=counting) as producer:
            if many > 0:
                for start in range(0, messages, many):
                    first = start % len(payloads)
                    chunk = list(
                        itertools.islice(itertools.cycle(payloads), first, first + min(many, messages - start))
                    )
                    now = time.perf_counter()
                    producer.send_many(topic, chunk).add_done_callback(_latency_recorder(latencies, now))
            else:
                for n in range(messages):
                    now = time.perf_counter()
                    payload = payloads[n % len(payloads)]
                    producer.send(topic, payload).add_done_callback(_latency_recorder(latencies, now))
            producer.flush()
    except TalosError as exc:
        fail(exc)
    elapsed = time.perf_counter() - started
    _report("produce", messages, messages * size, elapsed, latencies)
    if compression != "none":
        click.echo(
            f"compression {compression}: {messages * size:,} bytes of values, {counting.sent:,} sent = ratio "
            f"{messages * size / max(counting.sent, 1):.2f}, {messages * size / elapsed / 2**20:,.1f} MiB/s "
            "of uncompressed input"
        )


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


def json_log_lines(size: int, count: int = 1024) -> list[bytes]:
    """``count`` JSON log lines of ``size`` bytes each, as a service writes them: the same keys, varying values."""
    rng = random.Random(42)
    levels, services = ("info", "info", "info", "warn", "error"), ("api", "billing", "search", "auth")
    words = ("user", "cache", "hit", "miss", "retry", "db", "ok", "session", "token", "refreshed")
    out = []
    for n in range(count):
        line: dict[str, object] = {
            "ts": f"2025-01-01T12:{n // 60 % 60:02d}:{n % 60:02d}.{rng.randrange(1000):03d}Z",
            "level": rng.choice(levels),
            "service": rng.choice(services),
            "request_id": f"{rng.getrandbits(64):016x}",
            "latency_ms": rng.randrange(1, 900),
            "msg": f"GET /v1/items/{rng.randrange(10_000)} answered {rng.choice((200, 200, 200, 404, 500))}",
            "detail": "",
        }
        room = size - len(orjson.dumps(line))  # "detail" fills the line to ``size`` bytes
        line["detail"] = " ".join(rng.choice(words) for _ in range(max(room, 0) // 3 + 1))[: max(room, 0)]
        out.append(orjson.dumps(line)[:size])
    return out


class CountingTransport(Urllib3Transport):
    """The default transport, counting the request body bytes it sends (the batches, compressed or not)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()  # the producer sends from several threads
        self.sent = 0

    def request(self, method: str, url: str, **options: Any) -> Response:
        body = options.get("body")
        if body:
            with self._lock:
                self.sent += len(body)
        return super().request(method, url, **options)


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
