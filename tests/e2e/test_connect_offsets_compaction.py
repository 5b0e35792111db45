"""``__connect_offsets`` on a compacted topic (issue 37; issue 22 kept it with snapshots and a retention), and
loads answered from the server's index, against a real ``talos standalone``: a load after many saves reads
next to nothing of the partition, compaction keeps the newest checkpoint of every task and a removed task
removed, a restart rebuilds the latest state from the log, and a topic made with a retention (before
compaction) is switched to compaction."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.connect_offsets import CONNECT_OFFSETS_TOPIC, partition_of
from server.devservices import StandaloneServer, wait_until
from talos import Admin

pytestmark = pytest.mark.slow

ENV = {"TALOS_MAINTENANCE_INTERVAL_S": "0.5"}


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


def _removed(url: str) -> float:
    """Records compaction removed by every pass of this server (the counter has no topic label)."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    found = re.search(r"^talos_compaction_records_removed_total (\S+)$", text, re.MULTILINE)
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


def _compact(url: str, connector: str) -> dict[str, Any]:
    answer = httpx.post(f"{url}/v1/topics/{CONNECT_OFFSETS_TOPIC}/partitions/{partition_of(connector)}/compact")
    assert answer.status_code == 200, answer.text
    report: dict[str, Any] = answer.json()
    return report


def test_compaction_keeps_the_newest_checkpoint_of_every_task_and_a_removed_task_removed(
    server: StandaloneServer,
) -> None:
    with Admin(server.url) as admin:
        admin.save_connector_offsets("tomb", "0", {"position": 0})
        # Small segments, so that the saves below are sealed and a pass may compact them.
        admin.alter_topic(CONNECT_OFFSETS_TOPIC, segment_bytes=1024)
        for position in range(60):
            admin.save_connector_offsets("tomb", str(position % 3), {"position": position})
        admin.save_connector_offsets("tomb", "1", None)
        for position in range(60, 90):  # more, so that the tombstone's segment is sealed too
            admin.save_connector_offsets("tomb", "0", {"position": position})
        _compact(server.url, "tomb")
        # The maintenance passes (every 0.5 s here) may have compacted part of it before this pass did.
        removed = _removed(server.url)
        assert removed > 50, f"compaction removed {removed:.0f} records"
        keys = [(r["key"], r["value"]) for r in _records(server.url, "tomb") if r["key"].startswith("tomb/")]
        assert len(keys) < 40, keys  # superseded checkpoints are gone from the log
        assert ("tomb/1\u0000", None) in keys  # the tombstone stays (delete.retention.ms: a day)
        assert admin.connector_offsets("tomb") == {"0": {"position": 89}, "2": {"position": 59}}
    server.stop()
    server.start()  # a new index, built from the compacted log
    with Admin(server.url) as admin:
        assert admin.connector_offsets("tomb") == {"0": {"position": 89}, "2": {"position": 59}}


def test_a_restart_rebuilds_the_latest_state_and_the_topic_is_compacted(tmp_path: Path) -> None:
    instance = StandaloneServer(tmp_path / "data", env=ENV)
    try:
        instance.start()
        with Admin(instance.url) as admin:
            for position in range(30):
                admin.save_connector_offsets("kept", str(position % 3), {"position": position})
            admin.save_connector_offsets("kept", "1", None)
            admin.save_connector_offsets("kept", "0", {"position": 100})
            admin.save_connector_offsets("other", "0", {"position": 7})
            topic = admin.describe_topic(CONNECT_OFFSETS_TOPIC)
            assert (topic.cleanup_policy, topic.retention_ms) == ("compact", None)
            # A topic made before compaction (with a retention): the next maintenance pass switches it.
            admin.alter_topic(CONNECT_OFFSETS_TOPIC, cleanup_policy="delete", retention_ms=7 * 86_400_000)
            wait_until(
                lambda: admin.describe_topic(CONNECT_OFFSETS_TOPIC).cleanup_policy == "compact",
                timeout=30,
                what="the switch to compaction",
            )
            assert admin.describe_topic(CONNECT_OFFSETS_TOPIC).retention_ms is None
        instance.stop()
        instance.start()  # same data directory and port
        with Admin(instance.url) as admin:
            assert admin.connector_offsets("kept") == {"0": {"position": 100}, "2": {"position": 29}}
            assert admin.connector_offsets("other") == {"0": {"position": 7}}
            assert admin.connector_offsets("never") == {}
    finally:
        instance.stop()
