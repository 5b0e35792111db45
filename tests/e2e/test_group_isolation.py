"""Consumer groups belong to tenants, against a real ``talos standalone --auth on`` with three tenants:
another tenant's group answers 404 on every group endpoint (as a group that does not exist), its retry and
dead-letter topics are closed to others, a group grant shares it, a join that would make retry/DLQ
partitions counts against the partition quota, and a malformed retry record is a dead letter, not a crash.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from talos import Consumer, PermissionDeniedError
from tests.helpers import SecuredStandalone, secured_standalone

Tenants = SecuredStandalone  # alpha, beta, gamma (and "admin")


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenants]:
    data = tmp_path_factory.mktemp("groups-secured") / "data"
    quotas = {"alpha": None, "beta": None, "gamma": {"partitions": 1}}
    with secured_standalone(data, quotas) as found:
        for owner, topic in (("alpha", "a-orders"), ("beta", "b-orders"), ("gamma", "g-orders")):
            with found.admin(owner) as tenant:
                tenant.create_topic(topic, partitions=1)
        with found.client("alpha") as client:
            wrote = client.post("/v1/topics/a-orders/messages", json={"messages": [{"value": "one"}]})
            assert wrote.status_code == 200, wrote.text
        yield found


def code(answer: httpx.Response) -> str:
    return str(answer.json()["error"]["code"])


def join(client: httpx.Client, group: str, topic: str) -> httpx.Response:
    return client.post(f"/v1/groups/{group}/members", json={"topics": [topic], "session_timeout_ms": 10_000})


def at_once(*requests: Callable[[], httpx.Response]) -> list[httpx.Response]:
    """The requests, sent concurrently: before refusing another tenant's group a server re-reads the security
    settings (at most once a second), and requests waiting at once share one re-read."""
    with ThreadPoolExecutor(len(requests)) as pool:
        return list(pool.map(lambda request: request(), requests))


def owned_group(tenants: Tenants, group: str, *, leave: bool = False) -> str:
    """Alpha's group with one live member (joined, committed once; gone again with ``leave``); its id."""
    with tenants.client("alpha") as client:
        joined = join(client, group, "a-orders")
        assert joined.status_code == 200, joined.text
        member = str(joined.json()["member_id"])
        generation = joined.json()["assignment"][0]["generation"] if joined.json()["assignment"] else None
        committed = client.post(
            f"/v1/groups/{group}/offsets",
            json={
                "member_id": member,
                "offsets": [{"topic": "a-orders", "partition": 0, "offset": 1, "generation": generation}],
            },
        )
        assert committed.status_code == 200, committed.text
        if leave:
            assert client.delete(f"/v1/groups/{group}/members/{member}").status_code == 204
    return member


@pytest.mark.slow
def test_only_the_owner_lists_a_group(tenants: Tenants) -> None:
    owned_group(tenants, "listed")
    listings = {}
    for who in ("alpha", "beta", "admin"):
        with tenants.client(who) as client:
            listings[who] = client.get("/v1/groups").json()["groups"]
    assert "listed" in listings["alpha"]
    assert "listed" not in listings["beta"]
    assert "listed" in listings["admin"]


def test_another_tenants_group_is_404_on_describe_and_offsets(tenants: Tenants) -> None:
    owned_group(tenants, "private")
    with tenants.client("beta") as client:
        described, offsets, missing = at_once(
            lambda: client.get("/v1/groups/private"),
            lambda: client.get("/v1/groups/private/offsets"),
            lambda: client.get("/v1/groups/no-such-group"),
        )
    for answer in (described, offsets):
        assert answer.status_code == 404, answer.text
        assert code(answer) == "UNKNOWN_GROUP"
    assert described.json()["error"]["message"] == missing.json()["error"]["message"].replace(
        "no-such-group", "private"
    )
    with tenants.client("alpha") as client:
        assert client.get("/v1/groups/private/offsets").json()["offsets"][0]["offset"] == 1


