"""Producer ids in a real two-server cluster (ZooKeeper, HDFS; issue 20, point 3): ids kept in ZooKeeper
belong to the tenant that got them; a produce with another tenant's id that arrives at the server which
does not own the partition is forwarded with the caller's identity and refused at the owner, and the
owner's next write is stored; another tenant cannot bump the id's epoch through any server."""

from __future__ import annotations

import threading
import time

import httpx
import orjson
import pytest
from kazoo.client import KazooClient

from server.coordination.paths import PRODUCER_NAMES
from server.coordination.producer_ids import ZkProducerIds
from server.devservices import wait_until
from server.partition.producer_ids import name_key
from talos import (
    Admin,
    ConflictError,
    Producer,
    ProducerFencedError,
    ProducerIdentity,
    RecordData,
    encode_batch,
)
from tests.cluster.conftest import CLUSTER_TOKEN, Cluster
from tests.helpers import create_tenants, partition_values

pytestmark = [pytest.mark.hdfs, pytest.mark.zookeeper]


def test_another_tenants_producer_id_is_refused_at_the_owner_after_forwarding(pair: Cluster) -> None:
    s1, s2 = pair.servers["s1"], pair.servers["s2"]
    with Admin(s1.url, token=CLUSTER_TOKEN) as admin:
        tokens = create_tenants(admin, {"alpha": None, "beta": None})
    alpha_token, beta_token = tokens["alpha"], tokens["beta"]
    alpha = {"authorization": f"Bearer {alpha_token}"}
    beta = {"authorization": f"Bearer {beta_token}"}
    with Admin(s1.url, token=beta_token) as owner:
        owner.create_topic("shared", partitions=6)
        owner.grant("shared", "alpha", ["produce", "consume"])
    # The grant reaches s2 with its next read of the security document: until then alpha's forwarded request
    # would find the topic hidden (404), not refuse the forged id (403).
    wait_until(
        lambda: httpx.get(f"{s2.url}/v1/topics/shared", headers=alpha, timeout=10).status_code == 200,
        timeout=30,
        what="the grant on s2",
    )
    remote = next(p for p, server in pair.routes("shared").items() if server == "s2")
    path = f"/v1/topics/shared/partitions/{remote}/messages"

    made = httpx.post(f"{s2.url}/v1/producers", json={}, headers=beta, timeout=30)
    assert made.status_code == 200, made.text
    victim = int(made.json()["producer_id"])

    forged = {"producer_id": victim, "producer_epoch": 0, "sequence": 100, "messages": [{"value": "forged"}]}
    refused = httpx.post(f"{s1.url}{path}", json=forged, headers=alpha, timeout=30)  # s1 forwards to s2
    assert refused.status_code == 403, refused.text
    batch = encode_batch([RecordData(b"forged")], producer_id=victim, producer_epoch=0, base_sequence=100)
    raw = httpx.post(
        f"{s1.url}{path}", content=batch, headers={**alpha, "content-type": "application/vnd.talos.batch"}, timeout=30
    )
    assert raw.status_code == 403, raw.text
    bumped = httpx.post(f"{s1.url}/v1/producers", json={"producer_id": victim}, headers=alpha, timeout=30)
    assert bumped.status_code == 404, bumped.text

    real = {"producer_id": victim, "producer_epoch": 0, "sequence": 0, "messages": [{"value": "real"}]}
    stored = httpx.post(f"{s1.url}{path}", json=real, headers=beta, timeout=30)
    assert stored.status_code == 200, stored.text
    result = stored.json()["results"][0]
    assert result["offset"] >= 0 and not result.get("duplicate")


PARTITIONS = 8


