"""Tenants, tokens, ACLs and partition quotas against a real ``talos standalone --auth on``: what a client
without a token, with another tenant's token, or with a tenant's token at an admin endpoint gets; that
tokens never show in responses or logs; that names cannot escape the data directory; that big bodies are
refused; and the ``talos tenants|tokens|acl|quotas`` commands."""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from server.devservices import StandaloneServer
from talos import (
    Admin,
    AuthenticationError,
    Consumer,
    NotFoundError,
    PermissionDeniedError,
    Producer,
    QuotaExceededError,
)
from tests.helpers import running_standalone

ADMIN_TOKEN = f"admin-{secrets.token_urlsafe(24)}"


@dataclass
class Secured:
    server: StandaloneServer
    acme: str  # tokens
    globex: str

    @property
    def url(self) -> str:
        return self.server.url

    def client(self, token: str | None) -> httpx.Client:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    data = tmp_path_factory.mktemp("secured") / "data"
    env = {"TALOS_ADMIN_TOKEN": ADMIN_TOKEN, "TALOS_AUTH": "on", "TALOS_LOG_LEVEL": "debug", "TALOS_ACCESS_LOG": "1"}
    with running_standalone(data, env=env) as server, Admin(server.url, token=ADMIN_TOKEN) as admin:
        admin.create_tenant("acme", quota={"partitions": 6})
        admin.create_tenant("globex")
        acme = admin.create_token("acme", name="ci")["token"]
        globex = admin.create_token("globex")["token"]
        with Admin(server.url, token=acme) as tenant:
            tenant.create_topic("orders", partitions=2)
        with Producer(server.url, token=acme) as producer:
            producer.send("orders", b"first", partition=0).result(30)
        yield Secured(server, acme, globex)


def error_code(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/topics"),
        ("POST", "/v1/topics/orders/messages"),
        ("GET", "/v1/topics/orders/partitions/0/messages?offset=0"),
        ("GET", "/v1/topics/orders/partitions/0/offsets"),
        ("GET", "/v1/groups"),
        ("GET", "/v1/tenants"),
        ("GET", "/v1/routes"),
    ],
)
def test_no_token_is_401_with_a_bearer_challenge(secured: Secured, method: str, path: str) -> None:
    with secured.client(None) as client:
        answer = client.request(method, path, json={"messages": [{"value": "x"}]} if method == "POST" else None)
    assert answer.status_code == 401
    assert error_code(answer) == "UNAUTHENTICATED"
    assert answer.headers["www-authenticate"].startswith("Bearer")


def test_health_metrics_and_docs_need_no_token(secured: Secured) -> None:
    with secured.client(None) as client:
        for path in ("/healthz", "/readyz", "/metrics", "/openapi.json", "/portal/login"):
            assert client.get(path).status_code == 200, path


@pytest.mark.parametrize("token", ["talos_000000000000_" + "A" * 43, "not-a-token", "talos_"])
def test_a_wrong_token_is_401_and_not_echoed(secured: Secured, token: str) -> None:
    with httpx.Client(base_url=secured.url, headers={"authorization": f"Bearer {token}"}) as client:
        answer = client.get("/v1/topics")
    assert answer.status_code == 401
    assert token not in answer.text