def test_another_tenant_cannot_join(tenants: Tenants) -> None:
    owned_group(tenants, "closed")
    with tenants.client("beta") as client:
        answer = join(client, "closed", "b-orders")
    assert answer.status_code == 404 and code(answer) == "UNKNOWN_GROUP", answer.text
    with tenants.client("alpha") as client:
        assert len(client.get("/v1/groups/closed").json()["members"]) == 1


@pytest.mark.slow
def test_another_tenant_cannot_heartbeat_or_kick_a_member(tenants: Tenants) -> None:
    member = owned_group(tenants, "kickable")
    with tenants.client("beta") as client:
        beat, kick = at_once(
            lambda: client.post(f"/v1/groups/kickable/members/{member}/heartbeat", json={"owned": []}),
            lambda: client.delete(f"/v1/groups/kickable/members/{member}"),
        )
    for answer in (beat, kick):
        assert answer.status_code == 404 and code(answer) == "UNKNOWN_GROUP", answer.text
    with tenants.client("alpha") as client:
        assert client.post(f"/v1/groups/kickable/members/{member}/heartbeat", json={"owned": []}).status_code == 200


def test_another_tenant_cannot_commit_or_reset(tenants: Tenants) -> None:
    owned_group(tenants, "committed", leave=True)
    with tenants.client("beta") as client:
        commit, reset = at_once(
            lambda: client.post(
                "/v1/groups/committed/offsets", json={"offsets": [{"topic": "b-orders", "partition": 0, "offset": 0}]}
            ),
            lambda: client.post("/v1/groups/committed/offsets/reset", json={"topic": "b-orders", "to": "earliest"}),
        )
    for answer in (commit, reset):
        assert answer.status_code == 404 and code(answer) == "UNKNOWN_GROUP", answer.text
    with tenants.client("alpha") as client:
        rows = client.get("/v1/groups/committed/offsets").json()["offsets"]
    assert rows == [{"topic": "a-orders", "partition": 0, "offset": 1}]


def test_retry_and_dead_letter_topics_are_closed_to_other_tenants(tenants: Tenants) -> None:
    owned_group(tenants, "retried")
    with tenants.client("alpha") as client:
        forged = {"value": "mine", "headers": {"talos-not-before": "0"}}
        assert client.post("/v1/topics/__retry.retried/messages", json={"messages": [forged]}).status_code == 200
        assert client.get("/v1/topics/__dlq.retried/partitions/0/offsets").status_code == 200
    with tenants.client("beta") as client:
        attempts = [
            client.get("/v1/topics/__retry.retried/partitions/0/messages", params={"offset": 0}),
            client.get("/v1/topics/__dlq.retried/partitions/0/messages", params={"offset": 0}),
            client.post("/v1/topics/__retry.retried/messages", json={"messages": [{"value": "forged"}]}),
            client.post("/v1/topics/__dlq.retried/partitions/0/messages", json={"messages": [{"value": "x"}]}),
            client.get("/v1/topics/__retry.retried/partitions/0/offsets"),
            client.get("/v1/topics/__retry.retried"),
        ]
        listed = [t["name"] for t in client.get("/v1/topics").json()["topics"]]
    for answer in attempts:
        assert answer.status_code == 404, answer.text
    assert "__retry.retried" not in listed
    with tenants.client("alpha") as client:
        assert client.get("/v1/topics/__retry.retried/partitions/0/offsets").json()["latest"] == 1  # nothing forged


def test_the_retry_topics_belong_to_the_groups_tenant(tenants: Tenants) -> None:
    with tenants.admin("admin") as admin:
        before = admin.quotas("alpha")["partitions_used"]
    owned_group(tenants, "billed")
    with tenants.admin("admin") as admin:
        assert admin.quotas("alpha")["partitions_used"] == before + 2
    with tenants.client("admin") as client:
        assert client.get("/v1/topics/__retry.billed").json()["tenant"] == "alpha"


