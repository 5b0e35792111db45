"""Compaction, measured in one run on the local disk (docs/compaction.md):

    .venv/bin/python load_tests/compaction_bench.py [--mib 64] [--keys 20000] [--latency-seconds 8] [--json]

1. **Raw disk**: write ``--mib`` MiB to a file with one fsync, then read it back: MiB/s each way, the ceiling.
2. **A compaction pass** over a partition log of ``--mib`` MiB of 100-byte values in which 90 % of the
   records overwrite an earlier key (``--keys`` distinct keys): MiB/s read and written (unthrottled), and the
   space reclaimed (bytes before and after).
3. **The key index**: bytes per million keys (it is allocated whole), and how fast it takes keys.
4. **Produce p99 while compacting**: a ``talos standalone`` server with a compacted partition of
   ``--server-mib`` MiB (90 % overwrites); one-message durable produce requests to a plain topic, for
   ``--latency-seconds`` alone, then for as long as one pass over the compacted partition runs
   (``POST .../compact``, the server's default budgets): p50/p99 each, and the ratio of the p99s.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx

from fencing import DirectoryEpochSource, LogConfig, PartitionLog
from fencing.compaction import CompactionSettings, Throttle, compact
from fencing.key_index import SLOT_BYTES, KeyIndex
from fencing.local import LocalFileSystem
from server.devservices import StandaloneServer
from talos import Admin, RecordData, encode_batch

MIB = 1024 * 1024


def raw_disk(directory: Path, mib: int) -> dict[str, float]:
    path = directory / "raw.bin"
    block = os.urandom(MIB)
    started = time.perf_counter()
    with path.open("wb") as out:
        for _ in range(mib):
            out.write(block)
        out.flush()
        os.fsync(out.fileno())
    write_s = time.perf_counter() - started
    os.posix_fadvise(os.open(path, os.O_RDONLY), 0, 0, os.POSIX_FADV_DONTNEED)
    started = time.perf_counter()
    with path.open("rb") as handle:
        while handle.read(4 * MIB):
            pass
    read_s = time.perf_counter() - started
    path.unlink()
    return {"write_mib_s": round(mib / write_s, 1), "read_mib_s": round(mib / read_s, 1)}


def build_log(directory: Path, mib: int, keys: int) -> PartitionLog:
    """``mib`` MiB of 100-byte values in batches of 100 records; after the first ``keys`` records every record
    overwrites a random earlier key, so 90 % of the log is superseded once it is ten times the key count."""
    fs = LocalFileSystem()
    path = str(directory / "partition")
    plog = PartitionLog.open(fs, path, DirectoryEpochSource(fs, path), config=LogConfig(segment_bytes=16 * MIB))
    value = b"v" * 100
    written = 0
    counter = 0
    rng = random.Random(7)
    while written < mib * MIB:
        records = []
        for _ in range(100):
            key = counter if counter < keys else rng.randrange(keys)
            records.append(RecordData(value, b"key-%08d" % key))
            counter += 1
        batch = encode_batch(records)
        plog.append(batch)
        written += len(batch)
        if counter % 10_000 == 0:
            plog.flush()
    plog.flush()
    plog.roll()  # everything sealed: a pass may compact all of it
    return plog


def compaction_pass(directory: Path, mib: int, keys: int) -> dict[str, float]:
    plog = build_log(directory, mib, keys)
    before = plog.size_bytes
    index = KeyIndex(64 * MIB)
    report = compact(plog, CompactionSettings(), index, throttle=Throttle(None), force=True)
    assert report is not None
    after = plog.size_bytes
    plog.close()
    return {
        "log_mib": round(before / MIB, 1),
        "seconds": round(report.seconds, 2),
        "read_mib_s": round(report.bytes_read / MIB / report.seconds, 1),
        "written_mib_s": round(report.bytes_written / MIB / report.seconds, 1),
        "records_read": report.records_read,
        "records_removed": report.records_removed,
        "bytes_before": before,
        "bytes_after": after,
        "reclaimed_pct": round(100 * (1 - after / before), 1),
    }


def key_index() -> dict[str, float]:
    million = 1_000_000
    index = KeyIndex(int(million / 0.9 * SLOT_BYTES) + SLOT_BYTES)
    keys = [b"key-%08d" % i for i in range(200_000)]
    started = time.perf_counter()
    for offset, key in enumerate(keys):
        index.put(key, offset)
    put_s = time.perf_counter() - started
    return {
        "bytes_per_million_keys": index.memory_bytes,
        "mib_per_million_keys": round(index.memory_bytes / MIB, 1),
        "capacity_keys": index.capacity,
        "puts_per_s": round(len(keys) / put_s),
    }


def produce_latency(url: str, topic: str, seconds: float) -> list[float]:
    samples = []
    with httpx.Client(base_url=url) as client:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            started = time.perf_counter()
            answer = client.post(f"/v1/topics/{topic}/partitions/0/messages", json={"messages": [{"value": "x" * 100}]})
            samples.append(time.perf_counter() - started)
            answer.raise_for_status()
    return samples


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "requests": len(ordered),
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1000, 2),
    }


def latency_while_compacting(directory: Path, seconds: float, mib: int, keys: int) -> dict[str, object]:
    server = StandaloneServer(directory / "server", env={"TALOS_SEGMENT_BYTES": str(4 * MIB)})
    server.start()
    try:
        with Admin(server.url) as admin:
            admin.create_topic("plain")
            admin.create_topic("table", cleanup_policy="compact", min_cleanable_dirty_ratio=1.0)
        with httpx.Client(base_url=server.url, timeout=60) as client:
            value = "v" * 100
            written = 0
            counter = 0
            while written < mib * MIB:  # the compacted partition, 90 % overwrites
                messages = [{"key": f"key-{(counter + i) % keys:08d}", "value": value} for i in range(500)]
                client.post("/v1/topics/table/partitions/0/messages", json={"messages": messages}).raise_for_status()
                counter += 500
                written += 500 * 130
        produce_latency(server.url, "plain", 1.0)  # warm up
        alone = produce_latency(server.url, "plain", seconds)
        passes: list[dict[str, object]] = []

        def compact_once() -> None:
            with httpx.Client(base_url=server.url, timeout=600) as client:
                answer = client.post("/v1/topics/table/partitions/0/compact")
                answer.raise_for_status()
                passes.append(answer.json())

        thread = threading.Thread(target=compact_once, daemon=True)
        thread.start()
        during: list[float] = []
        while thread.is_alive():  # only while the pass runs
            during += produce_latency(server.url, "plain", 0.25)
        thread.join()
    finally:
        server.stop()
    a, d = percentiles(alone), percentiles(during)
    return {
        "alone": a,
        "while_compacting": d,
        "p99_ratio": round(float(d["p99_ms"]) / float(a["p99_ms"]), 2),
        "pass": passes[0] if passes else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=64, help="log size for the pass and the raw-disk figure")
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--latency-seconds", type=float, default=8.0)
    parser.add_argument("--server-mib", type=int, default=48, help="compacted partition size on the server")
    parser.add_argument("--json", action="store_true", help="one JSON line at the end")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="talos-compaction-bench-") as scratch:
        directory = Path(scratch)
        results: dict[str, object] = {}
        print("raw disk ...", flush=True)
        results["raw_disk"] = raw_disk(directory, args.mib)
        print(f"  {results['raw_disk']}", flush=True)
        print(f"compaction pass over {args.mib} MiB, 90 % overwrites ...", flush=True)
        results["compaction"] = compaction_pass(directory, args.mib, args.keys)
        print(f"  {results['compaction']}", flush=True)
        print("key index ...", flush=True)
        results["key_index"] = key_index()
        print(f"  {results['key_index']}", flush=True)
        print(f"produce latency alone and while compacting ({args.latency_seconds:g} s each) ...", flush=True)
        results["produce_latency"] = latency_while_compacting(
            directory, args.latency_seconds, args.server_mib, args.keys
        )
        print(f"  {results['produce_latency']}", flush=True)
    raw, pass_ = results["raw_disk"], results["compaction"]
    assert isinstance(raw, dict) and isinstance(pass_, dict)
    print(
        f"compaction read {pass_['read_mib_s']} MiB/s, wrote {pass_['written_mib_s']} MiB/s; raw disk read "
        f"{raw['read_mib_s']} MiB/s, wrote {raw['write_mib_s']} MiB/s; reclaimed {pass_['reclaimed_pct']} %"
    )
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
