"""`talos standalone --storage hdfs://…`: one node on the real HDFS, through a restart."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from server.devservices import HdfsCluster, StandaloneServer
from talos import Admin, Consumer, Producer


@pytest.mark.slow
@pytest.mark.hdfs
def test_standalone_on_hdfs_keeps_everything_across_restarts(hdfs: HdfsCluster, tmp_path: Path) -> None:
    server = StandaloneServer(tmp_path / "local", args=("--storage", f"{hdfs.url}/standalone-e2e"))
    try:
        server.start()
        Admin(server.url).create_topic("events", partitions=2)
        with Producer(server.url) as producer:
            stored = [producer.send("events", f"e{i}".encode(), key=f"{i % 3}") for i in range(300)]
            producer.flush()
        expected = {(f.result().partition, f.result().offset): f"e{i}".encode() for i, f in enumerate(stored)}
        server.stop()  # graceful: seals the open segments on HDFS
        server.start()
        with Producer(server.url) as producer:
            late = producer.send("events", b"after restart", partition=0)
        expected[(0, late.result().offset)] = b"after restart"
        server.kill()  # a crash: the next start must recover the HDFS leases
        server.start()
        with Consumer(server.url, topics=["events"]) as consumer:
            got = {}
            deadline = time.monotonic() + 60
            while not expected.keys() <= got.keys() and time.monotonic() < deadline:
                got.update({(m.partition, m.offset): m.value for m in consumer.poll(1.0)})
            # Anything stored beyond what was acknowledged would come at once (the fetches are at its offsets).
            got.update({(m.partition, m.offset): m.value for m in consumer.poll(1.0)})
        assert got == expected
    finally:
        server.stop()
