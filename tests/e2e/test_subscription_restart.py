"""Push subscriptions across a coordinator's kill -9 (issue 35): a lease recovered from the state snapshot is
settled by its delivery's acknowledgement at once after the restart, before the coordinator has read the
topic again, and what was acknowledged is not delivered again. Raw WebSocket frames, so that each status is
the server's own answer."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from websockets.sync.client import ClientConnection, connect

from talos import Admin, Producer
from tests.helpers import running_standalone

pytestmark = pytest.mark.slow

ACK_TIMEOUT_MS = 10_000  # outlives the restart (as in the report), so the leases are held when the acks come


def ws_url(url: str, query: str) -> str:
    return url.replace("http://", "ws://") + "/v1/subscribe?" + query


def frames(ws: ClientConnection, seconds: float) -> list[dict[str, Any]]:
    """Every frame the server sends in ``seconds``."""
    out = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            out.append(orjson.loads(ws.recv(timeout=left)))
        except TimeoutError:
            break
    return out


def settled(ws: ClientConnection, timeout: float = 15.0) -> list[dict[str, Any]]:
    """The results of the next ``settled`` frame (an ``error`` frame fails the test)."""
    deadline = time.monotonic() + timeout
    while True:
        frame = orjson.loads(ws.recv(timeout=max(0.01, deadline - time.monotonic())))
        assert frame["type"] != "error", frame
        if frame["type"] == "settled":
            return frame["results"]  # type: ignore[no-any-return]


def ack(offset: int, delivery: int) -> dict[str, int]:
    return {"partition": 0, "offset": offset, "delivery": delivery}


def test_an_ack_right_after_a_restart_settles_the_recovered_lease(tmp_path: Path) -> None:
    with running_standalone(tmp_path / "data") as server:
        url = server.url
        with Admin(url) as admin:
            admin.create_topic("jobs", partitions=1)
            admin.create_subscription("restart", "jobs", ack_timeout_ms=ACK_TIMEOUT_MS, start="earliest")
        with Producer(url) as producer:
            for index in range(5):
                producer.send("jobs", value=f"j{index}".encode(), partition=0)
            producer.flush()
        leased: dict[int, int] = {}
        with connect(ws_url(url, "subscription=restart&window=5")) as ws:
            assert orjson.loads(ws.recv(timeout=10))["type"] == "hello"
            deadline = time.monotonic() + 15
            while len(leased) < 5 and time.monotonic() < deadline:
                frame = orjson.loads(ws.recv(timeout=15))
                leased.update((m["offset"], m["delivery"]) for m in frame.get("messages", ()))
            assert leased == dict.fromkeys(range(5), 1)
            server.kill()  # every lease is in the state snapshot: written before the messages left
        server.start()
        with connect(ws_url(url, "subscription=restart&window=5")) as ws:
            # At once, before even the hello is read: the coordinator has just loaded the snapshot and has
            # not read the topic yet. 0, 2 and 4 by their deliveries (0 twice, as a resend would); 1 by a
            # delivery it never had; 3 not at all.
            ws.send(orjson.dumps({"type": "ack", "messages": [ack(0, 1), ack(2, 1), ack(4, 1), ack(0, 1)]}).decode())
            results = settled(ws)
            assert [(r["offset"], r["status"]) for r in results] == [(0, "ok"), (2, "ok"), (4, "ok"), (0, "ok")]
            ws.send(orjson.dumps({"type": "ack", **ack(1, 5)}).decode())
            assert [r["status"] for r in settled(ws)] == ["stale"]
            # 1 and 3 come again once their leases run out, in order, as their second deliveries (and are
            # acknowledged at once); the acknowledged ones, whose leases ran out at the same time, never do.
            pushed: list[tuple[int, int]] = []
            statuses: list[str] = []
            deadline = time.monotonic() + ACK_TIMEOUT_MS / 1000 + 10
            while len(pushed) < 2 and (left := deadline - time.monotonic()) > 0:
                frame = orjson.loads(ws.recv(timeout=left))
                if frame["type"] == "messages":
                    got = [(m["offset"], m["delivery"]) for m in frame["messages"]]
                    pushed += got
                    ws.send(orjson.dumps({"type": "ack", "messages": [ack(*m) for m in got]}).decode())
                elif frame["type"] == "settled":
                    statuses += [r["status"] for r in frame["results"]]
            later = frames(ws, 3)
            pushed += [(m["offset"], m["delivery"]) for f in later if f["type"] == "messages" for m in f["messages"]]
            statuses += [r["status"] for f in later if f["type"] == "settled" for r in f["results"]]
            assert pushed == [(1, 2), (3, 2)]
            assert statuses == ["ok", "ok"]
        with Admin(url) as admin:
            partitions = admin.describe_subscription("restart")["partitions"]
        assert partitions == [{"partition": 0, "floor": 5, "read_to": 5, "unsettled": 0, "leased": 0}]
