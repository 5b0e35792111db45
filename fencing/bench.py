"""Storage benchmark: the segment log against the raw disk, measured in one run on one machine.

    python -m fencing.bench [--dir DIR] [--mib 256] [--hdfs auto|hdfs://host:port/path|off]

Local disk: durable append throughput of the log (1 KiB records in ~1 MiB batches, one flush per batch)
as a ratio to plain ``write`` + ``fdatasync`` of the same bytes in the same directory; the two runs
alternate and the medians are compared. HDFS (``auto`` starts a real one): ``hsync`` latency p50/p99 of
small writes, and the same throughput comparison against plain ``hdfs-native`` write + ``hsync``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from fencing.epochs import DirectoryEpochSource
from fencing.filesystem import FileSystem
from fencing.log import LogConfig, PartitionLog
from fencing.storage import open_storage
from talos import RecordData, encode_batch

MIB = 1024 * 1024


def make_batches(count: int, record_bytes: int = 1024, batch_bytes: int = MIB) -> list[bytes]:
    """Distinct ~1 MiB batches of 1 KiB records (encoded once, outside the timed loops)."""
    per_batch = max(batch_bytes // (record_bytes + 8), 1)
    batches = []
    for n in range(count):
        payload = os.urandom(record_bytes)
        batches.append(encode_batch([RecordData(payload, key=f"{n}-{i}".encode()) for i in range(per_batch)]))
    return batches


def timed(run: Callable[[FileSystem, str, list[bytes], int], int], *args: object) -> tuple[float, int]:
    start = time.perf_counter()
    written = run(*args)  # type: ignore[arg-type]
    return time.perf_counter() - start, written


def log_run(fs: FileSystem, directory: str, batches: list[bytes], total: int) -> int:
    plog = PartitionLog.open(fs, directory, DirectoryEpochSource(fs, directory), config=LogConfig())
    written = 0
    index = 0
    while written < total:
        batch = batches[index % len(batches)]
        plog.append(batch, verify=False)
        plog.flush()
        written += len(batch)
        index += 1
    plog.close()
    return written


def raw_run(fs: FileSystem, path: str, batches: list[bytes], total: int) -> int:
    handle = fs.create(path)
    written = 0
    index = 0
    while written < total:
        batch = batches[index % len(batches)]
        handle.write(batch)
        handle.sync()
        written += len(batch)
        index += 1
    handle.close()
    return written


def compare(fs: FileSystem, root: str, batches: list[bytes], total: int, rounds: int) -> dict[str, float]:
    """Alternate raw and log runs; medians of MiB/s and their ratio."""
    raw_rates, log_rates = [], []
    for _ in range(rounds):
        tag = uuid.uuid4().hex[:8]
        seconds, written = timed(raw_run, fs, f"{root}/raw-{tag}", batches, total)
        raw_rates.append(written / MIB / seconds)
        fs.delete(f"{root}/raw-{tag}")
        seconds, written = timed(log_run, fs, f"{root}/log-{tag}", batches, total)
        log_rates.append(written / MIB / seconds)
        fs.delete(f"{root}/log-{tag}", recursive=True)
    raw, logged = statistics.median(raw_rates), statistics.median(log_rates)
    return {"raw_mib_s": raw, "log_mib_s": logged, "ratio": logged / raw}


def hsync_latency(fs: FileSystem, root: str, samples: int, size: int = 1024) -> dict[str, float]:
    handle = fs.create(f"{root}/latency-{uuid.uuid4().hex[:8]}")
    payload = os.urandom(size)
    latencies = []
    for _ in range(samples):
        start = time.perf_counter()
        handle.write(payload)
        handle.sync()
        latencies.append((time.perf_counter() - start) * 1000)
    handle.close()
    latencies.sort()
    return {
        "p50_ms": latencies[len(latencies) // 2],
        "p99_ms": latencies[min(int(len(latencies) * 0.99), len(latencies) - 1)],
        "syncs_per_s": 1000 / statistics.mean(latencies),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fencing.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", help="local directory to measure (default: a temp dir under the CWD)")
    parser.add_argument("--mib", type=int, default=256, help="MiB written per run (default 256)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating runs of each (default 3)")
    parser.add_argument("--hdfs", default="auto", help="'auto' starts a local HDFS; an hdfs:// URL; 'off'")
    parser.add_argument("--hdfs-mib", type=int, default=128, help="MiB written per HDFS run (default 128)")
    parser.add_argument("--samples", type=int, default=1000, help="hsync latency samples (default 1000)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)

    batches = make_batches(8)
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="talos-bench-", dir=args.dir or ".") as scratch:
        fs, root = open_storage(scratch)
        print(f"local disk ({scratch}): {args.mib} MiB per run, {args.rounds} rounds ...", file=sys.stderr)
        results["local"] = compare(fs, root, batches, args.mib * MIB, args.rounds)

        if args.hdfs != "off":
            cluster = None
            url = args.hdfs
            if url == "auto":
                from talos.devservices import HdfsCluster

                cluster = HdfsCluster(Path(scratch) / "hdfs-service")
                print("starting a local HDFS ...", file=sys.stderr)
                cluster.start()
                url = f"{cluster.url}/bench"
            try:
                hfs, hroot = open_storage(url)
                hfs.mkdirs(hroot)
                print(f"HDFS ({url}): hsync latency, then {args.hdfs_mib} MiB per run ...", file=sys.stderr)
                results["hdfs_hsync_1k"] = hsync_latency(hfs, hroot, args.samples)
                results["hdfs"] = compare(hfs, hroot, batches, args.hdfs_mib * MIB, args.rounds)
                hfs.delete(hroot, recursive=True)
            finally:
                if cluster is not None:
                    cluster.stop()

    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print("\n| what | raw write+sync MiB/s | log append+flush MiB/s | ratio |")
    print("|---|---|---|---|")
    for name in ("local", "hdfs"):
        if name in results:
            r = results[name]
            print(
                f"| {name}, 1 KiB records in ~1 MiB batches | {r['raw_mib_s']:.0f} | {r['log_mib_s']:.0f} | "
                f"{r['ratio']:.2f} |"
            )
    if "hdfs_hsync_1k" in results:
        h = results["hdfs_hsync_1k"]
        print(
            f"\nHDFS hsync of 1 KiB writes: p50 {h['p50_ms']:.2f} ms, p99 {h['p99_ms']:.2f} ms, "
            f"{h['syncs_per_s']:.0f} syncs/s (one writer)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
