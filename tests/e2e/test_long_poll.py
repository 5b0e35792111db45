"""Long polls at a partition's end, over raw sockets against real ``talos standalone`` processes. They wait
without a task (``HotCycle``, ``LoadedPartition.when_data``): every poll waiting is woken by the flush that stores
the next message and answered with it; a poll whose wait ends gets nothing, after its wait; a client that goes away
mid-wait leaves the server serving; and a SIGTERM answers a waiting poll at once (with what there is) so the drain
does not wait for it."""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path

import httpx

from server.devservices import StandaloneServer
from talos import Admin
from tests.helpers import read_responses, running_standalone


def _address(server: StandaloneServer) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").split(":")
    return host, int(port)


def _poll(topic: str, offset: int, wait_ms: int) -> bytes:
    return (
        f"GET /v1/topics/{topic}/partitions/0/messages?offset={offset}&wait_ms={wait_ms} HTTP/1.1\r\nhost: x\r\n\r\n"
    ).encode()


def _produce(server: StandaloneServer, topic: str, value: str) -> int:
    answer = httpx.post(f"{server.url}/v1/topics/{topic}/partitions/0/messages", json={"messages": [{"value": value}]})
    assert answer.status_code == 200, answer.text
    offset: int = answer.json()["results"][0]["offset"]
    return offset


def _values(body: bytes) -> list[str]:
    return [m["value"] for m in json.loads(body)["messages"]]


def test_every_poll_waiting_is_woken_by_the_next_message(server: StandaloneServer) -> None:
    Admin(server.url).create_topic("polled", partitions=1)
    end = _produce(server, "polled", "first") + 1  # loaded: the polls below wait without a task
    sockets = [socket.create_connection(_address(server), timeout=15) for _ in range(20)]
    try:
        for sock in sockets:
            sock.sendall(_poll("polled", end, 10_000))
        time.sleep(0.3)  # they are waiting
        started = time.monotonic()
        _produce(server, "polled", "next")
        for sock in sockets:
            ((status, _, body),) = read_responses(sock, 1)
            assert status == 200, body
            assert _values(body) == ["next"]
        assert time.monotonic() - started < 5  # woken by the message, not by the end of a 10 s wait
        for sock in sockets:  # the connections go on: the next poll on each is answered at once
            sock.sendall(_poll("polled", end, 10_000))
            ((status, _, body),) = read_responses(sock, 1)
            assert (status, _values(body)) == (200, ["next"])
    finally:
        for sock in sockets:
            sock.close()


def test_a_poll_whose_wait_ends_gets_nothing_and_a_client_gone_changes_nothing(server: StandaloneServer) -> None:
    Admin(server.url).create_topic("quiet", partitions=1)
    end = _produce(server, "quiet", "only") + 1
    with socket.create_connection(_address(server), timeout=15) as gone:
        gone.sendall(_poll("quiet", end, 1_000))
        time.sleep(0.1)
    with socket.create_connection(_address(server), timeout=15) as sock:
        started = time.monotonic()
        sock.sendall(_poll("quiet", end, 300))
        ((status, _, body),) = read_responses(sock, 1)
        assert time.monotonic() - started >= 0.29
        assert (status, _values(body), json.loads(body)["next_offset"]) == (200, [], end)
        time.sleep(1.0)  # the gone client's wait ends meanwhile: nobody to answer
        _produce(server, "quiet", "after")
        sock.sendall(_poll("quiet", end, 300))
        ((status, _, body),) = read_responses(sock, 1)
    assert (status, _values(body)) == (200, ["after"])


def test_sigterm_answers_a_waiting_poll_at_once(tmp_path: Path) -> None:
    env = {"TALOS_SHUTDOWN_TIMEOUT_S": "20"}
    with running_standalone(tmp_path / "data", env=env) as server:
        Admin(server.url).create_topic("drained", partitions=1)
        end = _produce(server, "drained", "stored") + 1
        with socket.create_connection(_address(server), timeout=30) as sock:
            sock.sendall(_poll("drained", end, 30_000))
            time.sleep(0.3)
            assert server.process is not None
            started = time.monotonic()
            server.process.signal(signal.SIGTERM)
            ((status, headers, body),) = read_responses(sock, 1)
            answered = time.monotonic() - started
            status_code = server.process.wait(30)
            exited = time.monotonic() - started
    assert (status, _values(body), headers.get("connection")) == (200, [], "close")
    assert answered < 10 and exited < 15, (answered, exited)  # not the poll's 30 s, nor the drain's 20 s bound
    assert status_code == -signal.SIGTERM
