"""The fault-injection checker as users run it: ``talos verify --faults local`` on a real 3-server cluster.

For 60 s, idempotent producers write while servers are killed (-9) and restarted, paused past their
ZooKeeper session, and ZooKeeper and the HDFS DataNode are restarted. Afterwards every acknowledged
message must be stored exactly once, in order. With idempotence off, duplicates may appear, loss may not.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.devservices import LocalCluster, recorded_cluster, stop_recorded_cluster
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
        kill_recorded_servers(cluster.base_dir)
        stop_recorded_cluster(cluster.base_dir)  # what the checker restarted is in cluster.json, not ours
        cluster.stop()


def kill_recorded_servers(base_dir: Path) -> None:
    """SIGKILL the servers ``cluster.json`` lists (each PID checked against its command line first). After the
    fault campaign a graceful stop can sit out its whole 15 s (a server still starting, or closing pipelines
    broken by the DataNode restart), and nothing here checks the shutdown: the checks were made."""
    state = recorded_cluster(base_dir) or {}
    servers = state.get("servers", [])
    assert isinstance(servers, list)
    for server in servers:
        pid = int(server.get("pid") or 0)
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone already
        if pid and b"--server-id" in argv and str(server["id"]).encode() in argv:
            os.kill(pid, signal.SIGKILL)


def run_verify(cluster: LocalCluster, *flags: str, seconds: int = 60) -> subprocess.CompletedProcess[str]:
    """``talos verify --faults local`` against ``cluster``, as a user runs it."""
    argv = [sys.executable, "-m", "talos.cli", "verify", "--url", cluster.servers[0].url, "--seconds", str(seconds)]
    argv += ["--faults", "local", "--dir", str(cluster.base_dir), *flags]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL, check=False)
    print(run.stderr[-4000:])
    print(run.stdout)
    return run


def verify(cluster: LocalCluster, *flags: str, seconds: int = 60) -> tuple[int, dict[str, int], str]:
    run = run_verify(cluster, *flags, seconds=seconds)
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
    # As long as the idempotent run: loss under faults is what this one checks (issue 22: at least 60 s).
    code, summary, _log = verify(dev_cluster, "--no-idempotent", seconds=60)
    assert summary["acknowledged"] > 1000
    assert summary["lost"] == 0
    assert summary["out of order"] == 0
    assert code == 0  # duplicates are allowed here (and counted in the summary)
    print(f"duplicates without idempotence: {summary['duplicated']}")


def test_transactions_stay_all_or_nothing_through_kill_9_and_sigstop(dev_cluster: LocalCluster) -> None:
    """``talos verify --transactions`` while servers (coordinators and partition owners alike) are killed -9 and
    restarted, paused past their session, and ZooKeeper and the DataNode restart: some kills land between a
    commit decision and its markers. 0 of every transaction anomaly."""
    run = run_verify(dev_cluster, "--transactions", "--json")
    for fault in ("kill -9", "SIGSTOP"):
        assert f"fault: {fault}" in run.stderr, f"the run did not inject {fault}"
    report = json.loads(run.stdout.strip().splitlines()[-1])
    txn = report["transactions"]
    print({k: txn[k] for k in ("committed", "aborted", "indefinite", "coordinators") if k in txn})
    assert txn["committed"] > 0 and txn["aborted"] > 0
    for name in ("aborted_reads", "lost", "torn", "duplicates", "offset_conflicts", "past_lso", "unknown"):
        assert txn[name] == 0, f"{name}: {txn['examples']}"
    assert txn["unsettled"] == 0 and txn["ok"]
    assert report["lost"] == 0 and run.returncode == 0
