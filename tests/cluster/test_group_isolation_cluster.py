"""Group ownership across a real two-server cluster (ZooKeeper, HDFS): a request for another tenant's group
that lands on the server that is not the group's coordinator is forwarded and refused there (404, the
member untouched), and two tenants claiming one new group through different servers at once end with
exactly one owner, the same on both servers."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from server.devservices import wait_until
from talos import Admin
from tests.cluster.conftest import CLUSTER_TOKEN, Cluster
from tests.cluster.test_groups_cluster import coordinator_of
from tests.helpers import create_tenants

pytestmark = [pytest.mark.hdfs, pytest.mark.zookeeper]


def client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"authorization": f"Bearer {token}"}, timeout=30)


def join(url: str, token: str, group: str, topic: str) -> httpx.Response:
    with client(url, token) as c:
        return c.post(f"/v1/groups/{group}/members", json={"topics": [topic], "session_timeout_ms": 20_000})


def test_groups_stay_their_owners_across_servers(pair: Cluster) -> None:
    s1, s2 = pair.servers["s1"], pair.servers["s2"]
    with Admin(s1.url, token=CLUSTER_TOKEN) as admin:
        tokens = create_tenants(admin, {"alpha": None, "beta": None})
    alpha, beta = tokens["alpha"], tokens["beta"]
    with Admin(s1.url, token=alpha) as tenant:
        tenant.create_topic("a-orders", partitions=2)
    with Admin(s2.url, token=beta) as tenant:
        tenant.create_topic("b-orders", partitions=2)

    group = next(f"owned-{i}" for i in range(100) if coordinator_of(pair, f"owned-{i}") == "s1")
    joined = join(s1.url, alpha, group, "a-orders")
    assert joined.status_code == 200, joined.text
    member = joined.json()["member_id"]
    # s2 forwards to the coordinator, s1, which refuses. At once: before refusing, a server re-reads the security
    # settings (at most once a second), and requests waiting at once share one re-read.
    with client(s2.url, beta) as other, ThreadPoolExecutor(4) as pool:
        sent = [
            pool.submit(other.post, f"/v1/groups/{group}/members", json={"topics": ["b-orders"]}),
            pool.submit(other.delete, f"/v1/groups/{group}/members/{member}"),
            pool.submit(other.post, f"/v1/groups/{group}/members/{member}/heartbeat", json={"owned": []}),
            pool.submit(other.get, f"/v1/groups/{group}/offsets"),
        ]
        attempts = [future.result() for future in sent]
    for answer in attempts:
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "UNKNOWN_GROUP", answer.text
    with client(s2.url, alpha) as owner:
        assert owner.post(f"/v1/groups/{group}/members/{member}/heartbeat", json={"owned": []}).status_code == 200
        wait_until(lambda: group in owner.get("/v1/groups").json()["groups"], timeout=10, what="the group listed on s2")
    with client(s2.url, beta) as other:
        assert group not in other.get("/v1/groups").json()["groups"]

    # Two tenants claim one new name through different servers at once: one owner, the same everywhere.
    race = next(f"race-{i}" for i in range(100) if coordinator_of(pair, f"race-{i}") == "s2")
    answers: dict[str, list[int]] = {"alpha": [], "beta": []}

    def claim(who: str, url: str, token: str, topic: str) -> None:
        for _ in range(3):
            answers[who].append(join(url, token, race, topic).status_code)

    threads = [
        threading.Thread(target=claim, args=("alpha", s1.url, alpha, "a-orders")),
        threading.Thread(target=claim, args=("beta", s2.url, beta, "b-orders")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    winner = next(who for who, codes in answers.items() if codes == [200, 200, 200])
    loser = "beta" if winner == "alpha" else "alpha"
    assert answers[loser] == [404, 404, 404], answers
    tokens = {"alpha": alpha, "beta": beta}
    for server in (s1, s2):
        with client(server.url, tokens[winner]) as c:
            assert c.get(f"/v1/groups/{race}").status_code == 200
        with client(server.url, tokens[loser]) as c:
            assert c.get(f"/v1/groups/{race}").status_code == 404