@pytest.mark.slow
def test_a_fence_through_any_server_refuses_the_zombie_on_every_partition_also_after_a_restart(
    pair: Cluster,
) -> None:
    """Issue 22, part 1 on a cluster: the claim is a ZooKeeper transaction, the fence is forwarded to each
    partition's owner, and a partition that reloads asks ZooKeeper for the producer's newest epoch."""
    s1, s2 = pair.servers["s1"], pair.servers["s2"]
    topic = "fenced-cluster"
    with Admin(s1.url) as admin:
        admin.create_topic(topic, partitions=PARTITIONS)
        old = admin.claim_producer("connect/cluster/0")
    assert set(pair.routes(topic).values()) == {"s1", "s2"}, "the test needs partitions on both servers"

    def zombie() -> Producer:
        return Producer(s2.url, producer_id=old.producer_id, producer_epoch=old.producer_epoch)

    with zombie() as producer:
        for partition in range(PARTITIONS):
            producer.send(topic, f"before-{partition}".encode(), partition=partition).result(30)
    with Admin(s2.url) as admin:
        new = admin.claim_producer("connect/cluster/0")
    assert (new.producer_id, new.producer_epoch) == (old.producer_id, old.producer_epoch + 1)
    with Admin(s1.url) as admin:
        admin.fence_topic(topic, new)  # s1 forwards the fences of s2's partitions
    with zombie() as producer:
        for partition in range(PARTITIONS):
            with pytest.raises(ProducerFencedError):
                producer.send(topic, b"late", partition=partition).result(30)

    s2.kill()  # its partitions load again, on s1 or on s2 after its restart: the fences are not in memory now
    s2.start()
    pair.wait_members({"s1", "s2"})
    for partition in range(PARTITIONS):
        with zombie() as producer, pytest.raises(ProducerFencedError):
            producer.send(topic, b"after restart", partition=partition).result(60)
    for partition in range(PARTITIONS):
        assert partition_values(s1.url, topic, partition) == [f"before-{partition}".encode()]


@pytest.mark.slow
def test_concurrent_claims_of_one_name_through_two_servers_have_one_winner(pair: Cluster) -> None:
    s1, s2 = pair.servers["s1"], pair.servers["s2"]
    for round_ in range(5):
        name = f"race/{round_}"
        outcomes: list[str] = []

        def claim(url: str, name: str = name, outcomes: list[str] = outcomes) -> None:
            with Admin(url) as admin:
                try:
                    admin.claim_producer(name, lease_s=30)
                    outcomes.append("won")
                except ConflictError as exc:
                    outcomes.append(exc.code)

        threads = [threading.Thread(target=claim, args=(url,)) for url in (s1.url, s2.url)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert sorted(outcomes) == ["PRODUCER_BUSY", "won"], outcomes


def test_a_named_producer_kept_in_zookeeper_before_is_taken_over_with_its_id_and_lease(pair: Cluster) -> None:
    """Named producers claimed before they were transactional ids live in ZooKeeper (``/talos/producer_names``):
    the coordinator continues from there, so the next instance fences the old one's producer id, and a lease
    still running there is honoured."""
    zk = KazooClient(hosts=pair.zk)
    zk.start(timeout=30)
    try:
        ids = ZkProducerIds(zk)
        claimed: dict[str, tuple[int, int]] = {}
        for name, until_ms in (("legacy/lapsed", 0), ("legacy/held", int(time.time() * 1000) + 60_000)):
            producer_id, _ = ids.allocate(None, None)
            epoch = ids.allocate(producer_id, None)[1]  # claimed twice before the upgrade
            record = {"tenant": None, "name": name, "producer_id": producer_id, "epoch": epoch, "until_ms": until_ms}
            zk.create(f"{PRODUCER_NAMES}/{name_key(None, name)}", orjson.dumps(record), makepath=True)
            claimed[name] = (producer_id, epoch)
        with Admin(pair.servers["s2"].url) as admin:
            taken = admin.claim_producer("legacy/lapsed", lease_s=30)
            assert (taken.producer_id, taken.producer_epoch) == (claimed["legacy/lapsed"][0], 2)
            assert ids.newer_epoch(taken.producer_id, 1) == 2  # raised: partitions that load fence epoch 1
            with pytest.raises(ConflictError) as busy:
                admin.claim_producer("legacy/held", lease_s=30)
            assert busy.value.code == "PRODUCER_BUSY"
            # Its holder (an instance running through the upgrade) renews through the coordinator; an older one
            # is fenced
            holder = ProducerIdentity(*claimed["legacy/held"])
            assert admin.renew_producer("legacy/held", holder, lease_s=30) == holder
            with pytest.raises(ProducerFencedError):
                admin.renew_producer("legacy/held", ProducerIdentity(holder.producer_id, 0), lease_s=30)
            assert admin.describe_transaction("legacy/held")["producer_id"] == holder.producer_id
    finally:
        zk.stop()
        zk.close()