def test_another_tenants_topic_is_404_as_if_it_did_not_exist(secured: Secured) -> None:
    with secured.client(secured.globex) as client:
        produce = client.post("/v1/topics/orders/messages", json={"messages": [{"value": "x"}]})
        fetch = client.get("/v1/topics/orders/partitions/0/messages", params={"offset": 0})
        batch = client.post(
            "/v1/topics/orders/partitions/0/messages",
            content=b"\0" * 80,
            headers={"content-type": "application/vnd.talos.batch"},
        )
        offsets = client.get("/v1/topics/orders/partitions/0/offsets")
        describe = client.get("/v1/topics/orders")
        delete = client.delete("/v1/topics/orders")
        alter = client.patch("/v1/topics/orders", json={"partitions": 3})
        listed = client.get("/v1/topics").json()["topics"]
    for answer in (produce, fetch, batch, offsets, describe, delete, alter):
        assert answer.status_code == 404, answer.text  # 403 would tell globex that acme has an "orders"
        assert error_code(answer) == "UNKNOWN_TOPIC"
    assert listed == []  # another tenant's topics are not even listed
    with (
        pytest.raises(NotFoundError),
        Consumer(secured.url, group="spy", topics=["orders"], token=secured.globex) as consumer,
    ):
        consumer.poll(5)
    with Admin(secured.url, token=secured.acme) as admin:
        assert admin.offsets("orders", 0)["latest"] == 1  # nothing got in or was deleted


def test_admin_endpoints_with_a_tenant_token_are_403(secured: Secured) -> None:
    with secured.client(secured.acme) as client:
        attempts = [
            client.post("/v1/tenants", json={"name": "evil"}),
            client.delete("/v1/tenants/globex"),
            client.put("/v1/quotas/tenants/acme", json={"partitions": 1000}),
            client.put("/v1/quotas/topics/orders", json={"requests_per_s": 1e9}),
            client.post("/v1/tenants/globex/tokens", json={}),
            client.get("/v1/tenants/globex/tokens"),
            client.post("/v1/quota-requests/1/decision", json={"decision": "approve"}),
            client.post("/v1/topics", json={"name": "x", "tenant": "globex"}),
        ]
    for answer in attempts:
        assert answer.status_code == 403, answer.text
    with Admin(secured.url, token=ADMIN_TOKEN) as admin:
        assert [t["name"] for t in admin.list_tenants()] == ["acme", "globex"]
        assert admin.quotas("acme")["quota"]["partitions"] == 6


def test_grants_let_another_tenant_consume_until_revoked(secured: Secured) -> None:
    with Admin(secured.url, token=secured.acme) as owner:
        owner.grant("orders", "globex", ["consume"])
        try:
            with secured.client(secured.globex) as client:
                read = client.get("/v1/topics/orders/partitions/0/messages", params={"offset": 0})
                write = client.post("/v1/topics/orders/messages", json={"messages": [{"value": "x"}]})
            assert read.status_code == 200 and read.json()["messages"][0]["value"] == "first"
            assert write.status_code == 403
            with Admin(secured.url, token=secured.globex) as other, pytest.raises(PermissionDeniedError):
                other.grant("orders", "globex", ["produce"])  # a grantee cannot widen its own grant
        finally:
            owner.revoke("orders", "globex")
    with secured.client(secured.globex) as client:
        assert client.get("/v1/topics/orders/partitions/0/messages", params={"offset": 0}).status_code == 404


def test_a_revoked_token_is_refused_at_once(secured: Secured) -> None:
    with Admin(secured.url, token=ADMIN_TOKEN) as admin:
        made = admin.create_token("acme", name="short-lived")
        with Admin(secured.url, token=made["token"]) as holder:
            assert holder.whoami()["tenant"] == "acme"
            admin.revoke_token("acme", made["id"])
            with pytest.raises(AuthenticationError):
                holder.list_topics()


def test_the_partition_quota_holds_for_new_and_grown_topics(secured: Secured) -> None:
    with Admin(secured.url, token=secured.acme) as admin:
        admin.create_topic("sized", partitions=3)  # 2 + 3 of 6
        with pytest.raises(QuotaExceededError) as error:
            admin.create_topic("more", partitions=2)
        assert error.value.code == "PARTITION_QUOTA_EXCEEDED" and not error.value.retriable
        with pytest.raises(QuotaExceededError):
            admin.alter_topic("sized", partitions=5)
        assert admin.alter_topic("sized", partitions=4).partitions == 4
        assert "more" not in [t.name for t in admin.list_topics()]


