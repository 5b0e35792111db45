"""A group member's heartbeat thread outlives an answer it cannot read: the beat counts as failed and the next
one goes out, so the member goes on holding its partitions (a dead heartbeat thread would leave it holding
nothing and reading nothing, for good, with no error anywhere)."""

from __future__ import annotations

import threading
from collections.abc import Mapping

import orjson

from server.devservices import wait_until
from talos import Consumer, Response
from talos._transport import FunctionTransport

GRANTED = {
    "member_id": "m-1",
    "generation": 1,
    "session_timeout_ms": 10_000,
    "heartbeat_interval_ms": 50,
    "assignment": [{"topic": "t", "partition": 0, "generation": 1}],
}


class ScriptedGroup:
    """Answers the group's calls; the second heartbeat gets a body without its member id."""

    def __init__(self) -> None:
        self.heartbeats = 0
        self.lock = threading.Lock()

    def __call__(self, method: str, url: str, params: Mapping[str, str | int], body: bytes | None) -> Response:
        if url.endswith("/heartbeat"):
            with self.lock:
                self.heartbeats += 1
                garbled = self.heartbeats == 2
            return Response(200, {}, b'{"assignment": []}' if garbled else orjson.dumps(GRANTED))
        if url.endswith("/members"):
            return Response(200, {}, orjson.dumps(GRANTED))
        if "/offsets" in url:
            return Response(200, {}, orjson.dumps({"offsets": [{"topic": "t", "partition": 0, "offset": 0}]}))
        if "/messages" in url:
            return Response(200, {"x-talos-next-offset": "0"}, b"")
        return Response(200, {}, b"{}")


def test_an_unreadable_heartbeat_answer_does_not_end_the_heartbeats() -> None:
    group = ScriptedGroup()
    with Consumer("http://scripted", group="g", topics=["t"], transport=FunctionTransport(group)) as consumer:
        wait_until(lambda: group.heartbeats >= 5, timeout=10, what="heartbeats after the unreadable answer")
        consumer.poll(0.1)
        assert consumer.assignment == [("t", 0)]
