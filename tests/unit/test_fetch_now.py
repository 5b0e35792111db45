"""Fetch without an await (``FastPath.answer_now`` of a fetch, ``messages.fetch_now``), against a real standalone
broker on a temporary directory: what the tail cache holds is answered at once, the same bytes the task path
answers, metered once; a JSON page reads (and bills) only the batches its messages need; everything that needs an
await (a read of the storage, read-committed, a rate quota, a compressed batch to decode, a bad parameter) is
declined with nothing metered, so the task path decides it; a long poll at the end waits without a task, woken by
the partition's next flush or answered with nothing once its wait is over."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from server.broker import Broker
from server.config import ServerConfig
from server.http import messages
from server.http.fastpath import Declined, FastPath, HeadMemo, route
from server.messaging.caller import Caller
from server.messaging.forwarder import BATCH_CONTENT_TYPE
from server.messaging.produce import produce_batch, produce_records
from server.peers import Reply
from server.topics import TopicConfig
from talos import RecordData, encode_batch
from talos._compression import Codec

ADMIN = Caller()
HOT = route("GET", "/v1/topics/t/partitions/0/messages")


def _run(tmp_path: Path, scenario: Callable[[Broker, FastPath], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        broker = await Broker.start(ServerConfig(storage=str(tmp_path / "data")))
        try:
            await broker.create_topic(TopicConfig(name="t", partitions=1))
            for i in range(5):  # five batches of one message each
                record = RecordData(f"m{i}".encode(), None, [], None)
                await produce_records(broker, ADMIN, "t", {0: [(0, record)]}, producer={}, durable=True)
            broker.usage.take()
            return await scenario(broker, FastPath(None, lambda: broker))  # type: ignore[arg-type]
        finally:
            await broker.close()

    return asyncio.run(main())


def _now(
    fast: FastPath, query: str, *, accept: str | None = None, waited: bool = False
) -> Reply | messages.FetchWait | Declined:
    raw = [(b"host", b"x")] + ([(b"accept", accept.encode())] if accept else [])
    answer = fast.answer_now(HOT, raw, b"", client=None, memo=HeadMemo(), raw_query=query.encode(), waited=waited)
    assert not isinstance(answer, messages.PendingReply)
    return answer


def _counts(broker: Broker) -> dict[Any, tuple[int, int, int, int]]:
    """What the meter counted since it was last taken, but the latencies."""
    return {k: (u.bytes_out, u.messages_out, u.requests, u.errors) for k, u in broker.usage.take().items()}


async def _task_path(broker: Broker, query: dict[str, str], accept: str | None = None) -> Reply:
    return await messages.fetch(broker, ADMIN, "t", 0, accept, query)


def test_cached_messages_are_answered_at_once_as_the_task_path_answers_them(tmp_path: Path) -> None:
    async def scenario(broker: Broker, fast: FastPath) -> None:
        for query, accept in (("offset=1&max_messages=2", None), ("offset=3", BATCH_CONTENT_TYPE), ("offset=5", None)):
            now = _now(fast, query, accept=accept)
            assert isinstance(now, Reply), query
            metered = _counts(broker)
            task = await _task_path(broker, dict(p.split("=") for p in query.split("&")), accept)
            assert (now.status, now.body, now.content_type, now.headers) == (
                task.status,
                task.body,
                task.content_type,
                task.headers,
            )
            assert _counts(broker) == metered  # metered once each, the same way
        page = orjson.loads(_now(fast, "offset=1&max_messages=2").body)  # type: ignore[union-attr]
        assert [m["value"] for m in page["messages"]] == ["m1", "m2"] and page["next_offset"] == 3
        empty = orjson.loads(_now(fast, "offset=5").body)  # type: ignore[union-attr]
        assert (empty["messages"], empty["next_offset"], empty["high_watermark"]) == ([], 5, 5)

    _run(tmp_path, scenario)


def test_a_json_page_reads_and_bills_only_the_batches_its_messages_need(tmp_path: Path) -> None:
    async def scenario(broker: Broker, fast: FastPath) -> None:
        assert isinstance(_now(fast, "offset=0&max_messages=2"), Reply)
        (usage,) = broker.usage.take().values()
        assert usage.messages_out == 2
        assert isinstance(_now(fast, "offset=0", accept=BATCH_CONTENT_TYPE), Reply)  # the batches, up to max_bytes
        (usage,) = broker.usage.take().values()
        assert usage.messages_out == 5

    _run(tmp_path, scenario)


def test_what_needs_an_await_is_declined_and_nothing_is_metered(tmp_path: Path) -> None:
    async def scenario(broker: Broker, fast: FastPath) -> None:
        loaded = broker.loaded_now("t", 0)
        assert loaded is not None
        declined = (
            "offset=0&isolation=read_committed",
            "offset=6",  # out of range: the task path answers 416
            "offset=x",  # the task path answers 400
            "max_messages=1",  # no offset
        )
        for query in declined:
            assert isinstance(_now(fast, query), Declined), query
        loaded.tail.clear()  # evicted: a read of the storage
        assert isinstance(_now(fast, "offset=0"), Declined)
        compressed = bytearray(encode_batch([RecordData(b"z" * 200, None, [], None)], compression=Codec.GZIP))
        await produce_batch(broker, ADMIN, "t", 0, compressed)
        assert isinstance(_now(fast, "offset=5"), Declined)  # JSON: decompressed on the read pool
        assert isinstance(_now(fast, "offset=5", accept=BATCH_CONTENT_TYPE), Reply)  # binary: as stored
        broker.usage.take()
        state = broker.security.state.create_tenant("slow", 0)
        broker.security.state = state.set_quota("slow", None, {"fetch_bytes_per_s": 1e9})
        assert isinstance(_now(fast, "offset=5", accept=BATCH_CONTENT_TYPE), Declined)  # a rate quota: paid
        assert isinstance(_now(fast, "offset=6&wait_ms=100"), Declined)  # nor does it wait here
        for query in declined:
            assert isinstance(_now(fast, query), Declined)
        assert broker.usage.take() == {}

    _run(tmp_path, scenario)


def test_a_long_poll_at_the_end_waits_for_the_next_flush_or_its_deadline(tmp_path: Path) -> None:
    async def scenario(broker: Broker, fast: FastPath) -> None:
        loop = asyncio.get_running_loop()
        wait = _now(fast, "offset=5&wait_ms=100")
        assert isinstance(wait, messages.FetchWait)
        assert wait.partition is broker.loaded_now("t", 0)
        assert 0.05 < wait.deadline - loop.time() <= 0.1
        assert broker.usage.take() == {}  # nothing answered: nothing metered yet
        woken: list[str] = []
        wait.partition.when_data(lambda: woken.append("first"))
        wait.partition.when_data(lambda: woken.append("second"))
        gone = lambda: woken.append("gone")  # noqa: E731
        wait.partition.when_data(gone)
        wait.partition.forget_waiting(gone)  # a long poll that ended first (its deadline, its client gone)
        record = RecordData(b"m5", None, [], None)
        await produce_records(broker, ADMIN, "t", {0: [(0, record)]}, producer={}, durable=True)
        await asyncio.sleep(0)
        assert woken == ["first", "second"]  # once each, in order, after the flush
        page = orjson.loads(_now(fast, "offset=5&wait_ms=100").body)  # type: ignore[union-attr]
        assert [m["value"] for m in page["messages"]] == ["m5"]
        over = _now(fast, "offset=6&wait_ms=100", waited=True)  # the deadline passed: what there is, nothing
        assert isinstance(over, Reply) and orjson.loads(over.body)["messages"] == []
        await broker.close()
        stopped: list[str] = []
        wait.partition.when_data(lambda: stopped.append("stopped"))  # the partition stopped: at once
        await asyncio.sleep(0)
        assert stopped == ["stopped"]

    _run(tmp_path, scenario)


def test_a_long_poll_declined_after_waiting_waits_only_what_is_left_on_the_task_path(tmp_path: Path) -> None:
    """A poll that waited without a task and is then declined (a rate quota set meanwhile, its partition stopped)
    is taken over by the task path: it waits until the end of its first wait, not a whole ``wait_ms`` again."""

    async def scenario(broker: Broker, fast: FastPath) -> None:
        loop = asyncio.get_running_loop()
        query = {"offset": "5", "wait_ms": "20000"}
        started = loop.time()
        page = await messages.fetch(broker, ADMIN, "t", 0, None, query, wait_until=started + 0.3)
        waited = loop.time() - started
        assert orjson.loads(page.body)["messages"] == []
        assert 0.25 <= waited < 5, waited
        started = loop.time()
        over = await messages.fetch(broker, ADMIN, "t", 0, None, query, wait_until=started - 1)  # its end passed
        assert orjson.loads(over.body)["messages"] == [] and loop.time() - started < 1
        late = asyncio.create_task(messages.fetch(broker, ADMIN, "t", 0, None, query, wait_until=loop.time() + 10))
        await asyncio.sleep(0.1)
        record = RecordData(b"m5", None, [], None)
        await produce_records(broker, ADMIN, "t", {0: [(0, record)]}, producer={}, durable=True)
        page = await asyncio.wait_for(late, 5)  # still woken by the next message
        assert [m["value"] for m in orjson.loads(page.body)["messages"]] == ["m5"]

    _run(tmp_path, scenario)
