"""Produce without an await (``produce_records_now``, ``LoadedPartition.produce_now``), against a real standalone
broker on a temporary directory: the common single-message produce is appended before the call returns and
answered once its group is durable, as ``produce_records`` answers it; a quota with room is charged as the full
path charges it; everything that needs an await (a partition to load, a quota that would hold the request, a
compacted topic's key check, an idempotent producer) is declined with nothing stored or charged, so the full path
decides it; and a failed flush reaches the pending produce as the retriable error a waiting request gets."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import pytest

from fencing import StorageError
from server.broker import Broker
from server.config import ServerConfig
from server.errors import ApiError
from server.http.fastpath import FastPath, HeadMemo, route
from server.messaging.caller import Caller
from server.messaging.produce import produce_records, produce_records_now
from server.peers import Reply
from server.topics import TopicConfig
from server.web import ASGIApp
from talos import RecordData, decode_batches, encode_batch, read_header

ADMIN = Caller()


def _run(tmp_path: Path, scenario: Callable[[Broker], Awaitable[Any]], **config: Any) -> Any:
    async def main() -> Any:
        broker = await Broker.start(ServerConfig(storage=str(tmp_path / "data"), **config))
        try:
            await broker.create_topic(TopicConfig(name="t", partitions=2))
            return await scenario(broker)
        finally:
            await broker.close()

    return asyncio.run(main())


def _record(value: bytes) -> RecordData:
    return RecordData(value, None, [], None)


def test_a_record_has_its_offset_when_the_call_returns_and_its_answer_once_durable(tmp_path: Path) -> None:
    async def scenario(broker: Broker) -> None:
        await produce_records(broker, ADMIN, "t", {0: [(0, _record(b"loaded"))]}, producer={}, durable=True)
        loaded = broker.loaded_now("t", 0)
        assert loaded is not None
        pending = produce_records_now(broker, ADMIN, "t", 0, [_record(b"now")])
        assert pending is not None
        assert loaded.log.next_offset == 2  # appended before any await
        assert not pending.durable.done()  # the flush has not run: nothing is answered yet
        await pending.durable
        answer = pending.result()
        assert (answer.base_offset, answer.next_offset, answer.durable_offset) == (1, 2, 2)
        assert answer.session == loaded.log.epoch and not answer.duplicate
        fetched = await loaded.fetch(1, 1 << 20, 0)
        values = [r.value for b in fetched.batches for d in decode_batches(b) for r in d.records if r.offset >= 1]
        assert values == [b"now"]

    _run(tmp_path, scenario)


def test_what_needs_an_await_is_declined_and_nothing_is_stored_or_charged(tmp_path: Path) -> None:
    async def scenario(broker: Broker) -> None:
        # Not loaded yet: taking the partition over is the full path's.
        assert broker.loaded_now("t", 1) is None
        assert produce_records_now(broker, ADMIN, "t", 1, [_record(b"x")]) is None
        assert broker.loaded_now("t", 1) is None

        await produce_records(broker, ADMIN, "t", {0: [(0, _record(b"first"))]}, producer={}, durable=True)
        loaded = broker.loaded_now("t", 0)
        assert loaded is not None
        end = loaded.log.next_offset

        # A quota that would hold the request (its bytes would put the bucket in debt): the full path holds it.
        state = broker.security.state.create_tenant("tight", 0).create_tenant("fetcher", 0).create_tenant("free", 0)
        state = state.set_quota("tight", None, {"produce_bytes_per_s": 1000.0})
        broker.security.state = state.set_quota("fetcher", None, {"fetch_bytes_per_s": 1000.0})
        tight = Caller(tenant="tight")
        assert produce_records_now(broker, tight, "t", 0, [_record(b"room")]) is not None  # room: charged here
        end += 1
        sized = broker.security._buckets[("tenant", "tight", "produce_bytes_per_s")]
        sized.tokens = 10.0  # less than the next batch
        assert produce_records_now(broker, tight, "t", 0, [_record(b"x")]) is None
        assert sized.tokens == pytest.approx(10.0, abs=1.0)  # nothing was charged
        # A tenant without a quota, or with a limit on fetches only, is appended and charged nothing.
        charged = {key: bucket.tokens for key, bucket in broker.security._buckets.items()}
        for tenant in ("free", "fetcher"):
            assert produce_records_now(broker, Caller(tenant=tenant), "t", 0, [_record(b"y")]) is not None
            end += 1
        assert {key: bucket.tokens for key, bucket in broker.security._buckets.items()} == charged

        # An idempotent producer's batch: its sequence and epoch are checked on the full path.
        batch = bytearray(encode_batch([_record(b"z")], producer_id=7, producer_epoch=0, base_sequence=0))
        assert loaded.produce_now(batch, read_header(batch, whole=False)) is None

        # A compacted topic: every record needs a key, which the full path checks.
        loaded.keys_required = True
        assert produce_records_now(broker, ADMIN, "t", 0, [_record(b"keyless")]) is None
        loaded.keys_required = False
        assert loaded.log.next_offset == end

    _run(tmp_path, scenario)


def test_a_quota_with_room_is_charged_here_and_refunded_if_the_log_refuses(tmp_path: Path) -> None:
    """A quota whose buckets have room is charged without an await: the request once and its bytes, exactly as
    ``admit`` and ``pay`` charge them; a bucket in debt is a 429 with nothing stored; a batch the log then
    refuses gets its charge back; and whether any rate applies is looked at again whenever the state changes."""

    async def scenario(broker: Broker) -> None:
        await produce_records(broker, ADMIN, "t", {0: [(0, _record(b"first"))]}, producer={}, durable=True)
        loaded = broker.loaded_now("t", 0)
        assert loaded is not None
        security = broker.security
        security.state = security.state.create_tenant("acme", 0).set_quota("acme", None, {"partitions": 4})
        acme = Caller(tenant="acme")
        assert produce_records_now(broker, acme, "t", 0, [_record(b"a")]) is not None
        assert not security._buckets  # a partition limit is not a rate: no bucket at all

        security.state = security.state.set_quota("acme", None, {"requests_per_s": 100.0, "produce_bytes_per_s": 1e6})
        pending = produce_records_now(broker, acme, "t", 0, [_record(b"b")])
        assert pending is not None
        requests = security._buckets[("tenant", "acme", "requests_per_s")]
        sized = security._buckets[("tenant", "acme", "produce_bytes_per_s")]
        assert requests.rate - requests.tokens == pytest.approx(1, abs=0.01)
        assert sized.rate - sized.tokens == pytest.approx(len(encode_batch([_record(b"b")])), abs=0.5)

        end = loaded.log.next_offset
        requests.tokens = -50.0  # in debt: refused, nothing stored
        with pytest.raises(ApiError) as refused:
            produce_records_now(broker, acme, "t", 0, [_record(b"c")])
        assert (refused.value.status, refused.value.retriable) == (429, True)
        assert loaded.log.next_offset == end
        # Through the HTTP edge's no-await path, a request (or a repeated head) gets the 429 as its answer.
        fast = FastPath(cast(ASGIApp, None), lambda: broker)
        head = [(b"x-talos-tenant", b"acme"), (b"content-type", b"application/json")]
        hot = route("POST", "/v1/topics/t/partitions/0/messages")
        assert hot is not None
        answer = fast.answer_now(hot, head, b'{"messages":[{"value":"c"}]}', client=None, memo=HeadMemo())
        assert isinstance(answer, Reply) and answer.status == 429 and b"QUOTA_EXCEEDED" in answer.body
        assert loaded.log.next_offset == end

        requests.tokens, sized.tokens = 100.0, 1e6
        broken = loaded.log.append

        def refuse(*_: object, **__: object) -> tuple[int, int]:
            raise StorageError("append refused (test)")

        loaded.log.append = refuse  # type: ignore[method-assign]
        assert produce_records_now(broker, acme, "t", 0, [_record(b"d")]) is None
        loaded.log.append = broken  # type: ignore[method-assign]
        assert (requests.tokens, sized.tokens) == (pytest.approx(100.0), pytest.approx(1e6))  # given back

        security.state = security.state.set_quota("acme", None, {"requests_per_s": None, "produce_bytes_per_s": None})
        before = dict(security._buckets)
        assert produce_records_now(broker, acme, "t", 0, [_record(b"e")]) is not None
        assert (requests.tokens, sized.tokens) == (pytest.approx(100.0), pytest.approx(1e6))  # no rate: no charge
        assert security._buckets == before

    _run(tmp_path, scenario)


def test_group_commit_off_declines(tmp_path: Path) -> None:
    async def scenario(broker: Broker) -> None:
        await produce_records(broker, ADMIN, "t", {0: [(0, _record(b"first"))]}, producer={}, durable=True)
        assert produce_records_now(broker, ADMIN, "t", 0, [_record(b"x")]) is None  # each request its own flush

    _run(tmp_path, scenario, group_commit=False)


def test_a_failed_flush_answers_the_pending_produce_with_a_retriable_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario(broker: Broker) -> ApiError:
        await produce_records(broker, ADMIN, "t", {0: [(0, _record(b"first"))]}, producer={}, durable=True)
        loaded = broker.loaded_now("t", 0)
        assert loaded is not None

        def failing() -> int:
            raise StorageError("the disk went away")

        monkeypatch.setattr(loaded.log, "flush", failing)
        pending = produce_records_now(broker, ADMIN, "t", 0, [_record(b"lost")])
        assert pending is not None
        with pytest.raises(StorageError):
            await pending.durable
        with pytest.raises(ApiError) as refused:
            pending.result()
        return refused.value

    error = _run(tmp_path, scenario)
    assert error.status == 503 and error.retriable and error.code == "STORAGE_ERROR"
