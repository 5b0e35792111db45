"""The hot endpoints answered by the server's HTTP protocol without ASGI (``server.http.hot_cycle``), over raw
sockets against a real ``talos standalone``: HTTP as clients speak it still works on them — pipelining mixed with
requests FastAPI answers, ``Expect: 100-continue``, chunked bodies, HTTP/1.0, limits."""

from __future__ import annotations

import json
import socket

import pytest

from server.devservices import StandaloneServer
from talos import Admin
from tests.helpers import read_responses

TOPIC = "hot-path"


@pytest.fixture(scope="module")
def address(server: StandaloneServer) -> tuple[str, int]:
    Admin(server.url).create_topic(TOPIC, partitions=1)
    host, port = server.url.removeprefix("http://").split(":")
    return host, int(port)


def _produce(value: str, *, extra: str = "", version: str = "1.1") -> bytes:
    body = json.dumps({"messages": [{"value": value}]}).encode()
    head = (
        f"POST /v1/topics/{TOPIC}/partitions/0/messages HTTP/{version}\r\nhost: x\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n{extra}\r\n"
    )
    return head.encode() + body


@pytest.mark.slow
def test_pipelined_hot_and_other_requests_are_answered_in_order(address: tuple[str, int]) -> None:
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(
            _produce("one")
            + f"GET /v1/topics/{TOPIC} HTTP/1.1\r\nhost: x\r\n\r\n".encode()
            + _produce("two")
            + f"GET /v1/topics/{TOPIC}/partitions/0/offsets HTTP/1.1\r\nhost: x\r\n\r\n".encode()
        )
        (s1, _, b1), (s2, _, b2), (s3, _, b3), (s4, _, b4) = read_responses(sock, 4)
    assert (s1, s2, s3, s4) == (200, 200, 200, 200)
    first, second = json.loads(b1)["results"][0], json.loads(b3)["results"][0]
    assert json.loads(b2)["name"] == TOPIC  # FastAPI's answer, between the two produces
    assert second["offset"] == first["offset"] + 1
    assert json.loads(b4)["latest"] >= second["offset"] + 1


def test_expect_continue_and_a_chunked_body(address: tuple[str, int]) -> None:
    body = json.dumps({"messages": [{"value": "chunked"}]}).encode()
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:5], body[5:])) + b"0\r\n\r\n"
    with socket.create_connection(address, timeout=10) as sock:
        head = (
            f"POST /v1/topics/{TOPIC}/partitions/0/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nexpect: 100-continue\r\n\r\n"
        )
        sock.sendall(head.encode())
        assert sock.recv(64).startswith(b"HTTP/1.1 100 Continue")  # asked for before the body is sent
        sock.sendall(body)
        sock.sendall(
            f"POST /v1/topics/{TOPIC}/partitions/0/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            "transfer-encoding: chunked\r\n\r\n".encode()
            + chunked
        )
        (s1, _, _b1), (s2, _, b2) = read_responses(sock, 2)
    assert (s1, s2) == (200, 200)
    offset = json.loads(b2)["results"][0]["offset"]
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(
            f"GET /v1/topics/{TOPIC}/partitions/0/messages?offset={offset} HTTP/1.1\r\nhost: x\r\n\r\n".encode()
        )
        ((status, _, fetched),) = read_responses(sock, 1)
    assert status == 200 and json.loads(fetched)["messages"][0]["value"] == "chunked"


def test_http_1_0_and_connection_close_are_answered_and_closed(address: tuple[str, int]) -> None:
    for request in (_produce("ten", version="1.0"), _produce("closing", extra="connection: close\r\n")):
        with socket.create_connection(address, timeout=10) as sock:
            sock.sendall(request)
            ((status, headers, _),) = read_responses(sock, 1)
            assert status == 200 and headers.get("connection") == "close"
            assert sock.recv(1) == b""  # the server closed it


def test_a_body_over_the_limit_is_refused_before_it_is_read(address: tuple[str, int]) -> None:
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(
            f"POST /v1/topics/{TOPIC}/partitions/0/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            f"content-length: {1 << 40}\r\n\r\n".encode()
        )
        ((status, _, body),) = read_responses(sock, 1)
    assert status == 413 and json.loads(body)["error"]["code"] == "REQUEST_TOO_LARGE"


def test_keyless_messages_to_the_topic_go_round_its_partitions(server: StandaloneServer) -> None:
    """The round robin is taken once per request, whether the request is answered without a task or, as the
    first one to each partition (it loads the partition), by the full path."""
    Admin(server.url).create_topic("hot-spread", partitions=3)
    host, port = server.url.removeprefix("http://").split(":")
    body = json.dumps({"messages": [{"value": "v"}]}).encode()
    request = (
        f"POST /v1/topics/hot-spread/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body
    partitions = []
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        for _ in range(9):
            sock.sendall(request)
            ((status, _, answer),) = read_responses(sock, 1)
            assert status == 200
            partitions.append(json.loads(answer)["results"][0]["partition"])
    assert sorted(partitions) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert all(partitions[i] == partitions[i % 3] for i in range(9))  # the same turn every round


def test_pipelined_produces_are_answered_in_the_order_sent(address: tuple[str, int]) -> None:
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(b"".join(_produce(f"p{i}") for i in range(6)))
        answers = read_responses(sock, 6)
        offsets = [json.loads(body)["results"][0]["offset"] for status, _, body in answers if status == 200]
        assert len(offsets) == 6 and offsets == list(range(offsets[0], offsets[0] + 6))
        sock.sendall(f"GET /v1/topics/{TOPIC}/partitions/0/offsets HTTP/1.1\r\nhost: x\r\n\r\n".encode())
        ((status, _, body),) = read_responses(sock, 1)  # the next answer on the connection is this one's
    assert status == 200 and json.loads(body)["latest"] == offsets[-1] + 1  # each stored once
