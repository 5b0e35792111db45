"""The campaign's /healthz watch (tests.netfaults.cluster.HealthWatch) on a fake cluster: a silent server is
recorded with the length of its silence, an excused one (cut from the clients on purpose) is not, and the
campaign's Markdown report gets the longest silence per server."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.netfaults.cluster import HealthWatch
from tests.netfaults.connectors import CONNECTORS
from tests.netfaults.test_campaign import write_report


class _Process:
    def __init__(self) -> None:
        self.running = True

    def alive(self) -> bool:
        return self.running


class _Cluster:
    """What HealthWatch uses of a NetCluster: ``servers`` (with ``alive()``) and ``get``."""

    def __init__(self) -> None:
        self.servers = {name: _Process() for name in ("s1", "s2", "s3")}
        self.silent: set[str] = set()
        self.asked: dict[str, int] = dict.fromkeys(self.servers, 0)
        self._lock = threading.Lock()

    def get(self, server: str, path: str, *, timeout: float = 5.0) -> dict[str, object]:
        assert path == "/healthz"
        with self._lock:
            self.asked[server] += 1
        if server in self.silent:
            time.sleep(timeout)
            raise TimeoutError("timed out")
        return {"status": "ok"}


def test_a_silent_server_is_recorded_and_an_excused_one_is_not() -> None:
    cluster = _Cluster()
    watch = HealthWatch(cluster, timeout_s=0.2, interval_s=0.05)  # type: ignore[arg-type]
    with watch:
        time.sleep(0.3)
        began = time.monotonic()
        cluster.silent.add("s2")
        time.sleep(0.7)
        cluster.silent.discard("s2")
        with watch.excuse("s3"):
            cluster.silent.add("s3")
            time.sleep(0.6)
            asked = cluster.asked["s3"]
            time.sleep(0.3)
            assert cluster.asked["s3"] == asked, "an excused server is not asked"
            cluster.silent.discard("s3")
        time.sleep(0.3)
        cluster.servers["s1"].running = False  # crashed: not asked, not silent
        cluster.silent.add("s1")
        time.sleep(0.5)
    longest = watch.longest_s()
    assert longest["s1"] == 0.0 and longest["s3"] == 0.0
    assert 0.6 <= longest["s2"] <= 1.2
    [silence] = watch.report(since=began)
    assert silence["server"] == "s2" and silence["asks"] >= 2 and "TimeoutError" in str(silence["error"])
    assert 0.0 <= float(str(silence["began_s"])) <= 0.3
    assert silence["open"] is False
    assert all(count > 5 for count in watch.asks.values())


def test_a_silence_still_on_at_the_end_is_counted_to_the_end() -> None:
    cluster = _Cluster()
    cluster.silent.add("s1")
    with HealthWatch(cluster, timeout_s=0.1, interval_s=0.05) as watch:  # type: ignore[arg-type]
        time.sleep(0.5)
    assert 0.4 <= watch.longest_s()["s1"] <= 0.8


def test_the_report_has_the_longest_silence_per_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "campaign.json"
    monkeypatch.setenv("TALOS_CAMPAIGN_REPORT", str(target))
    result: dict[str, Any] = {
        "lost": 0,
        "acknowledged": 100,
        "duplicated": 0,
        "offset_conflicts": 0,
        "unwritable": {"0": {"longest_s": 1.5, "total_s": 2.0}},
        "owner": "s3",
        "owner_partitions": [0],
        "consumer_missed": 0,
        "connectors": {kind: {"lost": 0, "duplicates": 0, "stalled_s": 0.5} for kind in CONNECTORS},
        "healthz_longest_silence_s": {"s1": 0.0, "s2": 2.4, "s3": 0.0},
        "healthz_excused": "s3",
    }
    write_report({"a fault": result})
    assert json.loads(target.read_text())["a fault"]["healthz_longest_silence_s"]["s2"] == 2.4
    header, rule, row = target.with_suffix(".md").read_text().splitlines()
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert header.count("|") == rule.count("|") == row.count("|")
    assert cells[columns.index("longest /healthz silence s")] == "s1 0.0 / s2 2.4 / s3 0.0*"
    assert cells[-3:] == ["-", "-", "-"]  # no transaction checker in this run: its three columns are empty
