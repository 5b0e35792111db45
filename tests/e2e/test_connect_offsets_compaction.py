"""``__connect_offsets`` compacted by snapshots, and loads answered from the server's index (issue 22, part 4),
against a real ``talos standalone``: a load after many saves reads next to nothing of the partition (it read
all of it before), the owner's snapshots leave removed tasks removed, a restart rebuilds the latest state
from the log, and the topic gets a retention."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from server.connect_offsets import CONNECT_OFFSETS_TOPIC, RETENTION_MS, partition_of
from server.devservices import StandaloneServer, wait_until
from talos import Admin

pytestmark = pytest.mark.slow

# Maintenance every half second, and every connector with tasks is due for a snapshot in each pass.
ENV = {"TALOS_MAINTENANCE_INTERVAL_S": "0.5", "TALOS_CONNECT_OFFSETS_SNAPSHOT_INTERVAL_S": "0"}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[StandaloneServer]:
    instance = StandaloneServer(tmp_path / "data", env=ENV)
    try:
        yield instance.start()
    finally:
        instance.stop()


def _counter(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    found = re.search(rf'^{name}{{topic="{CONNECT_OFFSETS_TOPIC}"}} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def _records(url: str, connector: str) -> list[dict[str, Any]]:
    """Every record of the connector's partition, read as the admin (auth is off)."""
    out: list[dict[str, Any]] = []
    offset = 0
    base = f"{url}/v1/topics/{CONNECT_OFFSETS_TOPIC}/partitions/{partition_of(connector)}/messages"
    while True:
        page = httpx.get(base, params={"offset": offset, "max_messages": 10_000}, timeout=30).json()
        out.extend(page["messages"])
        if not page["messages"]:
            return out
        offset = page["next_offset"]


def _snapshots(url: str, connector: str) -> list[dict[str, Any]]:
    return [
        {"offset": r["offset"], **orjson.loads(r["value"])}
        for r in _records(url, connector)
        if r["key"] == connector and r["headers"].get("talos-connect") == "snapshot"
    ]


def test_a_load_after_many_saves_reads_next_to_nothing(server: StandaloneServer) -> None:
    with Admin(server.url) as admin:
        admin.save_connector_offsets("busy", "0", {"position": 0})
        assert admin.connector_offsets("busy") == {"0": {"position": 0}}  # the index is built
        written_before = _counter(server.url, "talos_bytes_in_total")
        for position in range(1, 401):
            admin.save_connector_offsets("busy", str(position % 4), {"position": position, "file": "x" * 40})
        history = _counter(server.url, "talos_bytes_in_total") - written_before
        read_before = _counter(server.url, "talos_bytes_out_total")
        loaded = admin.connector_offsets("busy")
        read = _counter(server.url, "talos_bytes_out_total") - read_before
    assert {task: doc["position"] for task, doc in loaded.items()} == {"0": 400, "1": 397, "2": 398, "3": 399}
    # Reading the partition from offset 0, as every load did before, reads at least the 400 saves' bytes.
    assert history > 20_000
    assert read < history / 20, f"the load read {read:.0f} bytes of __connect_offsets after {history:.0f} written"


def test_snapshots_keep_a_removed_task_removed(server: StandaloneServer) -> None:
    with Admin(server.url) as admin:
        for task in ("0", "1", "2"):
            admin.save_connector_offsets("tomb", task, {"position": int(task)})
        admin.save_connector_offsets("tomb", "1", None)
        tombstone = max(r["offset"] for r in _records(server.url, "tomb") if r["key"] == "tomb/1")
        wait_until(
            lambda: any(s["through"] > tombstone for s in _snapshots(server.url, "tomb")),
            timeout=30,
            what="a snapshot made after the tombstone",
        )
        newest = _snapshots(server.url, "tomb")[-1]
        assert newest["tasks"] == {"0": {"position": 0}, "2": {"position": 2}}
        assert admin.connector_offsets("tomb") == {"0": {"position": 0}, "2": {"position": 2}}
        admin.save_connector_offsets("tomb", "2", None)  # a tombstone after the snapshot wins over it
        assert admin.connector_offsets("tomb") == {"0": {"position": 0}}


def test_a_restart_rebuilds_the_latest_state_and_the_topic_has_a_retention(tmp_path: Path) -> None:
    instance = StandaloneServer(tmp_path / "data", env=ENV)
    try:
        instance.start()
        with Admin(instance.url) as admin:
            for position in range(30):
                admin.save_connector_offsets("kept", str(position % 3), {"position": position})
            admin.save_connector_offsets("kept", "1", None)
            wait_until(lambda: bool(_snapshots(instance.url, "kept")), timeout=30, what="a snapshot")
            admin.save_connector_offsets("kept", "0", {"position": 100})  # after the snapshot
            admin.save_connector_offsets("other", "0", {"position": 7})
            assert admin.describe_topic(CONNECT_OFFSETS_TOPIC).retention_ms == RETENTION_MS
        instance.stop()
        instance.start()  # same data directory and port
        with Admin(instance.url) as admin:
            assert admin.connector_offsets("kept") == {"0": {"position": 100}, "2": {"position": 29}}
            assert admin.connector_offsets("other") == {"0": {"position": 7}}
            assert admin.connector_offsets("never") == {}
    finally:
        instance.stop()
