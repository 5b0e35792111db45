"""The trace index store, measured (docs/trace.md): SQLite (R*Tree over offset ranges + a key B-tree, what
``server.trace.index`` uses), DuckDB (a table with min/max pruning), and no index (scanning the trace topic's
records, decoding each event):

    .venv/bin/python load_tests/trace_index_bench.py [--events 1000000]

Events as a traced topic at 10k msgs/s makes them: 100-message produce batches, as many deliveries, a
commit every 10 batches, over 32 partitions, with a key per message. Prints insert rate, the latency of
"the events of one message" and "the messages of one key", and the scan rate.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow as pa

from server.trace.events import TraceEvent, decode_event, encode_event
from server.trace.index import PartitionIndex

PARTITIONS = 32
BATCH = 100


def events(count: int) -> list[TraceEvent]:
    out: list[TraceEvent] = []
    next_offset = [0] * PARTITIONS
    ts = 1_700_000_000_000
    while len(out) < count:
        p = len(out) % PARTITIONS
        first = next_offset[p]
        next_offset[p] += BATCH
        ts += 10  # 100 events/s per... a day of 10k msgs/s is ~8.6M such batches
        keys = [{"offset": first + i, "key": f"customer-{random.randrange(1_000_000)}"} for i in range(BATCH)]
        out.append(TraceEvent("produced", "orders", p, first, first + BATCH - 1, ts, 1, {"tenant": "acme"}, keys))
        out.append(TraceEvent("delivered", "orders", p, first, first + BATCH - 1, ts + 5, 1, {"group": "g"}))
        if first % (10 * BATCH) == 0:
            out.append(TraceEvent("committed", "orders", p, max(0, first - 10 * BATCH), first, ts + 8, 1, {}))
    return out[:count]


def timed(fn: object, runs: list[tuple[object, ...]]) -> tuple[float, float]:
    took = []
    for args in runs:
        started = time.perf_counter()
        fn(*args)  # type: ignore[operator]
        took.append((time.perf_counter() - started) * 1000)
    took.sort()
    return statistics.median(took), took[int(len(took) * 0.99) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    made = events(args.events)
    records = [(i, encode_event(e, "s1").value or b"") for i, e in enumerate(made)]
    max_offset = max(e.last for e in made)
    lookups = [("orders", random.randrange(PARTITIONS), random.randrange(max_offset // 2)) for _ in range(200)]
    keys = [(f"customer-{random.randrange(1_000_000)}",) for _ in range(200)]
    print(f"{len(made):,} events, {sum(len(e.messages) for e in made):,} keyed messages")

    with tempfile.TemporaryDirectory() as work:
        index = PartitionIndex(str(Path(work) / "trace.sqlite"))
        started = time.perf_counter()
        for at in range(0, len(records), 2000):
            index.add(records[at : at + 2000], at + 2000)
        took = time.perf_counter() - started
        print(f"sqlite : insert {len(records) / took:,.0f} events/s ({took:.1f} s)")
        p50, p99 = timed(index.events_at, lookups)
        print(f"sqlite : events of a message p50 {p50:.2f} ms p99 {p99:.2f} ms")
        p50, p99 = timed(lambda k: index.keyed("orders", k.encode(), 0, 2**62, 100), keys)
        print(f"sqlite : messages of a key   p50 {p50:.2f} ms p99 {p99:.2f} ms")
        size = sum(f.stat().st_size for f in Path(work).iterdir())
        print(f"sqlite : {size / len(records):.0f} bytes per event on disk")
        index.close()

        db = duckdb.connect(str(Path(work) / "trace.duckdb"))
        db.execute("CREATE TABLE events (topic TEXT, p INT, first BIGINT, last BIGINT, ts BIGINT, body BLOB)")
        db.execute("CREATE TABLE keys (topic TEXT, key TEXT, ts BIGINT, p INT, o BIGINT)")
        started = time.perf_counter()
        for at in range(0, len(made), 20_000):  # bulk, through Arrow: executemany is row by row
            chunk = made[at : at + 20_000]
            rows = pa.table(
                {
                    "topic": [e.topic for e in chunk],
                    "p": [e.partition for e in chunk],
                    "first": [e.first for e in chunk],
                    "last": [e.last for e in chunk],
                    "ts": [e.ts for e in chunk],
                    "body": [records[at + i][1] for i in range(len(chunk))],
                }
            )
            keyed = [(e, m) for e in chunk for m in e.messages]
            key_rows = pa.table(
                {
                    "topic": [e.topic for e, _ in keyed],
                    "key": [m["key"] for _, m in keyed],
                    "ts": [e.ts for e, _ in keyed],
                    "p": [e.partition for e, _ in keyed],
                    "o": [m["offset"] for _, m in keyed],
                }
            )
            db.register("chunk", rows)
            db.register("chunk_keys", key_rows)
            db.execute("INSERT INTO events SELECT * FROM chunk")
            db.execute("INSERT INTO keys SELECT * FROM chunk_keys")
            db.unregister("chunk")
            db.unregister("chunk_keys")
        took = time.perf_counter() - started
        print(f"duckdb : insert {len(made) / took:,.0f} events/s ({took:.1f} s)")
        p50, p99 = timed(
            lambda t, p, o: db.execute(
                "SELECT body FROM events WHERE topic = ? AND p = ? AND first <= ? AND last >= ?", (t, p, o, o)
            ).fetchall(),
            lookups,
        )
        print(f"duckdb : events of a message p50 {p50:.2f} ms p99 {p99:.2f} ms")
        p50, p99 = timed(
            lambda k: db.execute("SELECT p, o FROM keys WHERE topic = 'orders' AND key = ? LIMIT 100", (k,)).fetchall(),
            keys,
        )
        print(f"duckdb : messages of a key   p50 {p50:.2f} ms p99 {p99:.2f} ms")
        db.close()

    started = time.perf_counter()
    for _, value in records:
        decode_event(value)
    took = time.perf_counter() - started
    print(f"scan   : {len(records) / took:,.0f} events/s decoded (a day at 10k msgs/s = {8.64e6 * 2.1:,.0f} events)")


if __name__ == "__main__":
    main()
