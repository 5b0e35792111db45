"""Storage down for every server at once (docs/cluster.md, "Storage failure"): nobody steps down.

A server whose storage fails steps down only on evidence that another server can write; when HDFS itself
stops, no server has any, so the ring keeps its members (moving partitions would gain nothing, and an empty
ring would serve nothing), and writes resume soon after HDFS comes back. (One owner cut from HDFS alone, which
must step down, is the network-fault campaign's "owner cut from HDFS", tests/netfaults.)
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.devservices import HdfsCluster, ZooKeeperServer, wait_until
from tests.cluster.conftest import FAST, Cluster, get_json, post_json, start_cluster
from tests.cluster.test_cluster import Load, check_no_loss

pytestmark = [pytest.mark.hdfs, pytest.mark.zookeeper, pytest.mark.serial]  # resumes within 10 s

STOPPED_S = 30.0
PARTITIONS = 6


@pytest.fixture
def own_hdfs(tmp_path: Path) -> Iterator[HdfsCluster]:
    """An HDFS of this test's own: it is stopped on purpose, and the session's must not be."""
    hdfs = HdfsCluster(tmp_path / "hdfs")
    try:
        hdfs.start()
        yield hdfs
    finally:
        hdfs.stop()


class RingWatch:
    """Every server's ring, read about twice a second until stopped: the members each one ever went without."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.missing: dict[str, set[str]] = {name: set() for name in cluster.servers}
        self.unanswered: dict[str, int] = dict.fromkeys(cluster.servers, 0)
        self.reads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        everybody = set(self.cluster.servers)
        while not self._stop.wait(0.5):
            for name, server in self.cluster.servers.items():
                try:
                    ring = get_json(f"{server.url}/v1/cluster", timeout=2)["ring"]
                except OSError:
                    self.unanswered[name] += 1
                    continue
                assert isinstance(ring, dict)
                self.missing[name] |= everybody - set(ring["members"])
            self.reads += 1

    def __enter__(self) -> RingWatch:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def test_hdfs_stopped_for_every_server_moves_nothing_and_writes_resume_soon_after(
    zookeeper: ZooKeeperServer, own_hdfs: HdfsCluster, tmp_path: Path
) -> None:
    cluster = start_cluster(zookeeper, own_hdfs, tmp_path / "logs", FAST)
    try:
        s1 = cluster.servers["s1"]
        status, answer = post_json(f"{s1.url}/v1/topics", {"name": "stopped", "partitions": PARTITIONS})
        assert status == 201, answer
        load = Load(s1.url, "stopped")
        load.start(("w1", PARTITIONS), ("w2", PARTITIONS))
        load.wait_flowing()
        hdfs_processes = [own_hdfs.namenode, own_hdfs.datanode]
        with RingWatch(cluster) as watch:
            time.sleep(1)
            for process in hdfs_processes:
                assert process is not None
                process.signal(signal.SIGSTOP)
            try:
                stopped_at = time.monotonic()
                time.sleep(STOPPED_S)
                acked_while_stopped = sum(1 for *_, when in load.acked.values() if when > stopped_at + 2)
            finally:
                for process in hdfs_processes:
                    assert process is not None
                    process.signal(signal.SIGCONT)
            resumed_at = time.monotonic()

            def every_partition_written_since() -> bool:
                with load.lock:
                    return {p for p, _o, when in load.acked.values() if when > resumed_at} == set(range(PARTITIONS))

            wait_until(every_partition_written_since, timeout=60, what="a write to every partition after HDFS resumed")
            time.sleep(1)
        load.finish()
        first_after = {
            partition: min(when for p, _o, when in load.acked.values() if p == partition and when > resumed_at)
            - resumed_at
            for partition in range(PARTITIONS)
        }
        print(f"first write after HDFS resumed, per partition (s): {first_after}")
        print(f"ring reads {watch.reads}, unanswered {watch.unanswered}, missing {watch.missing}")
        assert acked_while_stopped == 0, "HDFS was stopped: nothing could have been made durable"
        assert watch.reads > STOPPED_S, "the ring was not watched through the stop"
        assert all(not missing for missing in watch.missing.values()), f"a server left a ring: {watch.missing}"
        assert max(first_after.values()) <= 10.0, first_after
        for server in cluster.servers.values():
            described = get_json(f"{server.url}/v1/cluster")
            assert described["stepped_down"] is False
        assert not load.failed, load.failed[:5]
        check_no_loss(s1.url, load)
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()
