"""Run a Locust scenario headless against a Talos URL for a set time; print a summary and keep the CSVs.

    .venv/bin/python load_tests/locust_run.py --url http://127.0.0.1:8080 --scenario mixed --seconds 30

Scenarios (``load_tests/locustfile.py``): ``produce`` (single-message produce requests), ``consume``
(fetches of up to 100 messages), ``mixed`` (both, one to one). The topic is created if missing, and for
``consume`` and ``mixed`` filled with ``--prefill`` messages first. The summary gives requests/s,
failures and p50/p95/p99 per request type; Locust's CSVs (``*_stats.csv``, ``*_stats_history.csv``,
``*_failures.csv``) go to ``--csv-dir``. Exits 1 if any request failed.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import subprocess
import sys
import time
from pathlib import Path

from talos import Admin, ConflictError, Producer

HERE = Path(__file__).resolve().parent
USERS = {"produce": "ProduceUser", "consume": "ConsumeUser", "mixed": "MixedUser"}


def prepare(url: str, topic: str, partitions: int, prefill: int, size: int) -> None:
    with Admin(url) as admin:
        with contextlib.suppress(ConflictError):  # there already
            admin.create_topic(topic, partitions=partitions)
        held = sum((p.latest or 0) - (p.earliest or 0) for p in admin.describe_topic(topic).partition_offsets)
    # At least one message per partition, acknowledged before the clock starts: a run of a few seconds
    # on a loaded machine otherwise spends them opening partitions and may complete no request at all.
    with Producer(url) as producer:
        for i in range(max(prefill - held, partitions)):
            producer.send(topic, b"p" * size, partition=i % partitions)
        producer.flush()


def summary(stats_csv: Path) -> tuple[list[list[str]], int]:
    """Rows of (name, requests, failures, requests/s, p50, p95, p99 ms) and the total failure count."""
    rows: list[list[str]] = []
    failures = 0
    with stats_csv.open() as handle:
        for row in csv.DictReader(handle):
            name = row["Name"] if row["Type"] else "all"
            rows.append(
                [
                    name,
                    row["Request Count"],
                    row["Failure Count"],
                    f"{float(row['Requests/s']):,.0f}",
                    row["50%"],
                    row["95%"],
                    row["99%"],
                ]
            )
            if name == "all":
                failures = int(row["Failure Count"])
    return rows, failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("TALOS_URL", "http://127.0.0.1:8080"))
    parser.add_argument("--scenario", choices=sorted(USERS), default="produce")
    parser.add_argument("--users", type=int, default=64, help="concurrent users (closed loop)")
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--topic", default="load")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--size", type=int, default=100, help="message bytes")
    parser.add_argument("--batch", type=int, default=1, help="messages per produce request")
    parser.add_argument("--prefill", type=int, default=20_000, help="messages to have before consuming")
    parser.add_argument("--csv-dir", type=Path, default=Path("load-results"))
    args = parser.parse_args()

    if args.scenario != "produce":
        print(f"preparing {args.topic}: {args.partitions} partitions, {args.prefill} messages", flush=True)
    prepare(args.url, args.topic, args.partitions, args.prefill if args.scenario != "produce" else 0, args.size)
    args.csv_dir.mkdir(parents=True, exist_ok=True)
    prefix = args.csv_dir / f"{args.scenario}-{time.strftime('%Y%m%d-%H%M%S')}"
    env = {
        **os.environ,
        "TALOS_LOAD_TOPIC": args.topic,
        "TALOS_LOAD_PARTITIONS": str(args.partitions),
        "TALOS_LOAD_MESSAGE_BYTES": str(args.size),
        "TALOS_LOAD_BATCH": str(args.batch),
    }
    command = [
        sys.executable, "-m", "locust", "-f", str(HERE / "locustfile.py"), "--headless",
        "-u", str(args.users), "-r", str(args.users), "-t", f"{args.seconds}s", "--host", args.url,
        "--csv", str(prefix), "--csv-full-history", "--only-summary", "--stop-timeout", "5",
        "--loglevel", "WARNING", USERS[args.scenario],
    ]  # fmt: skip
    log = prefix.with_suffix(".log")
    print(f"{args.scenario}: {args.users} users against {args.url} for {args.seconds} s (log: {log})", flush=True)
    started = time.monotonic()
    shown = 0.0
    with log.open("w") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        while process.poll() is None:
            time.sleep(0.5)
            elapsed = time.monotonic() - started
            if elapsed - shown >= 5 and elapsed < args.seconds:
                shown = elapsed
                print(f"  {elapsed:.0f}/{args.seconds} s", flush=True)
    stats = Path(f"{prefix}_stats.csv")
    if not stats.exists():
        print(log.read_text()[-3000:], file=sys.stderr)
        sys.exit(f"locust wrote no statistics (exit {process.returncode})")
    rows, failures = summary(stats)
    header = ["request", "count", "failures", "req/s", "p50 ms", "p95 ms", "p99 ms"]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(cell).rjust(width) for cell, width in zip(row, widths, strict=True)))
    print(f"CSVs: {prefix}_stats.csv, {prefix}_stats_history.csv, {prefix}_failures.csv")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
