"""The usage meter (pure counting) and its records."""

from __future__ import annotations

import time

import orjson

from server.messaging.fetch import messages_from
from server.usage.meter import METRICS_TOPIC, UsageMeter, tenant_of, usage_records
from talos import RecordData, encode_batch, set_base_offset


def test_the_meter_sums_per_key_and_skips_its_own_topic() -> None:
    meter = UsageMeter()
    started = time.monotonic()
    meter.record(("acme", "orders", 1), started=started, sizes={"bytes_in": 10, "messages_in": 2})
    meter.record(("acme", "orders", 1), started=started, sizes={"bytes_out": 7, "messages_out": 1})
    meter.record(("acme", "orders", 1), started=started, error=True)
    meter.record(("acme", METRICS_TOPIC, 0), started=started, sizes={"bytes_in": 99})
    counts = meter.take()
    assert list(counts) == [("acme", "orders", 1)]
    usage = counts[("acme", "orders", 1)]
    assert (usage.bytes_in, usage.messages_in, usage.bytes_out, usage.messages_out) == (10, 2, 7, 1)
    assert (usage.requests, usage.errors) == (3, 1)
    assert usage.latency_ms_max <= usage.latency_ms_sum
    assert meter.take() == {}


def test_a_produce_counted_without_sizes_is_counted_as_with_them() -> None:
    started = time.monotonic() - 0.05
    by_sizes, direct = UsageMeter(), UsageMeter()
    for meter in (by_sizes, direct):
        meter.record(("acme", "orders", 0), started=started, sizes={"bytes_out": 5, "messages_out": 1})
    by_sizes.record(("acme", "orders", 0), started=started, sizes={"bytes_in": 170, "messages_in": 1})
    direct.produced(("acme", "orders", 0), started=started, size=170, messages=1)
    direct.produced(("acme", METRICS_TOPIC, 0), started=started, size=99, messages=1)  # not metered, as record
    (a,), (b,) = by_sizes.take().values(), direct.take().values()
    assert (a.bytes_in, a.messages_in, a.bytes_out, a.messages_out, a.requests, a.errors) == (170, 1, 5, 1, 2, 0)
    assert (b.bytes_in, b.messages_in, b.bytes_out, b.messages_out, b.requests, b.errors) == (170, 1, 5, 1, 2, 0)
    assert b.latency_ms_max >= 50 and b.latency_ms_sum >= 100


def test_records_name_the_window_and_the_key() -> None:
    meter = UsageMeter()
    meter.record(("default", "t", 0), started=time.monotonic(), sizes={"messages_in": 5})
    [record] = usage_records("s1", 1000, 2000, meter.take())
    doc = orjson.loads(record.value or b"")
    assert (doc["server"], doc["tenant"], doc["topic"], doc["partition"], doc["messages_in"]) == (
        "s1",
        "default",
        "t",
        0,
        5,
    )
    assert (doc["window_start_ms"], doc["window_end_ms"], record.timestamp, record.key) == (1000, 2000, 2000, b"s1")
    assert tenant_of({"x-talos-tenant": "acme"}) == "acme" and tenant_of({}) == "default"


def _stored(*counts: int, base: int = 0) -> bytearray:
    """Batches of ``counts`` records, at consecutive offsets from ``base``, in one buffer (a storage read)."""
    buffer = bytearray()
    for count in counts:
        batch = bytearray(encode_batch([RecordData(b"v%d" % n) for n in range(count)]))
        set_base_offset(batch, base)
        buffer += batch
        base += count
    return buffer


def test_a_fetch_meters_every_message_it_sends_on_from_the_offset() -> None:
    storage_read = _stored(3, 4, 5, base=10)  # offsets 10..21, one buffer
    assert messages_from([storage_read], 10) == 12
    assert messages_from([storage_read], 14) == 8  # the second batch from its second message, and the third
    tail_cache = [_stored(2, base=22), _stored(6, base=24)]  # one buffer per batch
    assert messages_from(tail_cache, 22) == 8
    assert messages_from([storage_read, *tail_cache], 21) == 9
    assert messages_from([], 0) == 0
    assert messages_from([storage_read + b"\x00" * 7], 10) == 12  # a torn tail ends the count, not the request
