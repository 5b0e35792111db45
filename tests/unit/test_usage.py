"""The usage meter (pure counting) and its records."""

from __future__ import annotations

import time

import orjson

from server.usage.meter import METRICS_TOPIC, UsageMeter, tenant_of, usage_records


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
