"""Which HTTP client the SDK uses, by measurement: small produce requests against `talos standalone`.

    .venv/bin/python load_tests/transport_bench.py [--seconds 5]

Sync clients with 8 threads (the producer's default in-flight limit) and asyncio clients with 64
concurrent tasks, each posting one-record batches to one partition; prints requests/s and p99.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import httpx
import urllib3

from server.devservices import StandaloneServer
from talos import Admin, RecordData, encode_batch

HEADERS = {"content-type": "application/vnd.talos.batch"}
BODY = encode_batch([RecordData(b"x" * 100)])


def _sync(post: Callable[[], int], threads: int, seconds: float) -> tuple[float, float]:
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    def worker() -> None:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            assert post() == 200
            latencies.append(time.perf_counter() - started)

    workers = [threading.Thread(target=worker) for _ in range(threads)]
    started = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    latencies.sort()
    return len(latencies) / (time.perf_counter() - started), latencies[int(len(latencies) * 0.99)] * 1000


async def _async(post: Callable[[], object], tasks: int, seconds: float) -> tuple[float, float]:
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            await post()  # type: ignore[misc]
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(tasks)))
    latencies.sort()
    return len(latencies) / (time.perf_counter() - started), latencies[int(len(latencies) * 0.99)] * 1000


async def _aiohttp(url: str, seconds: float) -> tuple[float, float]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as session:

        async def post() -> None:
            async with session.post(url, data=BODY, headers=HEADERS) as answer:
                await answer.read()

        return await _async(post, 64, seconds)


async def _httpx_async(url: str, seconds: float) -> tuple[float, float]:
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=64)) as client:

        async def post() -> None:
            await client.post(url, content=BODY, headers=HEADERS)

        return await _async(post, 64, seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="talos-transport-bench-", dir=".") as scratch:
        server = StandaloneServer(Path(scratch) / "data")
        try:
            server.start()
            Admin(server.url).create_topic("t")
            url = f"{server.url}/v1/topics/t/partitions/0/messages"
            pool = urllib3.PoolManager(maxsize=16)
            sync_httpx = httpx.Client(limits=httpx.Limits(max_connections=16))
            rows = [
                (
                    "urllib3 (sync, 8 threads)",
                    _sync(lambda: pool.request("POST", url, body=BODY, headers=HEADERS).status, 8, args.seconds),
                ),
                (
                    "httpx.Client (sync, 8 threads)",
                    _sync(lambda: sync_httpx.post(url, content=BODY, headers=HEADERS).status_code, 8, args.seconds),
                ),
                ("aiohttp (asyncio, 64 tasks)", asyncio.run(_aiohttp(url, args.seconds))),
                ("httpx.AsyncClient (asyncio, 64 tasks)", asyncio.run(_httpx_async(url, args.seconds))),
            ]
        finally:
            server.stop()
    print("| client | requests/s | p99 ms |\n|---|---|---|")
    for name, (rate, p99) in rows:
        print(f"| {name} | {rate:,.0f} | {p99:.1f} |")


if __name__ == "__main__":
    main()
