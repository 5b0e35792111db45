"""Auth across a real three-server cluster (ZooKeeper, HDFS): auth is on by default; a token made on one
server works on every other at once; forwarding keeps the caller's identity, so ACLs and quotas hold at
the partition's owner; a revoked token stops working everywhere within seconds."""

from __future__ import annotations

import httpx
import pytest

from server.devservices import wait_until
from talos import Admin, AuthenticationError, Producer
from tests.cluster.conftest import CLUSTER_TOKEN, Cluster

pytestmark = [pytest.mark.hdfs, pytest.mark.zookeeper]


def test_tokens_acls_and_quotas_hold_across_servers(cluster: Cluster) -> None:
    s1, s2, s3 = (cluster.servers[name] for name in ("s1", "s2", "s3"))
    assert httpx.get(f"{s2.url}/v1/topics").status_code == 401  # on by default in cluster mode
    with Admin(s1.url, token=CLUSTER_TOKEN) as admin:
        admin.create_tenant("acme")
        admin.create_tenant("globex")
        acme = admin.create_token("acme")["token"]
        globex = admin.create_token("globex")["token"]
    with Admin(s2.url, token=acme) as tenant:  # made on s1 a moment ago, used on s2 now
        assert tenant.whoami()["tenant"] == "acme"
        tenant.create_topic("orders", partitions=6)
    routes = cluster.routes("orders")
    remote = next(p for p, owner in routes.items() if owner == "s3")

    # Through s1, forwarded to s3: the owner sees acme (allowed) and globex (refused).
    body = {"messages": [{"value": "hello", "partition": remote}]}
    as_acme = httpx.post(f"{s1.url}/v1/topics/orders/messages", json=body, headers={"authorization": f"Bearer {acme}"})
    assert as_acme.status_code == 200, as_acme.text
    as_globex = httpx.post(
        f"{s1.url}/v1/topics/orders/messages", json=body, headers={"authorization": f"Bearer {globex}"}
    )
    assert as_globex.status_code == 404  # not globex's to see: as if it did not exist

    # A quota set through one server is enforced at the owner, for traffic arriving through another.
    with Admin(s3.url, token=CLUSTER_TOKEN) as admin:
        admin.set_quota(topic="orders", requests_per_s=5)

    def quota_known_everywhere() -> bool:  # each server re-reads the settings within security_refresh_s (2 s)
        for server in (s1, s2, s3):
            with Admin(server.url, token=CLUSTER_TOKEN) as admin:
                if admin.quotas("acme")["topics"]["orders"]["requests_per_s"] != 5:
                    return False
        return True

    wait_until(quota_known_everywhere, timeout=10, what="the quota known to all three servers")
    statuses = []
    with httpx.Client(headers={"authorization": f"Bearer {acme}"}) as client:
        for _ in range(40):
            statuses.append(client.post(f"{s2.url}/v1/topics/orders/messages", json=body).status_code)
    assert 200 in statuses and 429 in statuses
    assert statuses.count(200) <= 5 * 2 + 2  # s3 admits its share of 5/s (its part of the partitions), burst included

    # The SDK producer, routed straight to owners, is identified on every server.
    with Producer(s1.url, token=acme) as producer:
        for partition in range(6):
            producer.send("orders", b"sdk", partition=partition).result(60)

    with Admin(s2.url, token=CLUSTER_TOKEN) as admin:
        token_id = next(t["id"] for t in admin.list_tokens("acme"))
        admin.revoke_token("acme", token_id)

    def refused_everywhere() -> bool:
        for server in (s1, s2, s3):
            with Admin(server.url, token=acme) as revoked:
                try:
                    revoked.list_topics()
                    return False
                except AuthenticationError:
                    pass
        return True

    wait_until(refused_everywhere, timeout=10, what="the revoked token refused by all three servers")
