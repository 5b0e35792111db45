"""The HDFS sink against a real HDFS (WebHDFS) and a real Talos server: kill -9 at random points, then
every record of the topic is in exactly one file, once."""

from __future__ import annotations

import io
import itertools
import posixpath
import time
from typing import Any

import orjson
import pytest
from hdfs import InsecureClient

from connectors.hdfs.files import parse_file_name
from connectors.hdfs.sink import TMP_DIR
from server.devservices import HdfsCluster, wait_until
from talos import Admin, Consumer, Producer
from tests.connectors.conftest import Feeder, crash_loop, one_connector

pytestmark = [pytest.mark.hdfs]

PARTITIONS = 3


def produce(url: str, topic: str, numbers: range) -> None:
    with Producer(url) as producer:
        for n in numbers:
            producer.send(topic, value=orjson.dumps({"n": n}), key=f"k{n}", headers={"n": str(n)})


def topic_contents(url: str, topic: str) -> dict[tuple[int, int], bytes | None]:
    with Admin(url) as admin:
        ends = {p: admin.offsets(topic, p)["latest"] for p in range(PARTITIONS)}
    out: dict[tuple[int, int], bytes | None] = {}
    with Consumer(url, topics=[topic]) as consumer:
        while len(out) < sum(ends.values()):
            for m in consumer.poll(timeout=1.0):
                out[(m.partition, m.offset)] = m.value
    return out


def file_records(client: InsecureClient, root: str, topic: str) -> list[tuple[str, list[dict[str, Any]]]]:
    """(file name, records) of every file the sink made visible, read back through WebHDFS."""
    import pyarrow.parquet as pq

    found = []
    for partition in range(PARTITIONS):
        directory = posixpath.join(root, topic, str(partition))
        for name in client.list(directory) if client.status(directory, strict=False) else []:
            with client.read(posixpath.join(directory, name)) as reader:
                data = reader.read()
            if name.endswith(".jsonl"):
                rows = [orjson.loads(line) for line in data.splitlines()]
            else:
                rows = pq.read_table(io.BytesIO(data)).to_pylist()
                for row in rows:
                    row["value"] = row["value"].decode()
            found.append((name, rows))
    return found


def visible_records(client: InsecureClient, root: str, topic: str) -> int:
    total = 0
    for partition in range(PARTITIONS):
        directory = posixpath.join(root, topic, str(partition))
        if client.status(directory, strict=False):
            for parsed in map(parse_file_name, client.list(directory)):
                assert parsed is not None
                total += parsed[3] - parsed[2] + 1
    return total


def check_exactly_once(client: InsecureClient, root: str, topic: str, url: str) -> int:
    expected = topic_contents(url, topic)
    seen: dict[tuple[int, int], int] = {}
    for name, rows in file_records(client, root, topic):
        parsed = parse_file_name(name)
        assert parsed is not None, f"unexpected file {name}"
        _, partition, first, last = parsed
        assert [r["offset"] for r in rows] == list(range(first, last + 1)), f"{name} does not hold its range"
        for row in rows:
            assert row["partition"] == partition
            key = (partition, row["offset"])
            seen[key] = seen.get(key, 0) + 1
            assert row["value"].encode() == expected[key], f"{name}: wrong value at {key}"
    duplicated = {k: c for k, c in seen.items() if c > 1}
    missing = set(expected) - set(seen)
    assert not duplicated, f"records written twice: {sorted(duplicated)[:10]}"
    assert not missing, f"records missing: {sorted(missing)[:10]}"
    return len(seen)


def sink_config(name: str, hdfs: HdfsCluster, **settings: Any) -> dict[str, Any]:
    config = {"namenode": hdfs.webhdfs_url, "path": f"/sink/{name}", "session_timeout_s": 2, **settings}
    return one_connector(name, "hdfs-sink", config, tasks=2)


@pytest.mark.slow
def test_kill_9_at_random_points_leaves_every_record_in_exactly_one_file(
    talos_url: str, hdfs: HdfsCluster, connect_runner: Any, name: str
) -> None:
    Admin(talos_url).create_topic(name, partitions=PARTITIONS)
    produce(talos_url, name, range(3000))
    client = InsecureClient(hdfs.webhdfs_url)
    runner = connect_runner(talos_url, sink_config(name, hdfs, roll_bytes=4000, roll_ms=300))
    batches = itertools.count(150)

    def feed() -> None:  # 20 more records every 0.1 s while the runner is killed and restarted
        start = next(batches) * 20
        produce(talos_url, name, range(start, start + 20))

    with Feeder(feed, interval_s=0.1):
        at_kill = crash_loop(runner, kills=6, progress=lambda: visible_records(client, f"/sink/{name}", name), seed=8)
    total = len(topic_contents(talos_url, name))
    assert all(0 < n < total for n in at_kill), f"every kill must land mid-run: {at_kill} of {total}"
    assert at_kill == sorted(at_kill)

    runner.start()
    wait_until(
        lambda: visible_records(client, f"/sink/{name}", name) >= total, timeout=120, what="the sink to catch up"
    )
    assert runner.terminate() == 0
    assert check_exactly_once(client, f"/sink/{name}", name, talos_url) == total
    # What killed runners left half-written stays out of sight, under +tmp.
    for partition in range(PARTITIONS):
        for file in client.list(posixpath.join(f"/sink/{name}", name, str(partition))):
            assert parse_file_name(file) is not None
    assert client.status(posixpath.join(f"/sink/{name}", TMP_DIR), strict=False) is not None


@pytest.mark.slow
def test_parquet_files_roll_by_size_and_hold_the_records(
    talos_url: str, hdfs: HdfsCluster, connect_runner: Any, name: str
) -> None:
    Admin(talos_url).create_topic(name, partitions=PARTITIONS)
    produce(talos_url, name, range(600))
    client = InsecureClient(hdfs.webhdfs_url)
    runner = connect_runner(talos_url, sink_config(name, hdfs, format="parquet", roll_bytes=8000, roll_ms=60_000))
    runner.start()
    # roll_ms is a minute: only size rolls files, so the last partial file of each partition waits.
    wait_until(lambda: visible_records(client, f"/sink/{name}", name) >= 300, timeout=60, what="full files")
    assert runner.terminate() == 0  # a graceful stop writes what it holds ...
    for _ in range(3):  # ... and leaves uncommitted a partition it did not hold just then: the next run writes it
        if visible_records(client, f"/sink/{name}", name) >= 600:
            break
        runner.start()
        time.sleep(4)  # its tasks join and take the partitions (locks of 2 s)
        assert runner.terminate() == 0
    assert check_exactly_once(client, f"/sink/{name}", name, talos_url) == 600
    files = file_records(client, f"/sink/{name}", name)
    assert all(name.endswith(".parquet") for name, _ in files)
    assert len(files) >= 6  # rolled by size (about 100 records per file), then the rest on stop
    row = files[0][1][0]
    assert row["key"] == f"k{orjson.loads(row['value'])['n']}".encode()
    assert row["headers"] == [{"key": "n", "value": str(orjson.loads(row["value"])["n"]).encode()}]
