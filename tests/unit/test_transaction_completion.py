"""A decided transaction is completed even when its coordinator's shard loads again while the markers are being
retried: the task of the older load stops (superseded), and the state the new load read back gets its own.
Before, the older load's task was reused, stopped, and the decision stayed prepared for good: its partitions'
last stable offset held, and read-committed readers waited forever (the campaign's delay-and-loss run)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from fencing import StorageError
from server.broker import Broker
from server.config import ServerConfig
from server.topics import TopicConfig
from server.transactions import coordinator as coordinator_module
from server.transactions.coordinator import TransactionCoordinator
from server.transactions.records import TRANSACTION_STATE_TOPIC, partition_of


def test_a_decision_completes_after_its_shard_reloads_mid_markers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    markers_pass = asyncio.Event()
    tries: list[int] = []
    real_write_marker = coordinator_module.write_marker

    async def slow_owner(*args: Any, **kwargs: Any) -> dict[str, Any]:
        tries.append(1)
        if not markers_pass.is_set():
            raise ConnectionError("the partition's owner does not answer yet")
        return await real_write_marker(*args, **kwargs)

    monkeypatch.setattr(coordinator_module, "write_marker", slow_owner)
    monkeypatch.setattr(coordinator_module, "_INLINE_COMPLETION_S", 0.2)
    monkeypatch.setattr(coordinator_module, "_MARKER_RETRY_S", (0.05,))

    async def scenario() -> dict[str, Any]:
        broker = await Broker.start(ServerConfig(storage=str(tmp_path / "data")))
        coordinator = TransactionCoordinator(broker)
        broker.transaction_verifier = coordinator
        try:
            await broker.create_topic(TopicConfig(name="t", partitions=1))
            pid, epoch = await coordinator.init(None, "tx", timeout_ms=60_000)
            await coordinator.add_partitions(None, "tx", pid, epoch, [("t", 0)])
            await coordinator.end(None, "tx", pid, epoch, commit=True, bump=True)  # decided; markers retried
            assert (await coordinator.describe(None, "tx"))["state"] == "PrepareCommit"
            shard = await broker.partition(TRANSACTION_STATE_TOPIC, partition_of(None, "tx"))
            shard.abandon(StorageError("a flush failed"))  # the state partition loads again on this server
            await coordinator.maintain()  # takes the shard up again: the decision it reads back is retried
            while len(tries) < 3:
                await asyncio.sleep(0.05)  # the older load's task has noticed by now, and stopped
            markers_pass.set()
            for _ in range(100):
                described = await coordinator.describe(None, "tx")
                if described["state"] != "PrepareCommit":
                    return described
                await asyncio.sleep(0.05)
            return described
        finally:
            await broker.close()

    assert asyncio.run(scenario())["state"] == "CompleteCommit"
