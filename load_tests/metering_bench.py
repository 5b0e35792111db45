"""Metering on this machine, in one run against ``talos standalone`` and a local Spark:

    .venv/bin/python load_tests/metering_bench.py [--records 100000] [--interval 10]

1. End-to-end delay: a burst of produce requests at t0; the metering job runs continuously (one-second
   micro-batches); the delay is when ``traffic`` in the DuckDB store first shows the burst. It is bounded
   by the servers' emit interval (``--interval``, 10 s by default) plus one micro-batch.
2. Job throughput: ``--records`` synthetic usage records are put in ``__talos_metrics``; the job counts
   them in one ``availableNow`` run; records/s over the run's wall time (Spark planning included).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import orjson

from metering.duckdb_store import DuckDbStore
from metering.job import spark_session, start
from metering.store import Window
from server.devservices import StandaloneServer
from talos import Admin, Producer


def delay(url: str, spark: object, work: Path) -> float:
    with Admin(url) as admin:
        admin.create_topic("burst", partitions=2)
        with Producer(url) as producer:
            producer.send("burst", b"warm-up", partition=0).result()  # the server's first metrics create the topic
        while "__talos_metrics" not in [t.name for t in admin.list_topics()]:
            time.sleep(0.2)
    store = DuckDbStore(work / "delay.duckdb")
    query = start(spark, url=url, store=store, checkpoint=str(work / "delay-ckpt"), trigger_s=1.0)
    try:
        time.sleep(5)  # the query is running (its first batches done)
        started = time.time()
        with Producer(url) as producer:
            for i in range(1000):
                producer.send("burst", b"x" * 100, partition=i % 2)
            producer.flush()
        window = Window(0, 2**62)
        while sum(int(row["messages_in"]) for row in store.traffic(window, topic="burst")) < 1001:  # type: ignore[call-overload]
            time.sleep(0.1)
        return time.time() - started
    finally:
        query.stop()


def throughput(url: str, spark: object, work: Path, records: int) -> float:
    now_ms = int(time.time() * 1000)
    with Producer(url, linger_ms=5) as producer:
        for i in range(records):
            usage = {
                "server": "bench", "window_start_ms": now_ms, "window_end_ms": now_ms, "tenant": f"t{i % 10}",
                "topic": f"topic{i % 50}", "partition": i % 8, "bytes_in": 100, "messages_in": 1, "bytes_out": 0,
                "messages_out": 0, "requests": 1, "errors": 0, "latency_ms_sum": 1.0, "latency_ms_max": 1.0,
            }  # fmt: skip
            producer.send("__talos_metrics", orjson.dumps(usage), partition=i % 4)
        producer.flush()
    store = DuckDbStore(work / "throughput.duckdb")
    started = time.perf_counter()
    query = start(spark, url=url, store=store, checkpoint=str(work / "throughput-ckpt"), once=True)
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    counted = sum(int(row["messages_in"]) for row in store.tenants(Window(0, 2**62)))  # type: ignore[call-overload]
    assert counted >= records, f"counted {counted} of {records}"
    return records / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--interval", type=float, default=10.0, help="the servers' metering interval (s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        server = StandaloneServer(work / "data", env={"TALOS_METERING_INTERVAL_S": str(args.interval)}).start()
        spark = spark_session()
        try:
            seconds = delay(server.url, spark, work)
            print(f"end-to-end delay (produce -> queryable), emit interval {args.interval:.0f}s: {seconds:.1f}s")
            rate = throughput(server.url, spark, work, args.records)
            print(f"metering job: {args.records} records in one availableNow run: {rate:,.0f} records/s")
        finally:
            spark.stop()
            server.stop()


if __name__ == "__main__":
    main()
