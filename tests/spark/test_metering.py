"""Metering end to end: known traffic → the server's __talos_metrics → the Spark job → DuckDB →
``talos metering query``: totals equal the traffic exactly, and re-running the job (with its checkpoint,
or with the checkpoint lost) counts nothing twice."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from metering.duckdb_store import DuckDbStore
from metering.job import start
from server.devservices import wait_until
from talos import Admin, Consumer, Producer
from tests.spark.conftest import StandaloneServer


def metered_messages(url: str, topic: str) -> int:
    """messages_in of ``topic`` in __talos_metrics so far (read directly, to know the servers emitted)."""
    with Admin(url) as admin:
        if "__talos_metrics" not in [t.name for t in admin.list_topics()]:
            return 0  # nothing emitted yet
    with Consumer(url, topics=["__talos_metrics"], start="earliest", wait_ms=0) as consumer:
        total, quiet = 0, 0
        while quiet < 2:
            batch = consumer.poll(0.5)
            quiet = 0 if batch else quiet + 1
            total += sum(
                json.loads(m.value or b"{}")["messages_in"]
                for m in batch
                if b'"topic":"%s"' % topic.encode() in (m.value or b"")
            )
        return total


def run_job(spark: Any, url: str, store: DuckDbStore, checkpoint: Path) -> None:
    query = start(spark, url=url, store=store, checkpoint=str(checkpoint), once=True, max_records=50)
    query.awaitTermination(timeout=300)
    assert query.exception() is None


def query_cli(store: Path, what: str, *extra: str) -> list[dict[str, Any]]:
    answer = subprocess.run(
        [
            sys.executable,
            "-m",
            "talos.cli",
            "metering",
            "query",
            what,
            "--store",
            str(store),
            "--since",
            "1d",
            "--json",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [json.loads(line) for line in answer.stdout.splitlines()]


def test_known_traffic_is_counted_exactly_once(
    spark: Any, server: StandaloneServer, topic_name: str, tmp_path: Path
) -> None:
    with Admin(server.url) as admin:
        admin.create_topic(topic_name, partitions=2)
    with Producer(server.url, linger_ms=0) as producer:
        for i in range(120):
            producer.send(topic_name, f"payload-{i}".encode(), partition=i % 2).result()
    with Consumer(server.url, partitions=[(topic_name, 0)], start="earliest") as consumer:
        read = []
        while len(read) < 60:
            read += consumer.poll(2.0)
    wait_until(lambda: metered_messages(server.url, topic_name) == 120, timeout=30, what="the traffic metered")
    time.sleep(1.5)  # the fetches' last window too
    store_path = tmp_path / "usage.duckdb"
    store = DuckDbStore(store_path)
    run_job(spark, server.url, store, tmp_path / "checkpoint")
    traffic = {row["partition"]: row for row in query_cli(store_path, "traffic", "--topic", topic_name)}
    assert traffic[0]["messages_in"] == traffic[1]["messages_in"] == 60
    assert traffic[0]["messages_out"] == 60 and traffic[1]["messages_out"] == 0
    assert traffic[0]["bytes_in"] > 60 * len("payload-0") and traffic[0]["errors"] == 0
    assert traffic[0]["requests"] >= 60  # one produce request per message (linger 0, one at a time), and fetches

    before = query_cli(store_path, "tenants")
    run_job(spark, server.url, store, tmp_path / "checkpoint")  # restarted from its checkpoint
    cli = [sys.executable, "-m", "talos.cli", "metering", "run", "--once", "--url", server.url]
    cli += ["--store", str(store_path), "--checkpoint", str(tmp_path / "lost-checkpoint")]
    subprocess.run(cli, capture_output=True, text=True, timeout=300, check=True)  # checkpoint lost: the store knows
    after = query_cli(store_path, "tenants")
    mine_before = next(r for r in before if r["tenant"] == "default")
    mine_after = next(r for r in after if r["tenant"] == "default")
    assert mine_after["messages_in"] == mine_before["messages_in"]  # (only later windows may add)
    assert {r["partition"]: r["messages_in"] for r in query_cli(store_path, "traffic", "--topic", topic_name)} == {
        0: 60,
        1: 60,
    }
    top = query_cli(store_path, "top", "--limit", "1")
    assert top[0]["topic"] == topic_name and top[0]["partition"] == 0  # in and out: the busiest