def test_a_malformed_retry_record_is_a_dead_letter_not_a_crash(tenants: Tenants) -> None:
    owned_group(tenants, "fragile", leave=True)
    bad = {"value": "poison", "headers": {"talos-not-before": "not-a-number", "talos-attempt": "1"}}
    with Consumer(tenants.server.url, group="fragile", topics=["a-orders"], token=tenants.tokens["alpha"]) as consumer:
        with tenants.client("alpha") as client:
            wrote = client.post("/v1/topics/__retry.fragile/messages", json={"messages": [bad]})
            assert wrote.status_code == 200, wrote.text
        seen = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            seen += consumer.poll(0.5)  # raised ValueError before
            with tenants.client("alpha") as client:
                dead = client.get("/v1/topics/__dlq.fragile/partitions/0/messages", params={"offset": 0}).json()
            if dead["messages"]:
                break
        consumer.commit()
    assert [m.value for m in seen if m.topic.startswith("__retry.")] == []
    assert [m["value"] for m in dead["messages"]] == ["poison"]
    assert "talos-not-before" in dead["messages"][0]["headers"]["talos-reason"]
    with tenants.client("alpha") as client:
        rows = client.get("/v1/groups/fragile/offsets").json()["offsets"]
    assert {"topic": "__retry.fragile", "partition": 0, "offset": 1} in rows  # committed past it


def test_a_join_over_the_partition_quota_is_429_and_creates_nothing(tenants: Tenants) -> None:
    with tenants.client("gamma") as client:  # g-orders uses gamma's only partition
        answer = join(client, "crowded", "g-orders")
        broadcast = client.post(
            "/v1/groups/crowded-b/members", json={"topics": ["g-orders"], "mode": "broadcast"}
        )  # makes no partitions
        direct = client.post("/v1/topics", json={"name": "__retry.crowded-b", "partitions": 4})  # around the join
    assert direct.status_code in (400, 403, 404), direct.text  # only a join makes them
    assert answer.status_code == 429 and code(answer) == "PARTITION_QUOTA_EXCEEDED", answer.text
    assert broadcast.status_code == 200, broadcast.text
    with tenants.client("admin") as client:
        for side in ("__retry.crowded", "__dlq.crowded", "__retry.crowded-b"):
            assert client.get(f"/v1/topics/{side}").status_code == 404
    with tenants.admin("admin") as admin:
        assert admin.quotas("gamma")["partitions_used"] == 1


@pytest.mark.slow
def test_a_group_grant_lets_another_tenant_in_until_revoked(tenants: Tenants) -> None:
    owned_group(tenants, "shared")
    with tenants.admin("alpha") as alpha:
        alpha.grant_group("shared", "beta")
        try:
            assert alpha.list_group_acls(group="shared") == [{"group": "shared", "tenant": "beta"}]
            with tenants.client("beta") as client:
                assert "shared" in client.get("/v1/groups").json()["groups"]
                assert client.get("/v1/groups/shared").status_code == 200
                assert client.get("/v1/topics/__retry.shared/partitions/0/offsets").status_code == 200
                assert join(client, "shared", "b-orders").status_code == 200
            with tenants.admin("beta") as beta, pytest.raises(PermissionDeniedError):
                beta.grant_group("shared", "gamma")  # a grantee cannot pass it on
        finally:
            alpha.revoke_group("shared", "beta")
    with tenants.client("beta") as client:
        assert client.get("/v1/groups/shared").status_code == 404
    with tenants.client("gamma") as client:
        answer = client.post("/v1/acls/groups", json={"group": "shared", "tenant": "gamma"})
        assert answer.status_code == 404 and code(answer) == "UNKNOWN_GROUP"


@pytest.mark.slow
def test_two_tenants_claiming_one_new_group_one_wins(tenants: Tenants) -> None:
    results: dict[str, list[int]] = {"alpha": [], "beta": []}

    def claim(who: str, topic: str) -> None:
        with tenants.client(who) as client:
            for _ in range(3):
                results[who].append(join(client, "contested", topic).status_code)

    threads = [threading.Thread(target=claim, args=a) for a in (("alpha", "a-orders"), ("beta", "b-orders"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    winners = [who for who, codes in results.items() if codes == [200, 200, 200]]
    losers = [who for who, codes in results.items() if codes == [404, 404, 404]]
    assert len(winners) == 1 and len(losers) == 1, results
    with tenants.client("admin") as client:
        members = client.get("/v1/groups/contested").json()["members"]
    assert len(members) == 3
