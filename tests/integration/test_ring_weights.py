"""Ring weights from metered traffic: the ring keeper (real ZooKeeper) reads the last day's per-partition
traffic from the metering store (a DuckDB file) and publishes a reweighted ring that balances it."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from hashring import imbalance, partition_key
from metering.duckdb_store import DuckDbStore
from metering.store import MinuteUsage
from server.cluster import daily_traffic
from server.coordination import RingKeeper, ServerRegistry
from tests.integration.conftest import Connect
from tests.integration.test_coordination import wait_for_ring


def skewed_usage(store: DuckDbStore, partitions: int = 400) -> None:
    ranks = list(range(1, partitions + 1))
    random.Random(7).shuffle(ranks)
    minute = int(time.time() * 1000) // 60_000 * 60_000 - 3_600_000
    rows = [
        MinuteUsage(minute, "acme", "orders", p, int(10_000_000 / rank**0.9), 1, 0, 0, 1, 0, 1.0, 1.0)
        for p, rank in enumerate(ranks)
    ]
    store.ingest(rows, {0: 1})


@pytest.mark.slow
def test_the_ring_keeper_weights_the_ring_by_metered_traffic(connect: Connect, tmp_path: Path) -> None:
    store_path = tmp_path / "usage.duckdb"
    skewed_usage(DuckDbStore(store_path))
    traffic = daily_traffic(str(store_path))
    rates = traffic()
    assert len(rates) == 400 and rates[partition_key("orders", 0)] > 0
    for name in ("s1", "s2", "s3", "s4"):
        ServerRegistry(connect()).register(name, f"http://{name}")
    plain = wait_for_ring(RingKeeper(connect(), join_delay=0.2, reassign_delay=5.0), {"s1", "s2", "s3", "s4"})
    keeper = RingKeeper(connect(), join_delay=0.2, reassign_delay=5.0, traffic=traffic, reweigh_every_s=0.0)
    weighted = keeper.tick()
    before, after = imbalance(plain, rates).ratio, imbalance(weighted, rates).ratio
    print(f"metered traffic max/mean over 4 servers: plain ring {before:.3f} -> weighted {after:.3f}")
    assert weighted.version == plain.version + 1
    assert len(set(weighted.members.values())) > 1  # vnode counts now differ by traffic
    assert after < before and after <= 1.10
    assert keeper.tick() == weighted  # balanced now: nothing more to publish
