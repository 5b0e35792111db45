"""Tenant isolation against a real ``talos standalone --auth on`` with three tenants (a, b, c), issue 20
points 6, 9 and 10: grants die with their topic; a topic a tenant may not see answers exactly as one that
does not exist; /metrics names tenants and topics only to the admin; tokens and quota requests are capped
and rate-limited, and decided requests are pruned into the audit log; the portal sends hardening headers,
ends sessions on the server at sign-out, and refuses sign-in and sign-out from another origin or without
the form's nonce."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from server.devservices import StandaloneServer
from talos import Admin
from tests.helpers import SecuredStandalone, secured_standalone

ADMIN_TOKEN = f"admin-{secrets.token_urlsafe(24)}"


Tenants = SecuredStandalone  # tenants a, b, c


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenants]:
    data = tmp_path_factory.mktemp("hardening") / "data"
    with secured_standalone(data, dict.fromkeys(("a", "b", "c")), admin_token=ADMIN_TOKEN) as found:
        yield found


def produce(client: httpx.Client, topic: str, value: str) -> httpx.Response:
    return client.post(f"/v1/topics/{topic}/messages", json={"messages": [{"value": value, "partition": 0}]})


def fetch(client: httpx.Client, topic: str) -> httpx.Response:
    return client.get(f"/v1/topics/{topic}/partitions/0/messages", params={"offset": 0})


# ---------------------------------------------------------------- grants die with their topic


@pytest.mark.slow
def test_a_grant_dies_with_its_topic_and_never_reaches_a_new_topic_of_the_same_name(tenants: Tenants) -> None:
    with tenants.client("a") as a, tenants.client("b") as b, tenants.client("c") as c:
        assert a.post("/v1/topics", json={"name": "handover", "partitions": 1}).status_code == 201
        assert a.post("/v1/acls", json={"topic": "handover", "tenant": "b", "actions": ["consume"]}).status_code == 201
        assert produce(a, "handover", "from a").status_code == 200
        assert fetch(b, "handover").json()["messages"][0]["value"] == "from a"
        assert a.delete("/v1/topics/handover").status_code == 204
        assert c.post("/v1/topics", json={"name": "handover", "partitions": 1}).status_code == 201
        assert produce(c, "handover", "c's secret").status_code == 200
        stolen = fetch(b, "handover")
        assert stolen.status_code == 404, stolen.text
        assert "c's secret" not in stolen.text
        assert b.get("/v1/acls").json()["acls"] == []
        assert c.get("/v1/acls", params={"topic": "handover"}).json()["acls"] == []


# ---------------------------------------------------------------- 404 for topics a tenant may not see


def _calls(name: str) -> list[tuple[str, str, dict[str, object]]]:
    batch = {"content": b"\0" * 80, "headers": {"content-type": "application/vnd.talos.batch"}}
    return [
        ("GET", f"/v1/topics/{name}", {}),
        ("PATCH", f"/v1/topics/{name}", {"json": {"partitions": 3}}),
        ("DELETE", f"/v1/topics/{name}", {}),
        ("POST", f"/v1/topics/{name}/messages", {"json": {"messages": [{"value": "x"}]}}),
        ("POST", f"/v1/topics/{name}/partitions/0/messages", {"json": {"messages": [{"value": "x"}]}}),
        ("POST", f"/v1/topics/{name}/partitions/0/messages", batch),
        ("GET", f"/v1/topics/{name}/partitions/0/messages?offset=0", {}),
        ("GET", f"/v1/topics/{name}/partitions/0/offsets", {}),
        ("GET", f"/v1/routes?topic={name}", {}),
        ("POST", "/v1/acls", {"json": {"topic": name, "tenant": "c", "actions": ["consume"]}}),
        ("POST", "/v1/quota-requests", {"json": {"resource": "partitions", "requested": 2, "topic": name}}),
    ]


def test_another_tenants_topic_answers_exactly_as_one_that_does_not_exist(tenants: Tenants) -> None:
    with tenants.client("a") as a, tenants.client("c") as c:
        assert a.post("/v1/topics", json={"name": "hidden-aaa", "partitions": 2}).status_code == 201
        assert produce(a, "hidden-aaa", "a's").status_code == 200
        for (method, path, extra), (_, ghost_path, ghost_extra) in zip(
            _calls("hidden-aaa"), _calls("hidden-zzz"), strict=True
        ):
            seen = c.request(method, path, **extra)  # type: ignore[arg-type]
            ghost = c.request(method, ghost_path, **ghost_extra)  # type: ignore[arg-type]
            assert seen.status_code == ghost.status_code == 404, (method, path, seen.text, ghost.text)
            assert seen.json()["error"]["code"] == "UNKNOWN_TOPIC", (method, path)
            assert seen.text.replace("hidden-aaa", "hidden-zzz") == ghost.text, (method, path)
        assert "hidden-aaa" not in c.get("/v1/topics").text
        assert a.get("/v1/topics/hidden-aaa").json()["partitions"] == 2  # nothing changed
        assert fetch(a, "hidden-aaa").json()["messages"][0]["value"] == "a's"
        # 403 stays where the tenant sees the topic (a grant) but lacks the action.
        assert (
            a.post("/v1/acls", json={"topic": "hidden-aaa", "tenant": "c", "actions": ["consume"]}).status_code == 201
        )
        assert fetch(c, "hidden-aaa").status_code == 200
        for answer in (
            produce(c, "hidden-aaa", "x"),
            c.patch("/v1/topics/hidden-aaa", json={"partitions": 3}),
            c.delete("/v1/topics/hidden-aaa"),
        ):
            assert answer.status_code == 403, answer.text
            assert answer.json()["error"]["code"] == "FORBIDDEN"


# ---------------------------------------------------------------- /metrics


def test_metrics_name_tenants_and_topics_only_to_the_admin(tenants: Tenants) -> None:
    with tenants.client("a") as a:
        assert a.post("/v1/topics", json={"name": "metered-topic", "partitions": 1}).status_code == 201
        assert produce(a, "metered-topic", "counted").status_code == 200
        as_tenant = a.get("/metrics")
    with tenants.client(None) as anonymous, tenants.client("admin") as admin:
        public = anonymous.get("/metrics")
        wrong = anonymous.get("/metrics", headers={"authorization": "Bearer talos_000000000000_" + "A" * 43})
        full = admin.get("/metrics")
    assert full.status_code == 200
    assert 'topic="metered-topic"' in full.text and 'tenant="a"' in full.text
    for answer in (public, as_tenant, wrong):
        assert answer.status_code == 200
        assert "metered-topic" not in answer.text and 'tenant="' not in answer.text
        assert re.search(r"^talos_messages_in_total [1-9]", answer.text, re.MULTILINE), "the totals are there"


@pytest.mark.slow
def test_metrics_labels_public_is_an_option(tmp_path: Path) -> None:
    env = {"TALOS_ADMIN_TOKEN": ADMIN_TOKEN, "TALOS_AUTH": "on"}
    instance = StandaloneServer(tmp_path / "data", env=env, args=("--metrics-labels", "public"))
    try:
        server = instance.start()
        with httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {ADMIN_TOKEN}"}) as admin:
            assert admin.post("/v1/topics", json={"name": "open-metrics", "partitions": 1}).status_code == 201
            assert produce(admin, "open-metrics", "x").status_code == 200
        assert 'topic="open-metrics"' in httpx.get(f"{server.url}/metrics").text
    finally:
        instance.stop()


# ---------------------------------------------------------------- caps, rate limits, pruning


def test_token_creation_and_quota_requests_are_rate_limited_per_tenant(tenants: Tenants) -> None:
    with tenants.client("c") as c, tenants.client("b") as b:
        made = [c.post("/v1/tenants/c/tokens", json={"name": "burst"}) for _ in range(15)]
        statuses = [m.status_code for m in made]
        assert statuses[:10] == [201] * 10 and statuses[-1] == 429, statuses
        limited = made[-1]
        assert limited.json()["error"]["code"] == "RATE_LIMITED" and limited.json()["error"]["retriable"]
        assert int(limited.headers["retry-after"]) >= 1
        asked = [
            c.post("/v1/quota-requests", json={"resource": "requests_per_s", "requested": 50}).status_code
            for _ in range(15)
        ]
        assert asked[:10] == [201] * 10 and asked[-1] == 429, asked
        assert b.post("/v1/tenants/b/tokens", json={}).status_code == 201  # another tenant is not slowed


def test_tokens_and_pending_requests_are_capped_per_tenant(tenants: Tenants) -> None:
    with Admin(tenants.url, token=ADMIN_TOKEN) as admin, tenants.client("admin") as client:
        admin.create_tenant("capped")
        for _ in range(50):
            admin.create_token("capped")
        over = client.post("/v1/tenants/capped/tokens", json={})
        assert over.status_code == 409 and over.json()["error"]["code"] == "TOO_MANY_TOKENS", over.text
        assert len(admin.list_tokens("capped")) == 50
        body = {"resource": "requests_per_s", "requested": 200, "tenant": "capped"}  # above the floor: pending
        for _ in range(20):
            assert client.post("/v1/quota-requests", json=body).json()["status"] == "pending"
        over = client.post("/v1/quota-requests", json=body)
        assert over.status_code == 409 and over.json()["error"]["code"] == "TOO_MANY_PENDING_REQUESTS", over.text


def _document_size(server: StandaloneServer) -> int:
    files = sorted((server.data_dir / "_security").glob("*.json"))
    return files[-1].stat().st_size


@pytest.mark.slow
def test_decided_requests_leave_the_document_for_the_audit_log(tenants: Tenants) -> None:
    with Admin(tenants.url, token=ADMIN_TOKEN) as admin, tenants.client("admin") as client:
        admin.create_tenant("asker")
        body = {"resource": "requests_per_s", "requested": 1000, "tenant": "asker"}  # exaggerated: rejected
        first = client.post("/v1/quota-requests", json=body).json()
        size_after_one = _document_size(tenants.server)
        for _ in range(399):
            made = client.post("/v1/quota-requests", json=body)
            assert made.status_code == 201 and made.json()["status"] == "rejected", made.text
        assert _document_size(tenants.server) < size_after_one + 20_000  # was ~1 KB per request, unbounded
        kept = [r for r in admin.quota_requests() if r["tenant"] == "asker"]
        assert len(kept) == 20 and first["id"] not in [r["id"] for r in kept]
        archived = [e for e in admin.audit(limit=5000) if e.get("record", {}).get("id") == first["id"]]
        assert archived and archived[0]["record"]["status"] == "rejected"
        assert archived[0]["record"]["reason"] == first["reason"]


# ---------------------------------------------------------------- the portal


HEADERS = {
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "a form nonce on the page"
    return found.group(1)


def _sign_in(browser: httpx.Client, token: str) -> str:
    """Sign a browser-like client in; its session cookie."""
    nonce = _csrf(browser.get("/portal/login").text)
    answer = browser.post("/portal/login", data={"token": token, "csrf": nonce})
    assert answer.status_code == 303, answer.text
    return answer.cookies["talos_portal"]


def test_every_portal_response_sends_the_hardening_headers(tenants: Tenants) -> None:
    with httpx.Client(base_url=tenants.url) as browser, httpx.Client(base_url=tenants.url) as anonymous:
        _sign_in(browser, tenants.tokens["a"])
        answers = [
            browser.get("/portal"),
            browser.get("/portal/audit"),
            browser.get("/portal/admin"),  # 403 page
            anonymous.get("/portal/login"),
            anonymous.get("/portal"),  # a redirect
            anonymous.get("/portal/nothing-here"),
        ]
    for answer in answers:
        for name, value in HEADERS.items():
            assert answer.headers.get(name) == value, (answer.url, name)
        policy = answer.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy and "default-src 'none'" in policy, policy
        assert "unsafe-inline" not in policy
    page = answers[0]
    nonce = re.search(r"'nonce-([^']+)'", page.headers["content-security-policy"])
    assert nonce and f'<script nonce="{nonce.group(1)}">' in page.text  # the page's own script runs


def test_signing_out_ends_the_session_on_the_server(tenants: Tenants) -> None:
    with httpx.Client(base_url=tenants.url) as browser:
        cookie = _sign_in(browser, tenants.tokens["b"])
        copy = httpx.Client(base_url=tenants.url, headers={"cookie": f"talos_portal={cookie}"})
        assert copy.get("/portal").status_code == 200  # a copy of the cookie works while the session lasts
        page = browser.get("/portal")
        out = browser.post("/portal/logout", data={"csrf": _csrf(page.text)})
        assert out.status_code == 303
        after = copy.get("/portal")
        copy.close()
        assert after.status_code == 303 and "/portal/login" in after.headers["location"]
    with httpx.Client(base_url=tenants.url) as again:
        _sign_in(again, tenants.tokens["b"])  # signing in again works
        assert again.get("/portal").status_code == 200


def test_sign_in_and_out_refuse_another_origin_or_a_missing_nonce(tenants: Tenants) -> None:
    token = tenants.tokens["c"]
    with httpx.Client(base_url=tenants.url) as browser:
        nonce = _csrf(browser.get("/portal/login").text)
        foreign = browser.post(
            "/portal/login", data={"token": token, "csrf": nonce}, headers={"origin": "https://evil.example"}
        )
        no_nonce = browser.post("/portal/login", data={"token": token})
        wrong_nonce = browser.post("/portal/login", data={"token": token, "csrf": nonce + "x"})
        for answer in (foreign, no_nonce, wrong_nonce):
            assert answer.status_code == 403, answer.text
            assert "talos_portal" not in answer.cookies
    with httpx.Client(base_url=tenants.url) as browser:
        cookie = _sign_in(browser, token)
        csrf = _csrf(browser.get("/portal").text)
        foreign = browser.post("/portal/logout", data={"csrf": csrf}, headers={"origin": "https://evil.example"})
        no_nonce = browser.post("/portal/logout", data={})
        assert foreign.status_code == 403 and no_nonce.status_code == 403
        with httpx.Client(base_url=tenants.url, headers={"cookie": f"talos_portal={cookie}"}) as copy:
            assert copy.get("/portal").status_code == 200  # still signed in: neither post signed it out
        same_origin = browser.post("/portal/logout", data={"csrf": csrf}, headers={"origin": tenants.url})
        assert same_origin.status_code == 303
