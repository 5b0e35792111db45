"""A connection's repeated produce head (``server.http.connections``, "the lane"), over raw sockets against real
``talos standalone`` processes: a request whose head is byte for byte the last produce's is stored and answered
as the parsed one would be, once each and in order; what the lane cannot take (a body that is not a message, bytes
that come while its request is answered, a revoked token, the connection's last request) gets what the full path
answers."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from server.devservices import StandaloneServer
from talos import Admin
from tests.helpers import read_responses, running_standalone

TOPIC = "repeated"
ADMIN_TOKEN = "admin-repeated-head-test-token"


def _address(server: StandaloneServer) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").split(":")
    return host, int(port)


def _produce(value: str, *, token: str | None = None, topic: str = TOPIC) -> bytes:
    """One produce; values of one length make requests whose heads are the same bytes."""
    body = json.dumps({"messages": [{"value": value}]}).encode()
    auth = f"authorization: Bearer {token}\r\n" if token else ""
    head = (
        f"POST /v1/topics/{topic}/partitions/0/messages HTTP/1.1\r\nhost: x\r\n{auth}"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _repeated(server: StandaloneServer) -> float:
    """``talos_http_repeated_heads``: requests the lane took."""
    text = httpx.get(f"{server.url}/metrics", headers={"authorization": f"Bearer {ADMIN_TOKEN}"}).text
    return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith("talos_http_repeated_heads"))


def _values(server: StandaloneServer, offset: int, count: int, token: str | None = None) -> list[str]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    answer = httpx.get(
        f"{server.url}/v1/topics/{TOPIC}/partitions/0/messages",
        params={"offset": offset, "max_messages": count},
        headers=headers,
    )
    assert answer.status_code == 200, answer.text
    return [m["value"] for m in answer.json()["messages"]][:count]


@pytest.fixture(scope="module")
def open_server(server: StandaloneServer) -> StandaloneServer:
    Admin(server.url).create_topic(TOPIC, partitions=1)
    loaded = httpx.post(f"{server.url}/v1/topics/{TOPIC}/partitions/0/messages", json={"messages": [{"value": "-"}]})
    assert loaded.status_code == 200  # the partition is loaded: the next produce is answered without a task
    return server


def test_repeated_requests_are_each_stored_once_and_answered_in_order(open_server: StandaloneServer) -> None:
    before = _repeated(open_server)
    with socket.create_connection(_address(open_server), timeout=10) as sock:
        offsets = []
        for i in range(20):
            sock.sendall(_produce(f"v{i:02d}"))
            ((status, headers, body),) = read_responses(sock, 1)
            assert status == 200 and headers["content-type"] == "application/json", body
            (result,) = json.loads(body)["results"]
            assert result["partition"] == 0 and result["durable_offset"] >= result["offset"] + 1
            assert result["duplicate"] is False
            offsets.append(result["offset"])
    assert offsets == list(range(offsets[0], offsets[0] + 20))
    assert _repeated(open_server) - before == 19  # the first head is parsed; every later one is repeated
    assert _values(open_server, offsets[0], 20) == [f"v{i:02d}" for i in range(20)]


def test_bytes_that_come_while_a_repeated_request_is_answered_wait_for_it(open_server: StandaloneServer) -> None:
    with socket.create_connection(_address(open_server), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(_produce("w-first"))
        read_responses(sock, 1)
        offsets = []
        for i in range(30):
            # Two writes: the second often reaches the server while the first (taken by the lane) waits for its
            # flush; it then waits too, and is answered after it.
            sock.sendall(_produce(f"w-{i:02d}a"))
            sock.sendall(_produce(f"w-{i:02d}b") + f"GET /v1/topics/{TOPIC} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
            (s1, _, b1), (s2, _, b2), (s3, _, b3) = read_responses(sock, 3)
            assert (s1, s2, s3) == (200, 200, 200)
            assert json.loads(b3)["name"] == TOPIC
            offsets += [json.loads(b1)["results"][0]["offset"], json.loads(b2)["results"][0]["offset"]]
    assert offsets == list(range(offsets[0], offsets[0] + 60))
    expected = [f"w-{i:02d}{half}" for i in range(30) for half in "ab"]
    assert _values(open_server, offsets[0], 60) == expected


def test_a_body_the_lane_cannot_store_gets_the_full_paths_answer(open_server: StandaloneServer) -> None:
    good = _produce("ok")
    head, _, body = good.partition(b"\r\n\r\n")
    broken = head + b"\r\n\r\n" + b"{" * len(body)  # the same head, a body of the same length: not JSON
    with socket.create_connection(_address(open_server), timeout=10) as sock:
        sock.sendall(good)
        sock.sendall(good)
        sock.sendall(broken)
        sock.sendall(good)
        answers = read_responses(sock, 4)
    assert [status for status, _, _ in answers] == [200, 200, 400, 200]
    assert json.loads(answers[2][2])["error"]["code"] == "INVALID_JSON"
    offsets = [json.loads(body)["results"][0]["offset"] for status, _, body in answers if status == 200]
    assert offsets == list(range(offsets[0], offsets[0] + 3))  # nothing stored for the refused one


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StandaloneServer, str]]:
    env = {"TALOS_ADMIN_TOKEN": ADMIN_TOKEN, "TALOS_AUTH": "on", "TALOS_MAX_REQUESTS_PER_CONNECTION": "8"}
    data: Path = tmp_path_factory.mktemp("repeated-secured") / "data"
    with running_standalone(data, env=env) as server, Admin(server.url, token=ADMIN_TOKEN) as admin:
        admin.create_tenant("acme")
        token = admin.create_token("acme")["token"]
        with Admin(server.url, token=token) as tenant:
            tenant.create_topic(TOPIC, partitions=1)
        loaded = httpx.post(
            f"{server.url}/v1/topics/{TOPIC}/partitions/0/messages",
            json={"messages": [{"value": "-"}]},
            headers={"authorization": f"Bearer {token}"},
        )
        assert loaded.status_code == 200
        yield server, token


def test_a_revoked_token_is_refused_on_the_next_repeated_request(secured: tuple[StandaloneServer, str]) -> None:
    server, _ = secured
    with Admin(server.url, token=ADMIN_TOKEN) as admin:
        made = admin.create_token("acme", name="short-lived")
    before = _repeated(server)
    with socket.create_connection(_address(server), timeout=10) as sock:
        for i in range(3):
            sock.sendall(_produce(f"r{i}", token=made["token"]))
            ((status, _, body),) = read_responses(sock, 1)
            assert status == 200, body
        assert _repeated(server) - before == 2
        with Admin(server.url, token=ADMIN_TOKEN) as admin:
            admin.revoke_token("acme", made["id"])
        sock.sendall(_produce("r3", token=made["token"]))
        ((status, _, body),) = read_responses(sock, 1)
    assert status == 401 and json.loads(body)["error"]["code"] == "UNAUTHENTICATED"


def test_the_connections_last_request_closes_it(secured: tuple[StandaloneServer, str]) -> None:
    server, token = secured
    with socket.create_connection(_address(server), timeout=10) as sock:
        for i in range(8):  # TALOS_MAX_REQUESTS_PER_CONNECTION
            sock.sendall(_produce(f"c{i}", token=token))
            ((status, headers, body),) = read_responses(sock, 1)
            assert status == 200, body
            assert (headers.get("connection") == "close") == (i == 7)
        assert sock.recv(1) == b""  # closed by the server after the eighth answer


def test_a_produce_allowed_on_a_connection_does_not_allow_a_fetch_with_the_same_head(
    secured: tuple[StandaloneServer, str],
) -> None:
    """The connection's memo of a head (who asks, what they may do) is kept per kind of request: a tenant allowed
    to produce to a topic but not to consume it, sending a fetch whose header lines are byte for byte those of
    its produce (a GET with the same content type and length), is refused, on the memo's connection as on a
    new one; granted consume, the same fetch is answered."""
    server, _ = secured
    with Admin(server.url, token=ADMIN_TOKEN) as admin:
        admin.create_tenant("writer")
        writer = admin.create_token("writer")["token"]
        admin.grant(TOPIC, "writer", ["produce"])
    produce = _produce("w0", token=writer)
    head, body = produce.split(b"\r\n\r\n", 1)
    fetch = head.replace(
        f"POST /v1/topics/{TOPIC}/partitions/0/messages".encode(),
        f"GET /v1/topics/{TOPIC}/partitions/0/messages?offset=0".encode(),
    )
    fetch += b"\r\n\r\n" + body
    with socket.create_connection(_address(server), timeout=10) as sock:
        sock.sendall(produce)
        ((status, _, answer),) = read_responses(sock, 1)
        assert status == 200, answer
        sock.sendall(fetch)
        ((status, _, answer),) = read_responses(sock, 1)
    assert status == 403 and json.loads(answer)["error"]["code"] == "FORBIDDEN", answer
    with Admin(server.url, token=ADMIN_TOKEN) as admin:
        admin.grant(TOPIC, "writer", ["consume"])
    with socket.create_connection(_address(server), timeout=10) as sock:
        sock.sendall(produce)
        assert read_responses(sock, 1)[0][0] == 200
        sock.sendall(fetch)
        ((status, _, answer),) = read_responses(sock, 1)
    assert status == 200, answer
    assert json.loads(answer)["messages"][0]["value"] == "-"


def _fetch(offset: int, *, token: str | None = None, extra: str = "") -> bytes:
    """One fetch of a message; fetches on one connection differ only in their query."""
    auth = f"authorization: Bearer {token}\r\n" if token else ""
    return (
        f"GET /v1/topics/{TOPIC}/partitions/0/messages?offset={offset}&max_messages=1{extra} HTTP/1.1\r\n"
        f"host: x\r\n{auth}\r\n"
    ).encode()


def test_repeated_fetches_with_another_query_are_answered_as_parsed_ones(open_server: StandaloneServer) -> None:
    """A consumer's fetches differ only in their query: after the first, each is taken by the lane (the repeated-
    heads counter moves) and answered as the parser's path answers it; a query that is not plain (an escape), an
    error and a fetch that must wait go through the parser, on the same connection, in order."""
    with socket.create_connection(_address(open_server), timeout=10) as sock:
        sock.sendall(_produce("first-of-fetches"))
        ((status, _, body),) = read_responses(sock, 1)
        start = json.loads(body)["results"][0]["offset"]
        for i in range(5):
            sock.sendall(_produce(f"f{i}"))
            assert read_responses(sock, 1)[0][0] == 200
    before = _repeated(open_server)
    with socket.create_connection(_address(open_server), timeout=10) as sock:
        values = []
        for offset in range(start, start + 6):
            sock.sendall(_fetch(offset))
            ((status, _, body),) = read_responses(sock, 1)
            assert status == 200, body
            values.append(json.loads(body)["messages"][0]["value"])
        assert values == ["first-of-fetches", "f0", "f1", "f2", "f3", "f4"]
        assert _repeated(open_server) - before == 5  # all but the first
        escaped = _repeated(open_server)
        sock.sendall(_fetch(start + 1, extra="&member=a%20b"))  # an escape: parsed, answered the same
        ((status, _, body),) = read_responses(sock, 1)
        assert (status, json.loads(body)["messages"][0]["value"]) == (200, "f0")
        sock.sendall(_fetch(start, extra="&max_bytes=x"))  # an error: the parser's path answers the 400
        ((status, _, body),) = read_responses(sock, 1)
        assert (status, json.loads(body)["error"]["code"]) == (400, "INVALID_REQUEST")
        end = start + 6
        sock.sendall(_fetch(end, extra="&wait_ms=5000"))  # waits: the parser's path, woken by the next message
        time.sleep(0.2)
        httpx.post(f"{open_server.url}/v1/topics/{TOPIC}/partitions/0/messages", json={"messages": [{"value": "w"}]})
        ((status, _, body),) = read_responses(sock, 1)
        assert (status, json.loads(body)["messages"][0]["value"]) == (200, "w")
        assert _repeated(open_server) == escaped  # none of those three took the lane


def test_a_revoked_token_is_refused_on_the_next_repeated_fetch(secured: tuple[StandaloneServer, str]) -> None:
    server, _ = secured
    with Admin(server.url, token=ADMIN_TOKEN) as admin:
        made = admin.create_token("acme", name="reader")
    with socket.create_connection(_address(server), timeout=10) as sock:
        for offset in range(2):
            sock.sendall(_fetch(offset, token=made["token"]))
            assert read_responses(sock, 1)[0][0] == 200
        with Admin(server.url, token=ADMIN_TOKEN) as admin:
            admin.revoke_token("acme", made["id"])
        sock.sendall(_fetch(0, token=made["token"]))
        ((status, _, body),) = read_responses(sock, 1)
    assert status == 401 and json.loads(body)["error"]["code"] == "UNAUTHENTICATED"


def test_a_fetch_with_a_body_is_never_repeated_without_the_parser(open_server: StandaloneServer) -> None:
    """A fetch whose head declares a body (sent in a later chunk) is not kept for the lane: the lane would take
    the next such head alone and read its body as the next request. The parser frames each request."""
    head = _fetch(0).replace(b"host: x\r\n", b"host: x\r\ncontent-length: 19\r\n")
    body = _fetch(0)[:19]  # bytes that would start a request if read as one
    before = _repeated(open_server)
    with socket.create_connection(_address(open_server), timeout=10) as sock:
        for _ in range(3):
            sock.sendall(head)
            time.sleep(0.05)  # the body comes in a chunk of its own
            sock.sendall(body)
            ((status, _, answer),) = read_responses(sock, 1)
            assert status == 200, answer
        sock.sendall(_fetch(0))
        ((status, _, answer),) = read_responses(sock, 1)
        assert status == 200, answer
    assert _repeated(open_server) == before
