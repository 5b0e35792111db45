"""``Producer.send_many`` (and the asyncio twin's) against a topic kept in memory behind a FunctionTransport:
where each record goes, in what order, what the one future answers, how failures and idempotent sequences
come out; and a batch's records section built from ``send`` and ``send_many`` records in any order. Each test
runs with the pure-Python record codec and with the compiled one."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from talos import (
    AsyncFunctionTransport,
    AsyncProducer,
    FunctionTransport,
    InvalidRequestError,
    Producer,
    RecordData,
    Response,
    decode_records,
    partition_for_key,
    validate_batch,
)
from talos._accumulator import PendingBatch
from talos._codec import Record, build_batch
from tests.unit.test_window import ScriptedPartition

pytestmark = pytest.mark.usefixtures("codec_implementation")

PARTITIONS = 4


class Topic:
    """Topic "t" in memory: each batch is validated, its records stored at the partition's end, its offsets
    answered. Batches for a partition in ``failing`` get a 400 (not retriable)."""

    def __init__(self, *, failing: frozenset[int] = frozenset()) -> None:
        self.stored: dict[int, list[Record]] = {p: [] for p in range(PARTITIONS)}
        self.sequences: dict[int, list[tuple[int, int, int]]] = {p: [] for p in range(PARTITIONS)}
        self.failing = failing

    def __call__(self, method: str, url: str, params: Mapping[str, str | int], body: bytes | None) -> Response:
        if url.endswith("/v1/routes"):
            topics = {"t": [{"partition": p} for p in range(PARTITIONS)]}
            return Response(200, {}, orjson.dumps({"mode": "standalone", "topics": topics}))
        if url.endswith("/v1/producers"):
            return Response(200, {}, orjson.dumps({"producer_id": 7, "producer_epoch": 3}))
        partition = int(url.split("/partitions/")[1].split("/", maxsplit=1)[0])
        assert body is not None
        header = validate_batch(body)
        if partition in self.failing:
            error = {"code": "INVALID_REQUEST", "message": f"partition {partition} refuses"}
            return Response(400, {}, orjson.dumps({"error": error}))
        self.sequences[partition].append((header.producer_epoch, header.base_sequence, header.record_count))
        base = len(self.stored[partition])
        self.stored[partition] += decode_records(body)
        result = {"partition": partition, "offset": base, "count": header.record_count, "durable_offset": 0}
        return Response(200, {}, orjson.dumps({"results": [result]}))

    def at(self, partition: int, offset: int) -> Record:
        return self.stored[partition][offset]


def test_values_keep_their_order_and_the_future_lists_where_each_went() -> None:
    topic = Topic()
    values: list[bytes | str | None] = [b"a", "b", None, b"", "\u00e9"]
    with Producer("http://t", transport=FunctionTransport(topic), linger_ms=60_000) as producer:
        future = producer.send_many("t", values, partition=2)
        assert not future.done()  # lingering: nothing is sent before a flush
        producer.flush()
        metadata = future.result(timeout=5)
    assert [(m.topic, m.partition, m.offset) for m in metadata] == [("t", 2, i) for i in range(5)]
    assert [r.value for r in topic.stored[2]] == [b"a", b"b", None, b"", "\u00e9".encode()]
    assert all(r.key is None and r.headers == () for r in topic.stored[2])


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=8)), st.binary(max_size=200)), max_size=120),
    st.integers(60, 2_000),
)
def test_each_record_goes_where_send_would_put_it_in_order(pairs: list[tuple[bytes | None, bytes]], batch: int) -> None:
    """Keyed records to their key's partition, unkeyed ones to the sticky partition (moving on as batches fill);
    within a partition the order given; the answer maps every record to the place it was stored."""
    topic = Topic()
    with Producer("http://t", transport=FunctionTransport(topic), linger_ms=1, batch_bytes=batch) as producer:
        metadata = producer.send_many("t", pairs).result(timeout=10)
    assert len(metadata) == len(pairs)
    for (key, value), place in zip(pairs, metadata, strict=True):
        record = topic.at(place.partition, place.offset)
        assert (record.key, record.value) == (key, value)
        if key is not None:
            assert place.partition == partition_for_key(key, PARTITIONS)
    for partition in range(PARTITIONS):
        given_order = [i for i, m in enumerate(metadata) if m.partition == partition]
        assert [metadata[i].offset for i in given_order] == list(range(len(given_order)))
    assert sum(len(records) for records in topic.stored.values()) == len(pairs)


def test_unkeyed_records_move_on_to_another_partition_when_a_batch_fills() -> None:
    topic = Topic()
    with Producer("http://t", transport=FunctionTransport(topic), batch_bytes=10 * 116) as producer:
        metadata = producer.send_many("t", [b"x" * 100] * 40).result(timeout=10)
    used = [p for p in range(PARTITIONS) if topic.stored[p]]
    assert len(used) == PARTITIONS  # 4 batches of 10: one per partition, sent side by side
    assert [m.partition for m in metadata[:10]] == [metadata[0].partition] * 10


def test_records_with_headers_and_timestamps_keep_them() -> None:
    topic = Topic()
    records = [
        RecordData(b"h", b"k", [("trace", b"1")]),
        (b"k", b"plain"),
        RecordData(b"t", timestamp=1_000),
        b"v",
    ]
    with Producer("http://t", transport=FunctionTransport(topic)) as producer:
        metadata = producer.send_many("t", records, partition=1).result(timeout=5)
    stored = topic.stored[1]
    assert [m.offset for m in metadata] == [0, 1, 2, 3]
    assert [(r.key, r.value, r.headers) for r in stored] == [
        (b"k", b"h", (("trace", b"1"),)),
        (b"k", b"plain", ()),
        (None, b"t", ()),
        (None, b"v", ()),
    ]
    assert stored[2].timestamp == 1_000


def test_send_and_send_many_share_a_batch_in_the_order_queued() -> None:
    topic = Topic()
    with Producer("http://t", transport=FunctionTransport(topic), linger_ms=60_000) as producer:
        first = producer.send("t", b"a", partition=0, timestamp=5)
        many = producer.send_many("t", [b"b", b"c"], partition=0)
        middle = producer.send("t", b"d", partition=0, headers={"h": "x"})
        more = producer.send_many("t", [(b"k", b"e")], partition=0)
        last = producer.send("t", b"f", partition=0)
        producer.flush()
        offsets = [first.result(1).offset, *(m.offset for m in many.result(1)), middle.result(1).offset]
        offsets += [m.offset for m in more.result(1)] + [last.result(1).offset]
    assert offsets == [0, 1, 2, 3, 4, 5]
    assert len(topic.sequences[0]) == 1  # one batch
    stored = topic.stored[0]
    assert [r.value for r in stored] == [b"a", b"b", b"c", b"d", b"e", b"f"]
    assert stored[0].timestamp == 5
    assert len({r.timestamp for r in stored[1:]}) == 1  # the others: the time the batch was opened
    assert stored[3].headers == (("h", b"x"),) and stored[4].key == b"k"


def test_a_failed_batch_fails_the_call_with_the_first_records_error() -> None:
    topic = Topic(failing=frozenset({partition_for_key(b"bad", PARTITIONS)}))
    good = next(k for k in (b"a", b"b", b"c", b"d", b"e") if partition_for_key(k, PARTITIONS) not in topic.failing)
    with Producer("http://t", transport=FunctionTransport(topic)) as producer:
        future = producer.send_many("t", [(good, b"1"), (b"bad", b"2"), (good, b"3")])
        error = future.exception(timeout=5)
        assert isinstance(error, InvalidRequestError)
        with pytest.raises(InvalidRequestError):
            future.result()
        called: list[object] = []
        future.add_done_callback(called.append)  # already done: called at once
        assert called == [future]
    assert [r.value for r in topic.stored[partition_for_key(good, PARTITIONS)]] == [b"1", b"3"]  # the others stored


def test_idempotent_sequences_count_records_across_send_many_batches() -> None:
    topic = Topic()
    with Producer("http://t", transport=FunctionTransport(topic), idempotent=True, batch_bytes=5 * 17) as producer:
        producer.send("t", b"s", partition=3).result(timeout=5)
        producer.send_many("t", [b"m"] * 12, partition=3).result(timeout=5)  # batches of 5, 5 and 2
        producer.send("t", b"t", partition=3).result(timeout=5)
    assert topic.sequences[3] == [(3, 0, 1), (3, 1, 5), (3, 6, 5), (3, 11, 2), (3, 13, 1)]


def test_with_acks_accepted_a_call_is_answered_once_durable_and_a_reload_resends_it() -> None:
    partition = ScriptedPartition(flush_every=3, reload_after=[4, 11])
    transport = FunctionTransport(partition)
    with Producer("http://s", acks="accepted", transport=transport, linger_ms=0, batch_bytes=40) as producer:
        calls = []
        for start in range(0, 60, 5):  # 5 records a call, 2 a batch
            calls.append(producer.send_many("t", [f"m{i:02d}".encode() for i in range(start, start + 5)], partition=0))
            producer.flush()
        producer.wait_durable(timeout=10)
        offsets = [m.offset for call in calls for m in call.result(timeout=1)]
    assert partition.refused >= 2, "the scripted reloads must have been noticed"
    assert partition.durable == [f"m{i:02d}".encode() for i in range(60)]  # everything, in order, once
    assert offsets == list(range(60))


def test_send_many_waits_for_room_and_everything_arrives() -> None:
    topic = Topic()
    values = [bytes([i % 256]) * 100 for i in range(300)]
    with Producer("http://t", transport=FunctionTransport(topic), buffer_bytes=2_000, batch_bytes=500) as producer:
        metadata = producer.send_many("t", values, partition=0).result(timeout=10)
    assert [r.value for r in topic.stored[0]] == values
    assert [m.offset for m in metadata] == list(range(300))


def test_nothing_is_queued_for_a_call_that_is_refused() -> None:
    topic = Topic()
    with Producer("http://t", transport=FunctionTransport(topic)) as producer:
        with pytest.raises(ValueError, match=r"partitions 0\.\.3"):
            producer.send_many("t", [b"a"], partition=4)
        with pytest.raises(TypeError, match="int"):
            producer.send_many("t", [b"a", 7])  # type: ignore[list-item]
        assert producer.send_many("t", []).result(timeout=1) == []
        producer.flush()
    assert all(not records for records in topic.stored.values())


def test_the_asyncio_twin_answers_the_whole_call_with_one_future() -> None:
    topic = Topic()
    keyed = partition_for_key(b"k", PARTITIONS)

    async def scenario() -> list[tuple[int, int]]:
        async with AsyncProducer("http://t", transport=AsyncFunctionTransport(topic), batch_bytes=300) as producer:
            future = await producer.send_many("t", [(b"k", b"v" * 50)] * 10 + [b"u"])
            single = await producer.send("t", b"w", key=b"k")
            metadata = await future
            places = [(m.partition, m.offset) for m in metadata]
            assert (await single).offset == sum(1 for p, _ in places if p == keyed)  # after the call's records
            return places

    places = asyncio.run(scenario())
    assert places[:10] == [(keyed, i) for i in range(10)]
    assert [r.value for r in topic.stored[keyed]][:10] == [b"v" * 50] * 10


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.builds(RecordData, st.binary(max_size=20), st.none(), st.just(()), st.integers(-(2**40), 2**40)),
            st.builds(RecordData, st.binary(max_size=20), st.binary(max_size=4), st.just([("h", b"v")])),
            st.tuples(st.one_of(st.none(), st.binary(max_size=4)), st.binary(max_size=20)),
            st.lists(st.tuples(st.none(), st.binary(max_size=20)), min_size=1, max_size=4),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_a_batch_built_from_send_and_send_many_records_decodes_in_order(items: list[object]) -> None:
    """``send``'s records (as objects with a timestamp or headers, or plain) and ``send_many``'s chunks in any
    order: one records section, the first and largest timestamps right, every record's own timestamp kept."""
    batch = PendingBatch[None]("t", 0, 0.0, timestamp=10**12)
    expected: list[tuple[bytes | None, bytes | None, int]] = []
    for item in items:
        if isinstance(item, RecordData):
            batch.add_record(item)
            expected.append((item.key, item.value, batch.timestamp if item.timestamp is None else item.timestamp))
        elif isinstance(item, tuple):
            batch.add_value(*item)
            expected.append((*item, batch.timestamp))
        else:
            assert isinstance(item, list)
            assert batch.append_values([k for k, _ in item], [v for _, v in item]) == len(expected)
            expected += [(k, v, batch.timestamp) for k, v in item]
        assert batch.count == len(expected)
    body, first, largest = batch.section()
    decoded = decode_records(build_batch(body, batch.count, first, largest))
    assert [(r.key, r.value, r.timestamp) for r in decoded] == expected
    assert (first, largest) == (expected[0][2], max(t for _, _, t in expected))


def test_a_record_the_encoder_refuses_fails_its_batch_not_the_calls_after_it() -> None:
    topic = Topic()
    with Producer("http://t", transport=FunctionTransport(topic), linger_ms=60_000) as producer:
        bad = producer.send("t", b"x", partition=0, headers=[(b"name", b"v")])  # type: ignore[list-item]
        same_batch = [producer.send("t", b"a", partition=0), producer.send_many("t", [b"b"], partition=0)]
        producer.flush()
        assert isinstance(bad.exception(timeout=5), AttributeError)  # bytes have no .encode()
        assert all(isinstance(future.exception(timeout=5), AttributeError) for future in same_batch)
        after = producer.send("t", b"c", partition=0)
        producer.flush()
        assert after.result(timeout=5).offset == 0  # the next batch is fine
    assert [r.value for r in topic.stored[0]] == [b"c"]
