"""The ``talos`` command line against a real standalone server."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import StandaloneServer

pytestmark = pytest.mark.slow


def talos(server: StandaloneServer, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "talos.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TALOS_URL": server.url},
        check=False,
    )


def test_topics_commands(server: StandaloneServer, topic_name: str) -> None:
    result = talos(server, "topics", "create", topic_name, "--partitions", "3")
    assert result.returncode == 0, result.stderr
    assert f"created {topic_name} with 3 partition(s)" in result.stdout
    assert topic_name in talos(server, "topics", "list").stdout
    described = talos(server, "topics", "describe", topic_name).stdout
    assert "partition 2\tearliest=0\tlatest=0" in described
    again = talos(server, "topics", "create", topic_name)
    assert again.returncode == 1
    assert "TOPIC_EXISTS" in again.stderr
    assert talos(server, "topics", "delete", topic_name, "--yes").returncode == 0
    missing = talos(server, "topics", "describe", topic_name)
    assert missing.returncode == 1
    assert "UNKNOWN_TOPIC" in missing.stderr


def test_produce_from_stdin_and_file_then_consume(server: StandaloneServer, topic_name: str, tmp_path: Path) -> None:
    talos(server, "topics", "create", topic_name, "--partitions", "2")
    result = talos(server, "produce", topic_name, "--key-sep", ":", stdin="a:one\nb:two\nc:three\n")
    assert result.returncode == 0, result.stderr
    assert "produced 3 message(s)" in result.stderr
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(f"line {i}\n" for i in range(100)))
    result = talos(server, "produce", topic_name, "--file", str(lines), "--partition", "1")
    assert "produced 100 message(s)" in result.stderr
    consumed = talos(server, "consume", topic_name, "--from-beginning", "--print-key")
    assert consumed.returncode == 0, consumed.stderr
    rows = consumed.stdout.splitlines()
    assert len(rows) == 103
    assert {"a\tone", "b\ttwo", "c\tthree"} <= set(rows)
    limited = talos(server, "consume", topic_name, "--partition", "1", "--offset", "50", "--max", "2", "--json")
    records = [json.loads(line) for line in limited.stdout.splitlines()]
    assert [(r["partition"], r["offset"]) for r in records] == [(1, 50), (1, 51)]
    assert all(r["value"].startswith("line ") or ":" not in r["value"] for r in records)
    assert talos(server, "consume", topic_name).stdout == ""  # default: only new messages
    usage = talos(server, "consume", topic_name, "--offset", "3")
    assert usage.returncode == 2
    assert "--offset needs --partition" in usage.stderr


def test_bench_prints_rates(server: StandaloneServer, topic_name: str) -> None:
    result = talos(
        server, "bench", "produce", "--topic", topic_name, "--messages", "2000", "--size", "100",
        "--compression", "zstd", "--values", "json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "produce: 2000 messages" in result.stdout
    assert "ack latency: p50" in result.stdout
    ratio = re.search(r"compression zstd: 200,000 bytes of values, [\d,]+ sent = ratio ([\d.]+)", result.stdout)
    assert ratio and float(ratio.group(1)) > 2, result.stdout  # JSON log lines compress
    result = talos(server, "bench", "consume", "--topic", topic_name, "--messages", "2000")
    assert "consume: 2000 messages" in result.stdout
    result = talos(server, "bench", "produce", "--topic", topic_name, "--messages", "2000", "--many", "300")
    assert result.returncode == 0, result.stderr
    assert "produce: 2000 messages" in result.stdout  # send_many calls of 300, the last of 200


def test_help_explains(server: StandaloneServer) -> None:
    for command in ([], ["standalone"], ["produce"], ["consume"], ["topics", "create"], ["bench", "produce"]):
        result = talos(server, *command, "--help")
        assert result.returncode == 0
        assert "Usage:" in result.stdout
    assert "--data-dir" in talos(server, "standalone", "--help").stdout
