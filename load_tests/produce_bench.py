"""Produce benchmark of `talos standalone`, measured in one run on this machine.

    .venv/bin/python load_tests/produce_bench.py [--seconds 10] [--no-hdfs] [--no-wrk]

1. 64 concurrent single-message producers (aiohttp, JSON REST) on one partition: requests/s and p50/p99
   latency, group commit on vs off, on the local disk and on a real local HDFS.
2. `wrk` (Debian package), 64 connections, single-message durable produce, group commit on, local disk.
3. SDK batched durable throughput, 1 KiB messages, against raw `write`+`fdatasync` of the same disk.

Servers and HDFS are started and stopped here (by PID); nothing else is needed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

from fencing.bench import make_batches, raw_run
from fencing.filesystem import open_storage
from talos import Admin, Producer
from talos.devservices import HdfsCluster, StandaloneServer

MIB = 1024 * 1024


async def _single_message_load(url: str, topic: str, seconds: float, concurrency: int) -> dict[str, float]:
    body = orjson.dumps({"messages": [{"value": "x" * 100}]})
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal errors
            target = f"{url}/v1/topics/{topic}/partitions/0/messages"
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                async with session.post(target, data=body, headers={"content-type": "application/json"}) as answer:
                    await answer.read()
                    if answer.status != 200:
                        errors += 1
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "req_s": len(latencies) / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
        "errors": errors,
    }


def group_commit_table(storage: str, base: Path, seconds: float) -> dict[str, dict[str, float]]:
    results = {}
    for mode in ("on", "off"):
        data = base / f"gc-{mode}"
        args: tuple[str, ...] = ("--group-commit", mode)
        if storage != "local":
            args += ("--storage", f"{storage}/gc-{mode}-{time.time_ns()}")
        server = StandaloneServer(data, args=args)
        try:
            server.start()
            Admin(server.url).create_topic("bench", partitions=1)
            asyncio.run(_single_message_load(server.url, "bench", 1.0, 64))  # warm-up
            results[mode] = asyncio.run(_single_message_load(server.url, "bench", seconds, 64))
        finally:
            server.stop()
    return results


def wrk_run(base: Path, seconds: float) -> dict[str, float] | None:
    wrk = shutil.which("wrk")
    if wrk is None:
        print("wrk not installed (apt-get install wrk): skipping", file=sys.stderr)
        return None
    script = base / "post.lua"
    script.write_text(
        'wrk.method = "POST"\nwrk.body = \'{"messages":[{"value":"' + "x" * 100 + "\"}]}'\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    server = StandaloneServer(base / "wrk")
    try:
        server.start()
        Admin(server.url).create_topic("bench", partitions=1)
        target = f"{server.url}/v1/topics/bench/partitions/0/messages"
        subprocess.run([wrk, "-t2", "-c64", "-d2s", "-s", str(script), target], capture_output=True, check=True)
        out = subprocess.run(
            [wrk, "-t2", "-c64", f"-d{int(seconds)}s", "--latency", "-s", str(script), target],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        with urllib_get(f"{server.url}/v1/topics/bench") as described:
            stored = orjson.loads(described)["partitions_detail"][0]["latest"]
    finally:
        server.stop()
    rate = float(next(line.split()[1] for line in out.splitlines() if line.startswith("Requests/sec")))
    p99 = next(line.split()[1] for line in out.splitlines() if line.strip().startswith("99%"))
    errors = [line.strip() for line in out.splitlines() if "Non-2xx" in line or "Socket errors" in line]
    return {"req_s": rate, "p99": p99, "stored": stored, "errors": "; ".join(errors) or "none"}  # type: ignore[dict-item]


class urllib_get:
    def __init__(self, url: str) -> None:
        import urllib.request

        self._answer = urllib.request.urlopen(url, timeout=30)

    def __enter__(self) -> bytes:
        return bytes(self._answer.read())

    def __exit__(self, *_: object) -> None:
        self._answer.close()


def sdk_vs_raw(base: Path, megabytes: int, partitions: int) -> dict[str, float]:
    fs, root = open_storage(str(base / "raw"))
    fs.mkdirs(root)
    batches = make_batches(4)
    started = time.perf_counter()
    written = raw_run(fs, f"{root}/raw", batches, megabytes * MIB)
    raw = written / MIB / (time.perf_counter() - started)
    server = StandaloneServer(base / "sdk")
    count = megabytes * 1024
    payload = os.urandom(1024)
    try:
        server.start()
        Admin(server.url).create_topic("sdk", partitions=partitions)
        with Producer(server.url, linger_ms=5, max_in_flight=partitions) as producer:
            started = time.perf_counter()
            for _ in range(count):
                producer.send("sdk", payload)
            producer.flush()
            sdk = count * 1024 / MIB / (time.perf_counter() - started)
    finally:
        server.stop()
    return {"raw_mib_s": raw, "sdk_mib_s": sdk, "ratio": sdk / raw, "msgs_s": sdk * 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--no-hdfs", action="store_true")
    parser.add_argument("--no-wrk", action="store_true")
    parser.add_argument("--sdk-mib", type=int, default=256)
    parser.add_argument("--sdk-partitions", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="talos-produce-bench-", dir=".") as scratch:
        base = Path(scratch)
        rows = []
        print("64 single-message producers, local disk ...", file=sys.stderr)
        for mode, r in group_commit_table("local", base / "local", args.seconds).items():
            rows.append(("local disk", mode, r))
        if not args.no_hdfs:
            cluster = HdfsCluster(base / "hdfs-service")
            print("starting HDFS; 64 single-message producers on HDFS ...", file=sys.stderr)
            cluster.start()
            try:
                for mode, r in group_commit_table(cluster.url, base / "hdfs", args.seconds).items():
                    rows.append(("HDFS", mode, r))
            finally:
                cluster.stop()
        print("\n| storage | group commit | requests/s | p50 ms | p99 ms | errors |\n|---|---|---|---|---|---|")
        for storage, mode, r in rows:
            cells = f"{r['req_s']:,.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['errors']:.0f}"
            print(f"| {storage} | {mode} | {cells} |")
        for storage in ("local disk", "HDFS"):
            by_mode = {mode: r for s, mode, r in rows if s == storage}
            if len(by_mode) == 2:
                gain = by_mode["on"]["req_s"] / by_mode["off"]["req_s"]
                print(f"{storage}: group commit on/off = {gain:.1f}x requests/s")
        if not args.no_wrk:
            print("wrk ...", file=sys.stderr)
            result = wrk_run(base, args.seconds)
            if result:
                print(
                    f"\nwrk -c64, single-message durable produce, local disk: {result['req_s']:,.0f} req/s, "
                    f"p99 {result['p99']}, stored {result['stored']}, errors: {result['errors']}"
                )
        print("SDK batched vs raw fsync ...", file=sys.stderr)
        sdk = sdk_vs_raw(base, args.sdk_mib, args.sdk_partitions)
        print(
            f"\nSDK batched durable, 1 KiB messages, {args.sdk_partitions} partitions: {sdk['sdk_mib_s']:.0f} MiB/s "
            f"({sdk['msgs_s']:,.0f} msgs/s); raw write+fdatasync {sdk['raw_mib_s']:.0f} MiB/s; "
            f"ratio {sdk['ratio']:.2f}"
        )


if __name__ == "__main__":
    main()