@pytest.mark.parametrize("name", ["..", "../etc", "a/b", "..%2F..%2Fetc", "/abs", ".hidden", "a\\b", "x" * 300])
def test_topic_names_cannot_escape_the_data_directory(secured: Secured, name: str) -> None:
    data = secured.server.data_dir

    def topics() -> list[str]:
        # The server's own topics come and go with time (the usage emitter makes __talos_metrics when its
        # interval first ends); nothing else may appear. Compared with what was there before, so the test
        # holds whichever tests of the module ran first (or on another worker).
        return sorted(p.name for p in (data / "topics").iterdir() if p.name not in ("__talos_audit", "__talos_metrics"))

    before = topics()
    with secured.client(secured.acme) as client:
        answer = client.post("/v1/topics", json={"name": name, "partitions": 1})
    assert answer.status_code == 400
    assert error_code(answer) == "INVALID_TOPIC_NAME"
    assert not (data.parent / "etc").exists()
    assert "orders" in before
    assert topics() == before


def test_oversized_bodies_are_413_and_change_nothing(secured: Secured) -> None:
    with secured.client(secured.acme) as client:
        produce = client.post(
            "/v1/topics/orders/messages", content=b'{"messages":[{"value":"' + b"x" * (9 * 1024 * 1024) + b'"}]}'
        )
        admin_body = client.post("/v1/topics", content=b'{"name":"big","pad":"' + b"y" * (2 * 1024 * 1024) + b'"}')

        def chunks() -> Iterator[bytes]:  # no content-length: the limit counts what arrives
            yield b'{"name":"big2","pad":"'
            for _ in range(40):
                yield b"z" * 65536
            yield b'"}'

        streamed = client.post("/v1/topics", content=chunks(), headers={"content-type": "application/json"})
    for answer in (produce, admin_body, streamed):
        assert answer.status_code == 413, answer.text[:200]
        assert error_code(answer) == "REQUEST_TOO_LARGE"
    with Admin(secured.url, token=secured.acme) as admin:
        assert {"big", "big2"}.isdisjoint(t.name for t in admin.list_topics())
        assert admin.offsets("orders", 0)["latest"] == 1


def test_tokens_never_appear_in_responses_or_logs(secured: Secured) -> None:
    with Admin(secured.url, token=ADMIN_TOKEN) as admin:
        made = admin.create_token("globex", name="logged?")
        token = made["token"]
        secret = token.split("_", 2)[2]  # talos_<id>_<secret>: the secret may hold "_" itself
        with secured.client(token) as client:
            bodies = [
                client.get("/v1/tenants/globex/tokens").text,
                client.get("/v1/whoami").text,
                client.get("/v1/audit").text,
                client.get("/v1/topics/orders/partitions/0/messages", params={"offset": 0}).text,  # 403
                client.post("/v1/topics", json={"name": "../x"}).text,  # 400
            ]
        with httpx.Client(base_url=secured.url) as browser:
            bodies.append(browser.post("/portal/login", data={"token": token}).text)
            bodies.append(browser.post("/portal/login", data={"token": token + "x"}).text)
        bodies.append(httpx.get(f"{secured.url}/v1/audit", headers={"authorization": f"Bearer {ADMIN_TOKEN}"}).text)
        bodies.append(str(admin.list_tokens("globex")))
    for body in bodies:
        assert secret not in body and ADMIN_TOKEN not in body
    log = (secured.server.data_dir.parent / f"server-{secured.server.port}.log").read_text()
    assert "/v1/whoami" in log  # the access log is on: requests are logged ...
    assert secret not in log and ADMIN_TOKEN not in log  # ... their tokens are not
    documents = []
    for version in (secured.server.data_dir / "_security").iterdir():
        with contextlib.suppress(FileNotFoundError):  # an old version pruned since it was listed
            documents.append(version.read_text())
    assert documents and all(secret not in document for document in documents)


