"""Sink throughput of the connectors on this machine, in one run against ``talos standalone``, a real HDFS
(WebHDFS) and a real search server (osmem-server):

    .venv/bin/python load_tests/connect_bench.py [--records 100000] [--size 200] [--tasks 1]

``--records`` JSON records of about ``--size`` bytes go into a topic of 4 partitions first. Then each sink
(HDFS JSON lines, HDFS Parquet, Elasticsearch) runs as ``talos connect run`` until it has written them
all; records/s counts from its first written record to its last (start-up and group join excluded).
Each is set beside a baseline measured in the same run, so the figure is a ratio, not a timing:

* Talos alone: a plain ``Consumer`` reading the whole topic (the most a sink can get);
* the target alone: the same records written straight to it, in the same file or bulk sizes, with no
  Talos in between (HDFS: ``write`` of whole files through WebHDFS; search: ``_bulk`` of the documents).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import yaml
from hdfs import InsecureClient
from opensearchpy import OpenSearch

from connectors.elasticsearch.naming import document, document_id
from connectors.hdfs.files import encode
from server.devservices import HdfsCluster, ManagedProcess, SearchServer, StandaloneServer, free_port, wait_until
from talos import Admin, Consumer, Message, Producer

TOPIC = "bench"
PARTITIONS = 4
ROLL_BYTES = 8 * 1024 * 1024
BULK = 2000


def fill(url: str, records: int, size: int) -> None:
    pad = "x" * max(size - 40, 0)
    with Admin(url) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS)
    with Producer(url, linger_ms=20) as producer:
        for n in range(records):
            producer.send(TOPIC, value=orjson.dumps({"n": n, "pad": pad}), key=f"k{n}")


def read_all(url: str, records: int) -> tuple[list[Message], float]:
    """Every record, and the rate at which a plain consumer read them."""
    out: list[Message] = []
    with Consumer(url, topics=[TOPIC], max_bytes=4 * 1024 * 1024) as consumer:
        started = time.perf_counter()
        while len(out) < records:
            out += consumer.poll(timeout=1.0, max_messages=10_000)
        return out, records / (time.perf_counter() - started)


def run_sink(url: str, work: Path, name: str, kind: str, config: dict[str, Any], tasks: int, records: int) -> float:
    """records/s of ``talos connect run`` from its first written record to its last."""
    path = work / f"{name}.yaml"
    connector = {"name": name, "type": kind, "topics": [TOPIC], "tasks": tasks, "config": config}
    path.write_text(yaml.safe_dump({"status_interval_s": 60, "connectors": [connector]}))
    port = free_port()
    argv = [sys.executable, "-m", "talos.cli", "connect", "run", str(path), "--url", url, "--status-port", str(port)]
    runner = ManagedProcess(name, argv, log_path=work / f"{name}.log")
    runner.start()

    def written() -> int:
        runner.check_alive()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as answer:
            return sum(t["records"] for c in json.load(answer)["connectors"] for t in c["tasks"])

    try:
        wait_until(lambda: written() > 0, timeout=120, what=f"{name} to write", interval=0.01)
        started = time.perf_counter()
        first = written()
        wait_until(lambda: written() >= records, timeout=900, what=f"{name} to finish", interval=0.05)
        return (records - first) / (time.perf_counter() - started)
    finally:
        runner.stop()


def hdfs_direct(client: InsecureClient, messages: list[Message], fmt: str) -> float:
    """records/s writing the same records as files of the sink's size, straight through WebHDFS."""
    by_partition: dict[int, list[Message]] = {}
    for message in messages:
        by_partition.setdefault(message.partition, []).append(message)
    started = time.perf_counter()
    for partition, rows in by_partition.items():
        start = 0
        while start < len(rows):  # files of the sink's roll size, as the sink counts it
            end, size = start, 0
            while end < len(rows) and size < ROLL_BYTES:
                size += len(rows[end].value or b"") + len(rows[end].key or b"") + 64
                end += 1
            path = f"/direct/{fmt}/{partition}/{rows[start].offset}.{fmt}"
            client.write(path, data=encode(rows[start:end], fmt), overwrite=True)
            start = end
    return len(messages) / (time.perf_counter() - started)


def search_direct(client: OpenSearch, messages: list[Message]) -> float:
    """records/s bulk-indexing the same documents, straight to the search server."""
    started = time.perf_counter()
    for start in range(0, len(messages), BULK):
        lines = []
        for m in messages[start : start + BULK]:
            lines.append(
                orjson.dumps({"index": {"_index": "direct", "_id": document_id(m.topic, m.partition, m.offset)}})
            )
            lines.append(orjson.dumps(document(m, "talos")))
        client.bulk(body=b"\n".join(lines) + b"\n")
    return len(messages) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=200, help="bytes per record (JSON)")
    parser.add_argument("--tasks", type=int, default=1, help="tasks per sink")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="talos-connect-bench-") as tmp:
        work = Path(tmp)
        hdfs = HdfsCluster(work / "hdfs")
        search = SearchServer(work)
        server = StandaloneServer(work / "talos")
        try:
            hdfs.start()
            search.start()
            url = server.start().url
            print(f"filling {TOPIC}: {args.records} records of ~{args.size} bytes, {PARTITIONS} partitions", flush=True)
            fill(url, args.records, args.size)
            messages, consume_rate = read_all(url, args.records)
            client = InsecureClient(hdfs.webhdfs_url)
            search_client = OpenSearch(hosts=[search.url], timeout=120)
            rows = []
            for fmt in ("jsonl", "parquet"):
                config = {
                    "namenode": hdfs.webhdfs_url,
                    "path": f"/bench/{fmt}",
                    "format": fmt,
                    "roll_bytes": ROLL_BYTES,
                }
                sink = run_sink(url, work, f"hdfs-{fmt}", "hdfs-sink", config, args.tasks, args.records)
                rows.append((f"HDFS sink, {fmt}", sink, hdfs_direct(client, messages, fmt)))
            config = {"hosts": [search.url], "index": "bench-{yyyy.MM.dd}", "batch_size": BULK, "flush_ms": 1000}
            sink = run_sink(url, work, "search", "elasticsearch-sink", config, args.tasks, args.records)
            rows.append(("Elasticsearch sink", sink, search_direct(search_client, messages)))
        finally:
            server.stop()
            search.stop()
            hdfs.stop()
    print(f"\n{args.records} records of ~{args.size} B, {args.tasks} task(s) per sink, {os.cpu_count()} cores")
    print(f"Talos alone (one Consumer reading the topic): {consume_rate:,.0f} records/s\n")
    print(f"{'sink':<22} {'records/s':>11} {'target alone':>13} {'sink/target':>12} {'sink/Talos':>11}")
    for what, sink, direct in rows:
        print(f"{what:<22} {sink:>11,.0f} {direct:>13,.0f} {sink / direct:>12.2f} {sink / consume_rate:>11.2f}")


if __name__ == "__main__":
    main()
