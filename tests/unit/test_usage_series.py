"""``usage_series`` on the embedded store: a real DuckDB file, rows ingested the way the metering job does,
and every expected sum worked out independently in Python from the same rows."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from metering.duckdb_store import DuckDbStore
from metering.store import SERIES_COUNTERS, MinuteUsage, Window

MINUTE = 60_000
# A multiple of five minutes (and of an hour), so 5-minute steps start at T0 and the test can name them.
T0 = 1_800_000_000_000 - 1_800_000_000_000 % 3_600_000
TENANTS = ("acme", "globex")
TOPICS = ("orders", "payments")
PARTITIONS = (0, 1, 2)
MINUTES = 12  # T0 .. T0 + 11 min: two whole 5-minute steps and a partial third


def _row(minute: int, tenant: str, topic: str, partition: int) -> MinuteUsage:
    # Distinct values per dimension, so a sum that drops or double-counts a row cannot come out right.
    base = minute * 1000 + TENANTS.index(tenant) * 100 + TOPICS.index(topic) * 10 + partition + 1
    return MinuteUsage(
        T0 + minute * MINUTE, tenant, topic, partition, base, base + 1, 2 * base, base + 2, base + 3, base % 3, 1.5, 2.0
    )


ROWS = [_row(m, te, to, p) for m in range(MINUTES) for te in TENANTS for to in TOPICS for p in PARTITIONS]


def _expected(
    rows: list[MinuteUsage], window: Window, step_ms: int, tenant: str | None = None, topic: str | None = None
) -> list[dict[str, object]]:
    sums: dict[tuple[int, str], dict[str, int]] = defaultdict(lambda: dict.fromkeys(SERIES_COUNTERS, 0))
    for r in rows:
        if not window.start_ms <= r.minute_ms < window.end_ms:
            continue
        if (tenant is not None and r.tenant != tenant) or (topic is not None and r.topic != topic):
            continue
        step = sums[(r.minute_ms // step_ms * step_ms, r.topic)]
        for c in SERIES_COUNTERS:
            step[c] += getattr(r, c)
    return [{"time_ms": t, "topic": to, **sums[(t, to)]} for t, to in sorted(sums)]


def _n(value: object) -> int:
    assert type(value) is int
    return value


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> DuckDbStore:
    s = DuckDbStore(tmp_path_factory.mktemp("metering") / "usage.duckdb")
    # Two micro-batches, as the job writes them.
    half = len(ROWS) // 2
    s.ingest(ROWS[:half], {0: 10})
    s.ingest(ROWS[half:], {0: 20})
    return s


EVERYTHING = Window(T0, T0 + MINUTES * MINUTE)


def test_one_minute_steps_sum_over_partitions_and_tenants(store: DuckDbStore) -> None:
    series = store.usage_series(EVERYTHING)
    assert len(series) == MINUTES * len(TOPICS)
    assert series == _expected(ROWS, EVERYTHING, MINUTE)
    first = series[0]
    assert list(first) == ["time_ms", "topic", *SERIES_COUNTERS]
    assert (first["time_ms"], first["topic"]) == (T0, "orders")
    # Minute 0, "orders": bytes_in is sum over tenants (+0, +100) and partitions (1, 2, 3) of base.
    assert first["bytes_in"] == (1 + 2 + 3) + (101 + 102 + 103)
    assert all(type(row[c]) is int for row in series for c in ("time_ms", *SERIES_COUNTERS))  # not HUGEINT/Decimal


def test_five_minute_steps(store: DuckDbStore) -> None:
    series = store.usage_series(EVERYTHING, step_ms=5 * MINUTE)
    assert [(r["time_ms"], r["topic"]) for r in series] == [
        (T0 + s * 5 * MINUTE, topic) for s in range(3) for topic in TOPICS
    ]
    assert series == _expected(ROWS, EVERYTHING, 5 * MINUTE)
    # A 5-minute step holds five 1-minute steps, whatever the counter.
    minutes = store.usage_series(EVERYTHING)
    for c in SERIES_COUNTERS:
        assert series[0][c] == sum(_n(r[c]) for r in minutes[:10] if r["topic"] == "orders")


def test_the_last_step_is_partial_and_empty_steps_are_absent(store: DuckDbStore) -> None:
    series = store.usage_series(Window(T0, T0 + 60 * MINUTE), step_ms=5 * MINUTE)
    assert sorted({_n(r["time_ms"]) for r in series}) == [T0, T0 + 5 * MINUTE, T0 + 10 * MINUTE]
    # Minutes 10 and 11 only.
    orders = [r for r in series if r["topic"] == "orders"]
    assert orders[-1]["messages_in"] == sum(
        r.messages_in for r in ROWS if r.topic == "orders" and r.minute_ms >= T0 + 10 * MINUTE
    )
    assert store.usage_series(Window(T0 - 60 * MINUTE, T0)) == []


def test_tenant_filter(store: DuckDbStore) -> None:
    series = store.usage_series(EVERYTHING, tenant="globex", step_ms=5 * MINUTE)
    assert series == _expected(ROWS, EVERYTHING, 5 * MINUTE, tenant="globex")
    assert series != _expected(ROWS, EVERYTHING, 5 * MINUTE)  # the filter took something away
    assert store.usage_series(EVERYTHING, tenant="initech") == []


def test_topic_filter(store: DuckDbStore) -> None:
    series = store.usage_series(EVERYTHING, topic="payments")
    assert {r["topic"] for r in series} == {"payments"}
    assert series == _expected(ROWS, EVERYTHING, MINUTE, topic="payments")
    both = store.usage_series(EVERYTHING, tenant="acme", topic="payments", step_ms=5 * MINUTE)
    assert both == _expected(ROWS, EVERYTHING, 5 * MINUTE, tenant="acme", topic="payments")
    # A filter value is bound, not pasted into the SQL: a quote is just part of a name that matches nothing.
    assert store.usage_series(EVERYTHING, topic="orders' OR '1'='1") == []


def test_window_is_start_inclusive_end_exclusive(store: DuckDbStore) -> None:
    window = Window(T0 + 3 * MINUTE, T0 + 7 * MINUTE)  # minutes 3, 4, 5, 6
    minutes = store.usage_series(window)
    assert sorted({_n(r["time_ms"]) for r in minutes}) == [T0 + m * MINUTE for m in (3, 4, 5, 6)]
    assert minutes == _expected(ROWS, window, MINUTE)


def test_steps_align_to_the_epoch_not_to_the_window(store: DuckDbStore) -> None:
    # The window starts at minute 3: the first 5-minute step still starts at T0 (holding minutes 3 and 4 only),
    # and the next at T0 + 5 min (holding 5 and 6), not at the window's start.
    window = Window(T0 + 3 * MINUTE, T0 + 7 * MINUTE)
    series = store.usage_series(window, step_ms=5 * MINUTE)
    assert [r["time_ms"] for r in series] == [T0, T0, T0 + 5 * MINUTE, T0 + 5 * MINUTE]
    assert series == _expected(ROWS, window, 5 * MINUTE)
    orders = series[0]
    assert orders["requests"] == sum(
        r.requests for r in ROWS if r.topic == "orders" and T0 + 3 * MINUTE <= r.minute_ms < T0 + 5 * MINUTE
    )
    # A 7-minute step is aligned to multiples of 7 minutes since 1970, whatever the hour.
    seven = store.usage_series(EVERYTHING, step_ms=7 * MINUTE)
    assert all(_n(r["time_ms"]) % (7 * MINUTE) == 0 for r in seven)
    assert seven == _expected(ROWS, EVERYTHING, 7 * MINUTE)


@pytest.mark.parametrize("step_ms", [0, -MINUTE, 30_000, 90_000, MINUTE + 1])
def test_a_step_that_is_not_whole_minutes_is_refused(store: DuckDbStore, step_ms: int) -> None:
    with pytest.raises(ValueError, match="multiple of 60000"):
        store.usage_series(EVERYTHING, step_ms=step_ms)


def test_a_fresh_file_answers_nothing(tmp_path: Path) -> None:
    assert DuckDbStore(tmp_path / "empty.duckdb").usage_series(EVERYTHING) == []
