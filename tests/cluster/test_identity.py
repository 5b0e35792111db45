"""Replaceable servers: a Kubernetes Deployment names each new pod afresh, so a replacement would join the
ring as a new member and partitions would move twice (to it, then away from the pod it replaced). With
``adopt_vacant_id`` it registers as the ring member whose server is gone instead: the ring, and every
partition's owner id, stay as they were (docs/operations.md, rolling upgrade)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.devservices import HdfsCluster, ZooKeeperServer
from tests.cluster.conftest import FAST, Cluster, get_json, start_cluster
from tests.cluster.test_cluster import assert_round_robin

# Long enough that a replacement starting under CI load comes inside it.
SETTINGS = dataclasses.replace(FAST, reassign_delay_s=15.0)


def adopting(wait_s: float) -> dict[str, str]:
    return {**SETTINGS.env, "TALOS_ADOPT_VACANT_ID": "true", "TALOS_ADOPT_WAIT_S": str(wait_s)}


@pytest.fixture
def pair(zookeeper: ZooKeeperServer, hdfs: HdfsCluster, tmp_path: Path) -> Iterator[Cluster]:
    running = start_cluster(zookeeper, hdfs, tmp_path / "logs", SETTINGS, count=2)
    try:
        yield running
    finally:
        running.stop()


def test_a_replacement_adopts_the_vacant_member_and_moves_nothing(pair: Cluster) -> None:
    s1, s2 = pair.servers["s1"], pair.servers["s2"]
    pair.seed("pods", prefix="m")
    version, members = pair.ring()
    routes = pair.routes("pods")
    assert "s2" in routes.values()

    s2.stop()  # graceful, as Kubernetes stops a pod: flush, seal, deregister; the ring keeps s2 for now
    deregistered_by = time.monotonic()  # the delay counts from the deregistration, which came before this
    replacement = pair.add("pod-7f3a9", env=adopting(wait_s=20))  # returns once registered
    described = get_json(f"{replacement.url}/v1/cluster")
    assert described["server_id"] == "s2", described
    # Past the delay: a removal of s2 (or a join of the replacement) would have happened by now.
    time.sleep(max(0.0, deregistered_by + SETTINGS.reassign_delay_s + 1 - time.monotonic()))
    assert pair.ring() == (version, members), "a replacement must not change the ring"
    assert pair.routes("pods") == routes
    table = get_json(f"{s1.url}/v1/routes?topic=pods")["topics"]
    assert isinstance(table, dict)
    assert {e["url"] for e in table["pods"] if e["owner"] == "s2"} == {replacement.url}

    pair.write("pods", prefix="m", numbers=range(60, 120))
    assert_round_robin(s1.url, "pods", prefix="m", count=120)


def test_with_no_vacancy_a_new_server_joins_under_its_own_id(pair: Cluster) -> None:
    started = time.monotonic()
    newcomer = pair.add("pod-c41d2", env=adopting(wait_s=2))
    assert time.monotonic() - started >= 2, "it waits adopt_wait_s for a vacancy first"
    assert get_json(f"{newcomer.url}/v1/cluster")["server_id"] == "pod-c41d2"
    pair.wait_members({"s1", "s2", "pod-c41d2"})
