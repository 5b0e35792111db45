"""The fault-injection checker as users run it: ``talos verify --faults local`` on a real 3-server cluster.

For 60 s, idempotent producers write while servers are killed (-9) and restarted, paused past their
ZooKeeper session, and ZooKeeper and the HDFS DataNode are restarted. Afterwards every acknowledged
message must be stored exactly once, in order. With idempotence off, duplicates may appear, loss may not.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from talos.devservices import LocalCluster, stop_recorded_cluster
from tests.cluster.conftest import FAST

pytestmark = [pytest.mark.hdfs, pytest.mark.zookeeper, pytest.mark.slow]


@pytest.fixture(scope="module")
def dev_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    base = tmp_path_factory.mktemp("verify-cluster")
    cluster = LocalCluster(base, servers=3, settings=FAST)
    try:
        cluster.start()
        yield cluster
    finally:
        stop_recorded_cluster(cluster.base_dir)  # what the checker restarted is in cluster.json, not ours
        cluster.stop()


def verify(cluster: LocalCluster, *flags: str, seconds: int = 60) -> tuple[int, dict[str, int], str]:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "talos.cli",
            "verify",
            "--url",
            cluster.servers[0].url,
            "--seconds",
            str(seconds),
            "--faults",
            "local",
            "--dir",
            str(cluster.base_dir),
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    print(run.stderr[-4000:])
    print(run.stdout)
    numbers = {
        name.strip(): int(value) for name, value in re.findall(r"^([a-z -]+?)\s+(\d+)$", run.stdout, re.MULTILINE)
    }
    return run.returncode, numbers, run.stderr


def test_idempotent_producers_store_every_acknowledged_message_exactly_once(dev_cluster: LocalCluster) -> None:
    code, summary, log = verify(dev_cluster)
    for fault in ("kill -9", "SIGSTOP", "restart zookeeper", "restart datanode"):
        assert f"fault: {fault}" in log, f"the run did not inject {fault}"
    assert summary["acknowledged"] > 1000
    assert summary["lost"] == 0
    assert summary["duplicated"] == 0
    assert summary["out of order"] == 0
    assert code == 0


def test_without_idempotence_nothing_acknowledged_is_lost(dev_cluster: LocalCluster) -> None:
    # Shorter than the idempotent run (which must fit every kind of fault): loss is what this one checks.
    code, summary, _log = verify(dev_cluster, "--no-idempotent", seconds=40)
    assert summary["acknowledged"] > 1000
    assert summary["lost"] == 0
    assert summary["out of order"] == 0
    assert code == 0  # duplicates are allowed here (and counted in the summary)
    print(f"duplicates without idempotence: {summary['duplicated']}")
