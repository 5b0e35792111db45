"""Swift's write protocol in the SDK, against a scripted partition: accepted is not durable until the
checkpoint passes it, and what a reload lost is sent again, in order, exactly once."""

from __future__ import annotations

from collections.abc import Mapping

import orjson
import pytest

from talos import AsyncFunctionTransport, FunctionTransport, Producer, RecordData, Response, decode_records
from talos._accumulator import PendingBatch
from talos._window import PartitionWindow


class ScriptedPartition:
    """One partition with a durable part and an in-memory part; ``reload()`` loses the memory and starts
    a new session, as a crash of the owner would."""

    def __init__(self, *, flush_every: int, reload_after: list[int]) -> None:
        self.durable: list[bytes] = []
        self.memory: list[bytes] = []
        self.session = 1
        self.ends = {0: 0}  # session → how far it got durable
        self.flush_every = flush_every
        self.reload_after = reload_after
        self.batches = 0
        self.refused = 0

    def reload(self) -> None:
        self.ends[self.session] = len(self.durable)
        self.memory.clear()
        self.session += 1

    def flush(self) -> None:
        self.durable += self.memory
        self.memory.clear()

    def __call__(self, method: str, url: str, params: Mapping[str, str | int], body: bytes | None) -> Response:
        if url.endswith("/v1/routes"):
            return Response(200, {}, orjson.dumps({"mode": "standalone", "topics": {"t": [{"partition": 0}]}}))
        if url.endswith("/offsets"):
            self.flush()
            answer = {"latest": len(self.durable), "session": self.session}
            if "session" in params:
                answer["session_end"] = self.ends.get(int(params["session"]), len(self.durable))
            return Response(200, {}, orjson.dumps(answer))
        assert body is not None and params["acks"] == "accepted"
        if "session" in params and int(params["session"]) != self.session:
            self.refused += 1
            end = self.ends[int(params["session"])]
            error = {"code": "SESSION_CHANGED", "message": "moved", "retriable": True, "session": self.session}
            return Response(409, {}, orjson.dumps({"error": {**error, "session_end": end}}))
        values = [r.value or b"" for r in decode_records(body)]
        base = len(self.durable) + len(self.memory)
        self.memory += values
        self.batches += 1
        if self.batches % self.flush_every == 0:
            self.flush()
        result = {"offset": base, "count": len(values), "durable_offset": len(self.durable), "session": self.session}
        if self.batches in self.reload_after:
            self.reload()
        return Response(200, {}, orjson.dumps({"results": [{"partition": 0, **result}]}))


def test_a_reload_loses_what_was_not_durable_and_the_producer_sends_it_again() -> None:
    partition = ScriptedPartition(flush_every=3, reload_after=[4, 11])
    with Producer(
        "http://scripted", acks="accepted", transport=FunctionTransport(partition), linger_ms=0, batch_bytes=40
    ) as producer:
        futures = []
        for i in range(60):
            futures.append(producer.send("t", f"m{i:02d}".encode(), partition=0))
            if i % 5 == 4:
                producer.flush()  # several batches, each accepted before the next
        producer.wait_durable(timeout=10)
        offsets = [f.result(timeout=1).offset for f in futures]
    assert partition.refused >= 2, "the scripted reloads must have been noticed"
    expected = [f"m{i:02d}".encode() for i in range(60)]
    assert partition.durable == expected  # everything, in order, once
    assert offsets == list(range(60))  # each future has the offset where the record finally is


def test_futures_resolve_only_once_durable() -> None:
    partition = ScriptedPartition(flush_every=1000, reload_after=[])
    producer = Producer("http://scripted", acks="accepted", transport=FunctionTransport(partition), linger_ms=0)
    try:
        future = producer.send("t", b"x", partition=0)
        producer.flush()  # accepted (Swift's waitSent) ...
        assert partition.memory == [b"x"] and not future.done()  # ... but not durable yet
        producer.wait_durable(timeout=5)
        assert future.result(timeout=1).offset == 0 and partition.durable == [b"x"]
    finally:
        producer.close()


def test_window_confirms_by_checkpoint_and_resends_after_the_old_sessions_end() -> None:
    window = PartitionWindow()
    batches = [PendingBatch[None]("t", 0, 0.0, records=[RecordData(b"x")] * 10) for _ in range(4)]
    assert window.accepted(batches[0], 0, 10, 0, session=1) == []
    assert [e.batch for e in window.accepted(batches[1], 10, 20, 10, session=1)] == [batches[0]]
    window.accepted(batches[2], 20, 30, 10, session=1)
    window.accepted(batches[3], 30, 40, 10, session=1)
    # Session 1 got durable up to 20 before the reload; the new session's checkpoint is already 45
    # (another producer wrote), which must not count as ours.
    confirmed, resend = window.moved(2, old_session_end=20)
    assert [e.batch for e in confirmed] == [batches[1]]
    assert resend == [batches[2], batches[3]]
    assert window.session == 2 and window.empty


@pytest.mark.slow
def test_the_asyncio_twin_resends_what_a_reload_lost() -> None:
    import asyncio

    from talos import AsyncProducer

    partition = ScriptedPartition(flush_every=3, reload_after=[4, 9])

    async def scenario() -> list[int]:
        producer = AsyncProducer(
            "http://scripted", acks="accepted", transport=AsyncFunctionTransport(partition), linger_ms=0, batch_bytes=40
        )
        futures = []
        for i in range(40):
            futures.append(await producer.send("t", f"m{i:02d}".encode(), partition=0))
            if i % 5 == 4:
                await producer.flush()
        await producer.wait_durable(timeout=10)
        await producer.close()
        return [(await f).offset for f in futures]

    offsets = asyncio.run(scenario())
    assert partition.refused >= 2
    assert partition.durable == [f"m{i:02d}".encode() for i in range(40)]
    assert offsets == list(range(40))
