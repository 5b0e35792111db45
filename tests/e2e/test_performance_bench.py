"""The performance benchmark command runs end to end (short and without HDFS here): it starts Talos, the
durable Python sketch, wrk, Redis (with redis-benchmark) and NATS (with generators in two processes) itself,
stops them, and prints every table with figures in it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.serial  # a benchmark: its figures are measured against the clock

BENCH = Path(__file__).resolve().parents[2] / "load_tests" / "performance.py"


@pytest.mark.slow
def test_the_benchmark_prints_its_tables(tmp_path: Path) -> None:
    output = tmp_path / "performance.md"
    flags = ["--seconds", "1", "--no-hdfs", "--sdk-mib", "8", "--output", str(output)]
    run = subprocess.run(
        [sys.executable, str(BENCH), *flags],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    text = output.read_text()
    assert text in run.stdout
    for row in ("| local disk | on |", "| local disk | off |", "raw `write` + `fdatasync`", "| Redis Streams |",
                "| NATS JetStream |", "Talos / Redis Streams", "group commit on/off",
                "SDK producer, zstd, JSON log lines", "`send_many()` of 1000", "SDK consumer",
                "| durable Python sketch", "Talos / durable Python sketch", "≥ 0.5x the durable Python sketch",
                "measured by `redis-benchmark`", "### Against the goals (this run)"):  # fmt: skip
        assert row in text, row
    on = next(line for line in text.splitlines() if line.startswith("| local disk | on |"))
    assert float(on.split("|")[3].replace(",", "")) > 0  # a measured rate, not a placeholder
    assert re.search(r"Talos / NATS JetStream: single messages \*\*\d+\.\d\dx\*\*", text)
    native = next(line for line in text.splitlines() if "| redis-benchmark (C);" in line)
    assert float(native.split("|")[3].replace(",", "")) > 0  # Redis's own client measured it
    sketch = next(line for line in text.splitlines() if line.startswith("| durable Python sketch"))
    assert float(sketch.split("|")[3].replace(",", "")) > 0
    assert not list(tmp_path.glob("talos-performance-*")), "the scratch directory was left behind"
