"""The auth benchmark runs end to end, short: it starts its servers (this tree's, and a baseline tree's), takes
turns between them, prints its table and writes its JSON. Sanity of the figures only, never a timing threshold."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.serial  # a benchmark: its figures are measured against the clock

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "load_tests" / "auth_bench.py"
CASES = ["off", "on", "before-on", "quota", "before-quota"]


@pytest.mark.slow
def test_the_auth_benchmark_compares_with_a_baseline_tree(tmp_path: Path) -> None:
    # A copy of this tree's code stands in for the older checkout; the benchmark must run the copy's server
    baseline = tmp_path / "baseline"
    for package in ("talos", "server", "fencing", "hashring", "metering", "connectors"):
        shutil.copytree(ROOT / package, baseline / package, ignore=shutil.ignore_patterns("__pycache__"))
    output = tmp_path / "auth.json"
    flags = ["--seconds", "1", "--rounds", "2", "--baseline-tree", str(baseline), "--json", str(output)]
    run = subprocess.run(
        [sys.executable, str(BENCH), *flags],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    rows = {fields[0]: fields for fields in map(str.split, run.stdout.splitlines()) if len(fields) == 7}
    for case in CASES:
        producer_rate, json_rate = float(rows[case][1].replace(",", "")), float(rows[case][4].replace(",", ""))
        assert producer_rate > 0 and json_rate > 0, rows[case]
    assert "on / before-on" in run.stdout and "on / off" in run.stdout

    result = json.loads(output.read_text())
    assert list(result["cases"]) == CASES
    assert result["cases"]["before-on"]["tree"] == str(baseline)
    for case in result["cases"].values():
        for load in ("producer", "json"):
            assert len(case[load]["rounds"]) == 2
            median = case[load]["median"]
            assert median["rate"] > 0 and 0 < median["p50_ms"] <= median["p99_ms"]
    assert set(result["ratios"]) == {"on / off", "quota / off", "on / before-on", "quota / before-quota"}
    for ratio in result["ratios"].values():
        assert all(math.isfinite(value) and value > 0 for value in ratio.values())


@pytest.mark.slow
def test_a_baseline_tree_without_the_code_is_refused(tmp_path: Path) -> None:
    # A tree the server's modules do not load from would silently measure this tree against itself
    run = subprocess.run(
        [sys.executable, str(BENCH), "--seconds", "1", "--baseline-tree", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert run.returncode != 0
    assert "not that tree's code" in run.stderr
