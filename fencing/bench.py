"""Storage benchmark: the segment log against the raw disk, measured in one run on one machine.

    python -m fencing.bench [--dir DIR] [--mib 256] [--hdfs auto|hdfs://host:port/path|off] [--rolls]

Local disk: durable append throughput of the log (1 KiB records in ~1 MiB batches, one flush per batch)
as a ratio to plain ``write`` + ``fdatasync`` of the same bytes in the same directory; the two runs
alternate and the medians are compared. HDFS (``auto`` starts a real one): ``hsync`` latency p50/p99 of
small writes, and the same throughput comparison against plain ``hdfs-native`` write + ``hsync``.

``--rolls``: instead, the latency of every flush of a log whose segments roll often (``--roll-segment-mib``),
on both: p50, p99 and max over all flushes, and the max over the flushes that filled a segment (the roll
stall: an HDFS close waits for the last block).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
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


def roll_latency(
    fs: FileSystem, root: str, *, total_bytes: int, segment_bytes: int, batch_bytes: int
) -> dict[str, float]:
    """Flush latencies (ms) of one log written in ``batch_bytes`` flushes, rolling every ``segment_bytes``."""
    directory = f"{root}/rolls-{uuid.uuid4().hex[:8]}"
    plog = PartitionLog.open(
        fs, directory, DirectoryEpochSource(fs, directory), config=LogConfig(segment_bytes=segment_bytes)
    )
    batch = make_batches(1, batch_bytes=batch_bytes)[0]
    latencies, rolling = [], []
    in_segment = written = 0
    while written < total_bytes:
        start = time.perf_counter()
        plog.append(batch, verify=False)
        plog.flush()
        elapsed = (time.perf_counter() - start) * 1000
        latencies.append(elapsed)
        written += len(batch)
        in_segment += len(batch)
        if in_segment >= segment_bytes:  # this flush filled the segment: it rolled
            rolling.append(elapsed)
            in_segment = 0
    plog.close()
    fs.delete(directory, recursive=True)
    latencies.sort()
    return {
        "flushes": len(latencies),
        "rolls": len(rolling),
        "p50_ms": latencies[len(latencies) // 2],
        "p99_ms": latencies[min(int(len(latencies) * 0.99), len(latencies) - 1)],
        "max_ms": latencies[-1],
        "rolling_max_ms": max(rolling, default=0.0),
        "rolling_mean_ms": statistics.mean(rolling) if rolling else 0.0,
    }


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
    parser.add_argument("--rolls", action="store_true", help="measure flush latency across segment rolls instead")
    parser.add_argument("--roll-segment-mib", type=int, default=4, help="segment size with --rolls (default 4)")
    parser.add_argument("--roll-batch-kib", type=int, default=64, help="bytes per flush with --rolls (default 64)")
    args = parser.parse_args(argv)
    if args.rolls:
        return _main_rolls(args)

    batches = make_batches(8)
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="talos-bench-", dir=args.dir or ".") as scratch:
        fs, root = open_storage(scratch)
        print(f"local disk ({scratch}): {args.mib} MiB per run, {args.rounds} rounds ...", file=sys.stderr)
        results["local"] = compare(fs, root, batches, args.mib * MIB, args.rounds)

        if args.hdfs != "off":
            with _hdfs(args.hdfs, scratch) as (hfs, hroot):
                print(f"HDFS ({hroot}): hsync latency, then {args.hdfs_mib} MiB per run ...", file=sys.stderr)
                results["hdfs_hsync_1k"] = hsync_latency(hfs, hroot, args.samples)
                results["hdfs"] = compare(hfs, hroot, batches, args.hdfs_mib * MIB, args.rounds)

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


@contextlib.contextmanager
def _hdfs(url: str, scratch: str) -> Iterator[tuple[FileSystem, str]]:
    """The HDFS to measure: ``url``, or (``auto``) a local one started here and stopped after; its bench
    directory is deleted after."""
    cluster = None
    if url == "auto":
        from server.devservices import HdfsCluster

        cluster = HdfsCluster(Path(scratch) / "hdfs-service")
        print("starting a local HDFS ...", file=sys.stderr)
        cluster.start()
        url = f"{cluster.url}/bench"
    try:
        hfs, hroot = open_storage(url)
        hfs.mkdirs(hroot)
        yield hfs, hroot
        hfs.delete(hroot, recursive=True)
    finally:
        if cluster is not None:
            cluster.stop()


def _main_rolls(args: argparse.Namespace) -> int:
    def measure(fs: FileSystem, root: str, mib: int) -> dict[str, float]:
        return roll_latency(
            fs,
            root,
            total_bytes=mib * MIB,
            segment_bytes=args.roll_segment_mib * MIB,
            batch_bytes=args.roll_batch_kib * 1024,
        )

    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="talos-bench-", dir=args.dir or ".") as scratch:
        fs, root = open_storage(scratch)
        results["local"] = measure(fs, root, args.mib)
        if args.hdfs != "off":
            with _hdfs(args.hdfs, scratch) as (hfs, hroot):
                results["hdfs"] = measure(hfs, hroot, args.hdfs_mib)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"\nflush latency (ms), {args.roll_batch_kib} KiB per flush, a roll every {args.roll_segment_mib} MiB")
    print("| storage | flushes | rolls | p50 | p99 | max | max of the rolling flushes | their mean |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        print(
            f"| {name} | {r['flushes']:.0f} | {r['rolls']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
            f"{r['max_ms']:.2f} | {r['rolling_max_ms']:.2f} | {r['rolling_mean_ms']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