@pytest.mark.slow
def test_the_cli_manages_tenants_tokens_grants_and_quotas(secured: Secured, tmp_path: Path) -> None:
    env = {**os.environ, "TALOS_URL": secured.url, "TALOS_TOKEN": ADMIN_TOKEN}

    def talos(*args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
        run_env = {**env, "TALOS_TOKEN": token} if token else env
        return subprocess.run(
            [sys.executable, "-m", "talos.cli", *args],
            capture_output=True,
            text=True,
            env=run_env,
            stdin=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )

    made = talos("tenants", "create", "initech", "--quota", "partitions=4", "--quota", "produce_bytes_per_s=2M")
    assert made.returncode == 0, made.stderr
    listed = talos("tenants", "list")
    assert "initech" in listed.stdout and "produce_bytes_per_s=2.09715e+06" in listed.stdout
    token = talos("tokens", "create", "initech", "--name", "cli").stdout.strip()
    assert token.startswith("talos_")
    assert talos("topics", "create", "reports", "--partitions", "2", token=token).returncode == 0
    denied = talos("topics", "create", "toomany", "--partitions", "3", token=token)
    assert denied.returncode == 1 and "PARTITION_QUOTA_EXCEEDED" in denied.stderr
    assert talos("acl", "grant", "reports", "acme", "--action", "consume", token=token).returncode == 0
    assert "reports\tacme\tconsume" in talos("acl", "list", "--topic", "reports").stdout
    shown = talos("quotas", "show", "initech", token=token)
    assert '"partitions": 4' in shown.stdout and "reports" in shown.stdout
    asked = talos("quotas", "request", "requests_per_s", "50", "--topic", "reports", "--why", "launch", token=token)
    assert asked.returncode == 0 and ": approved:" in asked.stdout
    assert talos("quotas", "set", "--topic", "reports", "requests_per_s=none").returncode == 0
    forbidden = talos("tenants", "list", token=token)
    assert forbidden.returncode == 0 and forbidden.stdout.split("\t")[0] == "initech"  # a tenant sees itself
    no_token = subprocess.run(
        [sys.executable, "-m", "talos.cli", "topics", "list"],
        capture_output=True,
        text=True,
        env={k: v for k, v in env.items() if k != "TALOS_TOKEN"},
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    assert no_token.returncode == 1 and "401 UNAUTHENTICATED" in no_token.stderr
    token_id = talos("tokens", "list", "initech").stdout.split("\t")[0]
    assert talos("tokens", "revoke", "initech", token_id).returncode == 0
    assert "401" in talos("topics", "list", token=token).stderr


def test_tenants_reach_the_connector_checkpoints_only_through_their_api(secured: Secured) -> None:
    with secured.client(secured.acme) as client:
        made = client.post("/v1/topics", json={"name": "__connect_offsets", "partitions": 8})
        assert made.status_code == 400 and error_code(made) == "INVALID_TOPIC_NAME"
        servers_own = client.post("/v1/topics", json={"name": "__consumer_offsets", "partitions": 1})
        assert servers_own.status_code == 400 and error_code(servers_own) == "INVALID_TOPIC_NAME"
        saved = client.put("/v1/connectors/c/offsets", json={"task": "0", "checkpoint": {"at": 1}})
        assert saved.status_code == 200, saved.text
    with secured.client(secured.globex) as client:
        wrote = client.post("/v1/topics/__connect_offsets/messages", json={"messages": [{"key": "c/0", "value": "1"}]})
        assert wrote.status_code in (403, 404)
        audit = client.get("/v1/topics/__talos_audit/partitions/0/messages", params={"offset": 0})
        assert audit.status_code in (403, 404)
    with Admin(secured.url, token=ADMIN_TOKEN) as admin:
        described = admin.describe_topic("__connect_offsets")
        assert described.partitions == 8
        assert admin.quotas("acme")["partitions_used"] <= 6  # not counted against the tenant that made it
