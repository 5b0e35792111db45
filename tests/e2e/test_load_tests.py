"""The Locust runner against a real server: each scenario runs headless for two seconds, prints its
summary (requests/s, failures, p50/p95/p99) and leaves the CSVs."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from server.devservices import StandaloneServer

pytestmark = pytest.mark.serial  # load generators measured against the clock

RUNNER = Path(__file__).resolve().parents[2] / "load_tests" / "locust_run.py"


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["produce", "consume", "mixed"])
def test_a_scenario_runs_headless_and_reports(server: StandaloneServer, scenario: str, tmp_path: Path) -> None:
    flags = ["--scenario", scenario, "--seconds", "2", "--users", "8", "--prefill", "500", "--topic", "locust"]
    run = subprocess.run(
        [sys.executable, str(RUNNER), "--url", server.url, *flags, "--csv-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = {line.split()[0]: line.split() for line in run.stdout.splitlines() if line.strip()}
    assert lines["request"] == ["request", "count", "failures", "req/s", "p50", "ms", "p95", "ms", "p99", "ms"]
    expected = {"produce": {"produce"}, "consume": {"fetch"}, "mixed": {"produce", "fetch"}}[scenario]
    for name in expected | {"all"}:
        count, failures = int(lines[name][1]), int(lines[name][2])
        assert count > 0 and failures == 0
    stats = next(tmp_path.glob(f"{scenario}-*_stats.csv"))
    rows = {row["Name"]: row for row in csv.DictReader(stats.open())}
    assert set(rows) == expected | {"Aggregated"}
    assert float(rows["Aggregated"]["Requests/s"]) > 0
    assert next(tmp_path.glob(f"{scenario}-*_stats_history.csv")).stat().st_size > 0


@pytest.mark.slow
def test_the_push_benchmark_measures_both_paths_in_one_run() -> None:
    bench = RUNNER.parent / "push_bench.py"
    run = subprocess.run(
        [sys.executable, str(bench), "--latency-messages", "50", "--messages", "500", "--json"],
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    results = json.loads(run.stdout.splitlines()[-1])
    for path in ("latency_push", "latency_consumer"):
        assert results[path]["received"] == 50  # every message arrived on both paths
        assert set(results[path]["from_ack"]) == {"p50_ms", "p99_ms", "max_ms"}
    assert results["throughput"]["messages"] == 500
    assert results["throughput"]["subscriber_msgs_per_s"] > 0 and results["throughput"]["consumer_msgs_per_s"] > 0
