"""Transactions on a real cluster (3 servers, ZooKeeper, HDFS): a transaction spans partitions of other servers
than its coordinator (each partition asks the coordinator before it opens the transaction there), and a
coordinator killed -9 after its commit decision but before every marker is written leaves the decision to the
next one, which finishes it: the transaction becomes visible whole, on every partition, to read-committed
readers."""

from __future__ import annotations

import threading
import time

import pytest

from server.devservices import wait_until
from server.transactions.records import TRANSACTION_STATE_TOPIC, partition_of
from talos import Admin, Consumer, Producer
from tests.cluster.conftest import Cluster, get_json

pytestmark = [pytest.mark.hdfs, pytest.mark.zookeeper, pytest.mark.slow]


def committed_values(url: str, topic: str, partition: int, count: int, timeout: float = 60.0) -> list[bytes | None]:
    """What a read-committed reader of the partition finds once it holds ``count`` messages (or at the timeout)."""
    out: list[bytes | None] = []
    deadline = time.monotonic() + timeout
    with Consumer(url, partitions=[(topic, partition)], isolation="read_committed") as consumer:
        while len(out) < count and time.monotonic() < deadline:
            out += [m.value for m in consumer.poll(0.5)]
    return out


def coordinator_of(cluster: Cluster, transactional_id: str) -> str:
    """The server that coordinates the id: the owner of its __transaction_state partition (the admin's ids are
    nobody's tenant's)."""
    routes = cluster.routes(TRANSACTION_STATE_TOPIC)
    return routes[partition_of(None, transactional_id, len(routes))]


def test_a_coordinator_killed_between_its_decision_and_the_markers_is_finished_by_the_next(cluster: Cluster) -> None:
    url = cluster.any_alive().url
    topic = "txn-failover"
    with Admin(url) as admin:
        admin.create_topic(topic, partitions=12)
    with Producer(url, transactional_id="warmup") as warmup:  # makes the state topic
        warmup.begin_transaction()
        warmup.commit_transaction()
    owners = cluster.routes(topic)
    # An id whose coordinator is neither of two servers that own partitions of the topic
    tid, coordinator = next(
        (tid, coordinator)
        for tid in (f"failover-writer-{i}" for i in range(100))
        if len(set(owners.values()) - {coordinator := coordinator_of(cluster, tid)}) == 2
    )
    others = sorted(set(owners.values()) - {coordinator})
    paused_partition = next(p for p, s in owners.items() if s == others[0])
    open_partition = next(p for p, s in owners.items() if s == others[1])
    writer_url = cluster.servers[others[1]].url
    producer = Producer(writer_url, transactional_id=tid)
    try:
        producer.begin_transaction()
        for i in range(5):
            producer.send(topic, b"a%d" % i, partition=paused_partition)
            producer.send(topic, b"b%d" % i, partition=open_partition)
        producer.flush()
        # The partition's owner stops: the commit marker cannot be written there; the decision is made anyway
        cluster.servers[others[0]].pause()
        outcome: list[BaseException | None] = []

        def commit() -> None:
            try:
                producer.commit_transaction()
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        committed = threading.Thread(target=commit, daemon=True)
        committed.start()
        wait_until(
            lambda: get_json(f"{writer_url}/v1/transactions/{tid}")["state"] == "PrepareCommit",
            timeout=30,
            what="the commit decided",
        )
        cluster.servers[coordinator].kill()  # decided, not every marker written
        cluster.servers[others[0]].resume()
        committed.join(90)
        assert outcome == [None]  # the commit call rode out its coordinator's death (retried at the next one)
    finally:
        cluster.servers[others[0]].resume()
        producer._transaction = None
        producer.close()
    survivor = cluster.servers[others[1]].url
    # The next coordinator reads the decision back and writes the missing marker: all of it, on both
    assert committed_values(survivor, topic, open_partition, 5) == [b"b%d" % i for i in range(5)]
    assert committed_values(survivor, topic, paused_partition, 5, timeout=90) == [b"a%d" % i for i in range(5)]
    wait_until(
        lambda: get_json(f"{survivor}/v1/transactions/{tid}")["state"] == "CompleteCommit",
        timeout=60,
        what="the transaction completed",
    )
    # And the id goes on under its new coordinator
    with Producer(survivor, transactional_id=tid) as again:
        again.begin_transaction()
        again.send(topic, b"after", partition=open_partition)
        again.commit_transaction()
    assert committed_values(survivor, topic, open_partition, 6)[-1] == b"after"
