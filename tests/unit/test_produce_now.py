"""Produce without an await (``produce_records_now``, ``LoadedPartition.produce_now``), against a real standalone
broker on a temporary directory: the common single-message produce is appended before the call returns and
answered once its group is durable, as ``produce_records`` answers it; everything that needs an await (a
partition to load, a quota to charge, a compacted topic's key check, an idempotent producer) is declined with
nothing stored or charged, so the full path decides it; and a failed flush reaches the pending produce as the
retriable error a waiting request gets."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from fencing import StorageError
from server.broker import Broker
from server.config import ServerConfig
from server.errors import ApiError
from server.messaging.caller import Caller
from server.messaging.produce import produce_records, produce_records_now
from server.topics import TopicConfig
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

        # A quota applies to the tenant: admission charges it, and may hold the request.
        state = broker.security.state.create_tenant("acme", 0).create_tenant("fetcher", 0).create_tenant("free", 0)
        state = state.set_quota("acme", None, {"requests_per_s": 1000.0})
        broker.security.state = state.set_quota("fetcher", None, {"fetch_bytes_per_s": 1000.0})
        assert produce_records_now(broker, Caller(tenant="acme"), "t", 0, [_record(b"x")]) is None
        assert broker.security.limited("acme", "t", "produce")
        assert not broker.security._buckets  # nothing was charged
        # A tenant without a quota, or with a limit on fetches only, is not held: the produce is appended.
        for tenant in ("free", "fetcher"):
            assert not broker.security.limited(tenant, "t", "produce")
            assert produce_records_now(broker, Caller(tenant=tenant), "t", 0, [_record(b"y")]) is not None
            end += 1

        # An idempotent producer's batch: its sequence and epoch are checked on the full path.
        batch = bytearray(encode_batch([_record(b"z")], producer_id=7, producer_epoch=0, base_sequence=0))
        assert loaded.produce_now(batch, read_header(batch, whole=False)) is None

        # A compacted topic: every record needs a key, which the full path checks.
        loaded.keys_required = True
        assert produce_records_now(broker, ADMIN, "t", 0, [_record(b"keyless")]) is None
        loaded.keys_required = False
        assert loaded.log.next_offset == end

    _run(tmp_path, scenario)


def test_whether_a_quota_applies_follows_every_change_of_the_state(tmp_path: Path) -> None:
    """``Security.limited`` answers at once while no quota limits a rate, and looks again whenever the security
    state is replaced: a rate set on a tenant or a topic applies to the next request, and stops when removed."""

    async def scenario(broker: Broker) -> None:
        security = broker.security
        security.state = security.state.create_tenant("acme", 0).set_quota("acme", None, {"partitions": 4})
        assert not security.limited("acme", "t", "produce")  # a partition limit is not a rate
        security.state = security.state.set_quota(None, "t", {"produce_bytes_per_s": 1e6})
        assert security.limited("acme", "t", "produce") and security.limited("other", "t", "produce")
        assert not security.limited("acme", "t", "fetch") and not security.limited("acme", "u", "produce")
        security.state = security.state.set_quota(None, "t", {"produce_bytes_per_s": None})
        assert not security.limited("acme", "t", "produce")
        security.state = security.state.set_quota("acme", None, {"requests_per_s": 10.0})
        assert security.limited("acme", "u", "fetch") and not security.limited("other", "u", "fetch")

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
