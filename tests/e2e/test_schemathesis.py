"""Schemathesis (an independent OpenAPI fuzzer) over the *served* ``/openapi.json`` of a real
``talos standalone --auth on``: generated valid and invalid requests to every operation, as a tenant and as
the admin. No answer may be a 5xx, and every answer's status, content type, headers and body must be the
ones the document declares (issue 20, point 8).

Bounded and reproducible: a fixed number of examples per operation, deterministic generation, one worker;
the fuzzing phase repeats until its time budget (50 s, 30 s) is spent. The tenant owns a topic with a
message, so some requests reach real data.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from server.devservices import StandaloneServer
from talos import Producer
from tests.helpers import secured_standalone

ADMIN_TOKEN = f"admin-{secrets.token_urlsafe(24)}"
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
)


@dataclass
class Target:
    server: StandaloneServer
    tenant_token: str


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    data = tmp_path_factory.mktemp("schemathesis") / "data"
    with secured_standalone(data, {"fuzz": None}, admin_token=ADMIN_TOKEN) as secured:
        token = secured.tokens["fuzz"]
        with secured.admin("fuzz") as tenant:
            tenant.create_topic("0", partitions=1)  # "0" is a name the generators try early
            tenant.create_topic("hostile", partitions=1)
            tenant.create_subscription("s-0", "0")  # so that making it again is 409
        with Producer(secured.url, token=token) as producer:
            producer.send("0", b"first", partition=0).result(30)
        yield Target(secured.server, token)


def run_schemathesis(
    url: str, token: str, report: Path, examples: int, seconds: int, paths: str | None = None
) -> subprocess.CompletedProcess[str]:
    """One run; the fuzzing phase repeats until ``seconds`` (the whole run's budget) is spent. ``paths``: only
    the operations whose path matches this regular expression."""
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        f"{url}/openapi.json",
        "--header",
        f"Authorization: Bearer {token}",
        "--checks",
        ",".join(CHECKS),
        "--phases",
        "examples,coverage,fuzzing",
        "--mode",
        "all",
        "--max-examples",
        str(examples),
        "--generation-deterministic",
        "--workers",
        "1",
        "--request-timeout",
        "10",
        "--max-time",
        str(seconds),
        "--no-color",
        "--report",
        "junit",
        "--report-dir",
        str(report),
        *(("--include-path-regex", paths) if paths else ()),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60, check=False, cwd=report.parent)


@pytest.mark.slow
def test_the_served_document_documents_the_error_statuses(target: Target) -> None:
    """The precondition of the runs below: without it every 4xx is an 'undocumented status'."""
    document = httpx.get(f"{target.server.url}/openapi.json", timeout=30).json()
    assert "Error" in document["components"]["schemas"]
    produce = document["paths"]["/v1/topics/{topic}/partitions/{partition}/messages"]["post"]["responses"]
    assert {"400", "401", "403", "404", "413", "421", "429", "503"} <= set(produce)
    assert "422" not in produce


@pytest.mark.slow  # about 10 s; the fast group has test_statuses_the_server_answers_are_in_the_served_document
def test_the_subscription_operations_answer_only_documented_statuses(target: Target, tmp_path: Path) -> None:
    """Issue 35: Schemathesis found POST /v1/subscriptions answering 404 UNKNOWN_TOPIC, which the document did
    not list. The same run bounded to the subscription operations finds it in its coverage phase (before
    the fix, in about 5 s), where the whole run may spend its budget elsewhere."""
    report = tmp_path / "report"
    done = run_schemathesis(
        target.server.url, target.tenant_token, report, examples=5, seconds=8, paths="^/v1/subscriptions"
    )
    assert done.returncode == 0, f"schemathesis found problems:\n{done.stdout[-20000:]}\n{done.stderr[-3000:]}"
    assert "Tested: " in done.stdout[-6000:], done.stdout[-6000:]


PROVOKED = [  # "METHOD template", the request's path, its body, the status and error code it provokes
    ("POST /v1/subscriptions", "/v1/subscriptions", {"name": "s-none", "topic": "nope"}, 404, "UNKNOWN_TOPIC"),
    ("POST /v1/subscriptions", "/v1/subscriptions", {"name": "s-0", "topic": "0"}, 409, "SUBSCRIPTION_EXISTS"),
    ("POST /v1/subscriptions", "/v1/subscriptions", {"name": "..", "topic": "0"}, 400, "INVALID_SUBSCRIPTION_NAME"),
    ("GET /v1/subscriptions/{name}", "/v1/subscriptions/never", None, 404, "UNKNOWN_SUBSCRIPTION"),
    ("POST /v1/subscriptions/{name}/pull", "/v1/subscriptions/never/pull", {"subscriber": "x"}, 404, None),
    ("DELETE /v1/acls", "/v1/acls?topic=0&tenant=nobody", None, 404, "UNKNOWN_GRANT"),
]


@pytest.mark.parametrize(("operation", "path", "body", "status", "code"), PROVOKED)
def test_statuses_the_server_answers_are_in_the_served_document(
    target: Target, operation: str, path: str, body: object, status: int, code: str | None
) -> None:
    """Each request provokes one error status; the served document lists it for the operation (issue 35:
    POST /v1/subscriptions answered 404 UNKNOWN_TOPIC and 409 SUBSCRIPTION_EXISTS, which it did not)."""
    method, template = operation.split(" ")
    headers = {"authorization": f"Bearer {target.tenant_token}"}
    answer = httpx.request(method, target.server.url + path, json=body, headers=headers, timeout=30)
    assert answer.status_code == status, answer.text
    assert code is None or answer.json()["error"]["code"] == code, answer.text
    document = httpx.get(f"{target.server.url}/openapi.json", timeout=30).json()
    assert str(status) in document["paths"][template][method.lower()]["responses"], (operation, status)


@pytest.mark.slow  # the fuzzing phase repeats until --max-time: 50 s as the tenant, 30 s as the admin
@pytest.mark.parametrize("who", ["tenant", "admin"])
def test_schemathesis_finds_no_server_error_and_no_undocumented_answer(
    target: Target, who: str, tmp_path: Path
) -> None:
    token = target.tenant_token if who == "tenant" else ADMIN_TOKEN
    examples, seconds = (10, 50) if who == "tenant" else (5, 30)
    done = run_schemathesis(target.server.url, token, tmp_path / "report", examples=examples, seconds=seconds)
    summary = done.stdout[-6000:]
    assert done.returncode == 0, f"schemathesis ({who}) found problems:\n{done.stdout[-20000:]}\n{done.stderr[-3000:]}"
    assert "passed" in summary, summary
    assert "Tested: " in summary, summary


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/topics/hostile/partitions/%C2%B2/messages?offset=0", None),  # "²": str.isdigit() says yes
        ("GET", "/v1/topics/hostile/partitions/" + "5" * 5000 + "/messages?offset=0", None),
        ("GET", "/v1/topics/hostile/partitions/%D9%A3/offsets", None),  # Arabic-Indic 3: int() takes it
        ("GET", "/v1/topics/hostile/partitions/0/messages?offset=" + "9" * 5000, None),
        ("GET", "/v1/topics/hostile/partitions/0/messages?offset=99999999999999999999", None),
        ("POST", "/v1/topics/hostile/messages", {"messages": [{"value": "x", "timestamp": 2**63}]}),
        ("POST", "/v1/topics/hostile/partitions/0/messages", {"messages": [{"value": "x", "timestamp": 2**64}]}),
        ("POST", "/v1/quota-requests", {"resource": "partitions", "requested": 5e-324}),
        ("POST", "/v1/quota-requests", {"resource": "partitions", "requested": 0.5}),
        ("POST", "/v1/topics", {"name": "huge", "retention_ms": 2**64}),
        ("POST", "/v1/producers", {"producer_id": 2**64}),
        ("PUT", "/v1/connectors/c/offsets", {"task": "t", "checkpoint": {"position": 2**70}}),
        ("POST", "/v1/groups/g/offsets", {"offsets": [{"topic": "hostile", "partition": 0, "offset": 2**70}]}),
        ("POST", "/v1/quota-requests", {"resource": "produce_bytes_per_s", "requested": 1e-3}),  # an outage
    ],
)
def test_hostile_values_are_400_with_the_error_body(target: Target, method: str, path: str, body: object) -> None:
    """Issue 20, point 8: each of these was a 500 (a plain-text traceback, struct.error, ValueError, an
    orjson overflow); a client's mistake is 400 with the usual error body."""
    headers = {"authorization": f"Bearer {target.tenant_token}"}
    answer = httpx.request(method, target.server.url + path, json=body, headers=headers, timeout=30)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] in ("INVALID_REQUEST", "INVALID_JSON"), answer.text
