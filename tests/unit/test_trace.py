"""Message trace, the pure parts and the index file: sampling, event records, the recorder's buffer, a
message's timeline, the SQLite index, and the CLI's formatting."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.trace.events import (
    TraceEvent,
    decode_event,
    encode_event,
    first_sampled,
    message_timeline,
    sampled,
    trace_partition,
)
from server.trace.index import PartitionIndex
from server.trace.recorder import TraceRecorder
from talos import Message, RecordData, encode_batch, set_base_offset
from talos._group import retry_record
from talos.cli._trace import format_timeline, parse_since

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_sampling_is_a_pure_function_of_the_message() -> None:
    assert not sampled("t", 0, 5, 0)
    assert all(sampled("t", 0, o, 1) for o in range(100))
    kept = [o for o in range(10_000) if sampled("t", 3, o, 100)]
    assert len(kept) == 100  # exactly one in N over a multiple of N
    assert kept == [o for o in range(10_000) if sampled("t", 3, o, 100)]  # the same every time


@pytest.mark.parametrize("sample", [1, 2, 7, 100])
def test_first_sampled_agrees_with_sampled(sample: int) -> None:
    for first in range(0, 300, 13):
        for last in (first, first + 1, first + 6, first + 150):
            expected = next((o for o in range(first, last + 1) if sampled("x", 1, o, sample)), None)
            assert first_sampled("x", 1, first, last, sample) == expected


def test_trace_partition_is_stable() -> None:
    assert trace_partition("orders", 2, 4) == trace_partition("orders", 2, 4)
    assert {trace_partition("orders", p, 4) for p in range(64)} == {0, 1, 2, 3}


def test_event_record_round_trip() -> None:
    event = TraceEvent("delivered", "orders", 1, 10, 19, 1234, 1, {"group": "g", "member": "m-1"})
    record = encode_event(event, "s1")
    assert record.key == b"orders:1" and record.timestamp == 1234
    decoded = decode_event(record.value or b"")
    assert decoded is not None
    assert (decoded.kind, decoded.first, decoded.last, decoded.fields) == (
        "delivered",
        10,
        19,
        {"group": "g", "member": "m-1", "server": "s1"},
    )
    assert decode_event(b"not json") is None
    assert decode_event(b'{"kind": "produced"}') is None


def _stored_batch(records: list[RecordData], base: int) -> bytearray:
    batch = bytearray(encode_batch(records, producer_id=7, producer_epoch=2, base_sequence=0))
    set_base_offset(batch, base)
    return batch


def test_recorder_reads_produced_batches_in_the_background() -> None:
    samples = {"orders": 1}
    recorder = TraceRecorder(lambda t: samples.get(t, 0))
    records = [
        RecordData(b"v0", b"k0", [("traceparent", TRACEPARENT.encode())]),
        RecordData(b"v1", None, []),
        RecordData(b"v2", b"k2", []),
    ]
    recorder.produced(
        "orders", 0, 40, 43, _stored_batch(records, 40), sample=1, tenant="acme", client="1.2.3.4:5", durable=True
    )
    recorder.record("orders", 0, 40, "delivered", last=42, group="g", member="m", subscriber=None)
    recorder.record("other", 0, 1, "delivered")  # not traced: nothing
    assert recorder.pending() == 2
    produced, delivered = recorder.take()
    assert recorder.pending() == 0
    assert (produced.kind, produced.first, produced.last) == ("produced", 40, 42)
    assert produced.fields["tenant"] == "acme" and produced.fields["client"] == "1.2.3.4:5"
    assert produced.fields["producer_id"] == 7 and produced.fields["durable_ts"] == produced.ts
    assert produced.messages == [{"offset": 40, "key": "k0", "traceparent": TRACEPARENT}, {"offset": 42, "key": "k2"}]
    assert delivered.fields == {"group": "g", "member": "m"}  # None fields are left out


def test_recorder_keeps_only_ranges_with_a_sampled_message_and_bounds_its_buffer() -> None:
    recorder = TraceRecorder(lambda t: 1000, max_buffered=2)
    unsampled = next(o for o in range(2000) if not sampled("t", 0, o, 1000))
    recorder.record("t", 0, unsampled, "committed")
    assert recorder.pending() == 0
    for _ in range(3):
        recorder.record("t", 0, 0, "committed", last=999)
    assert recorder.pending() == 2 and recorder.dropped == 1


def test_retry_and_dead_letter_records_become_events_of_the_original_message() -> None:
    recorder = TraceRecorder(lambda t: 1 if t == "orders" else 0)
    message = Message("orders", 2, 17, 0, b"k", b"v", ())
    topic, record = retry_record(message, group="billing", delay_s=1, reason="boom", max_retries=3, now_ms=0)
    assert topic == "__retry.billing"
    recorder.side_record(topic, 0, 5, _stored_batch([record], 5), tenant="acme")
    dead = Message("orders", 2, 17, 0, b"k", b"v", (("talos-attempt", b"3"),))
    topic, record = retry_record(dead, group="billing", delay_s=1, reason="gave up", max_retries=3, now_ms=0)
    recorder.side_record(topic, 0, 0, _stored_batch([record], 0), tenant="acme")
    retried, dead_lettered = recorder.take()
    assert (retried.kind, retried.topic, retried.partition, retried.first) == ("retried", "orders", 2, 17)
    assert retried.fields["to"] == "__retry.billing" and retried.fields["reason"] == "boom"
    assert dead_lettered.kind == "dead_lettered" and dead_lettered.fields["attempt"] == "4"


def test_timeline_folds_the_events_covering_a_message() -> None:
    produced = TraceEvent(
        "produced", "t", 0, 10, 12, 100, 1, {"tenant": "a"}, [{"offset": 11, "key": "k", "traceparent": TRACEPARENT}]
    )
    events = [
        TraceEvent("committed", "t", 0, 0, 12, 300, 1, {"group": "g"}),
        TraceEvent("delivered", "t", 0, 11, 11, 200, 1, {"group": "g"}),
        produced,
        produced,  # written twice (an idempotent resend): shown once
        TraceEvent("delivered", "t", 0, 20, 30, 150, 1, {}),  # another message
        TraceEvent("delivered", "t", 1, 11, 11, 150, 1, {}),  # another partition
    ]
    timeline = message_timeline(events, "t", 0, 11)
    assert [e["event"] for e in timeline["events"]] == ["produced", "delivered", "committed"]
    assert timeline["key"] == "k" and timeline["traceparent"] == TRACEPARENT
    assert timeline["events"][0]["range"] == [10, 12]
    lines = format_timeline(timeline)
    assert lines[0] == f"t/0@11  key=k  traceparent={TRACEPARENT}"
    assert "produced" in lines[1] and "tenant=a" in lines[1]


def test_index_finds_events_by_offset_and_key_and_survives_reopening(tmp_path: Path) -> None:
    path = str(tmp_path / "idx" / "p0.sqlite")
    index = PartitionIndex(path)
    big = 2**40  # past float32's exact integers: the R*Tree's rounding must not lose it
    events = [
        TraceEvent("produced", "t", 0, 0, 9, 1000, 1, {}, [{"offset": 3, "key": "k"}]),
        TraceEvent("committed", "t", 0, 0, 99, 2000, 1, {"group": "g"}),
        TraceEvent("produced", "t", 1, 0, 9, 1000, 1, {}, [{"offset": 3, "key": "k"}]),
        TraceEvent("produced", "t", 0, big, big, 3000, 1, {}),
        TraceEvent("produced", "t", 0, big + 1, big + 1, 3000, 1, {}),
    ]
    records = [(i, encode_event(e, "s").value) for i, e in enumerate(events)]
    assert index.add(records, len(records)) == len(events)
    assert [e.kind for e in index.events_at("t", 0, 3)] == ["produced", "committed"]
    assert [e.kind for e in index.events_at("t", 0, 50)] == ["committed"]
    assert [e.first for e in index.events_at("t", 0, big)] == [big]
    assert index.events_at("t", 5, 3) == []
    assert index.keyed("t", b"k", 0, 5000, 10) == [(0, 3), (1, 3)]
    assert index.keyed("t", b"k", 1500, 5000, 10) == []
    index.close()
    reopened = PartitionIndex(path)
    assert reopened.position == len(records)
    assert [e.kind for e in reopened.events_at("t", 0, 3)] == ["produced", "committed"]
    assert reopened.prune(1500) == 2
    assert [e.kind for e in reopened.events_at("t", 0, 3)] == ["committed"]
    reopened.clear(7)
    assert reopened.position == 7 and reopened.events_at("t", 0, 3) == []


def test_since_parses_durations_and_epoch_ms() -> None:
    assert parse_since("1h", 10_000_000) == 10_000_000 - 3_600_000
    assert parse_since("30m", 10_000_000) == 10_000_000 - 1_800_000
    assert parse_since("1700000000000", 0) == 1_700_000_000_000
