"""``scripts/demo`` (the README's first command) run as written, with ``TALOS_DEMO_EXIT=1``: its exit status says
whether the demo worked.

The script works in the directory above its own (``./talos-data``, ``talos-standalone.log``), so each test runs a
copy of it in a temporary directory that holds what it reads: ``scripts/demo``, ``scripts/install``,
``pyproject.toml`` and ``.venv`` (a link to the environment running the tests). The repository's own ``scripts/install``
runs first, so the copy's install step finds ``.venv`` current and touches nothing (it never installs from the copy).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from server.devservices import free_port
from tests.helpers import REPO

pytestmark = pytest.mark.slow


@pytest.fixture
def demo_dir(tmp_path: Path) -> Path:
    venv = Path(sys.executable).parent.parent
    assert venv == REPO / ".venv", f"the demo runs .venv/bin/talos: run the tests from {REPO / '.venv'}"
    installed = subprocess.run(
        [str(REPO / "scripts" / "install")], check=False, capture_output=True, text=True, timeout=600
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    (tmp_path / "scripts").mkdir()
    for name in ("demo", "install"):
        shutil.copy2(REPO / "scripts" / name, tmp_path / "scripts" / name)
    shutil.copy2(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / ".venv").symlink_to(venv)
    return tmp_path


def run_demo(demo_dir: Path, port: int, kafka_port: int | None = None) -> subprocess.CompletedProcess[str]:
    """``TALOS_DEMO_EXIT=1 TALOS_PORT=port TALOS_KAFKA_PORT=kafka_port scripts/demo``; on a timeout its whole
    process group (the script and the server it started) is stopped by the group's id before the test fails."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TALOS_")}
    env |= {"TALOS_DEMO_EXIT": "1", "TALOS_PORT": str(port), "TALOS_KAFKA_PORT": str(kafka_port or free_port())}
    argv = [str(demo_dir / "scripts" / "demo")]
    process = subprocess.Popen(
        argv, cwd=demo_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        stdout, stderr = process.communicate()
        pytest.fail(f"scripts/demo did not finish in 180 s:\n{stdout}\n{stderr}")
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_a_successful_demo_exits_0_and_stops_its_server(demo_dir: Path) -> None:
    port, kafka_port = free_port(), free_port()
    done = run_demo(demo_dir, port, kafka_port)
    assert done.returncode == 0, f"status {done.returncode}\n{done.stdout}\n{done.stderr}"
    out = done.stdout
    assert "Python packages in .venv are current" in out  # the second install is the quick one
    assert f"starting talos standalone on http://127.0.0.1:{port}" in out
    assert "created quickstart with 3 partition(s)" in out
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert sorted(record["value"] for record in records) == sorted(f"order {i}" for i in range(1, 13))
    for customer in {record["key"] for record in records}:  # same key, same partition, in order
        mine = [record for record in records if record["key"] == customer]
        assert len({record["partition"] for record in mine}) == 1
        assert [record["offset"] for record in mine] == sorted(record["offset"] for record in mine)
    assert "POST /v1/topics/quickstart/messages ->" in out
    assert "order via REST" in out  # consumed by the group 'billing'
    assert "group billing" in out
    assert f"Kafka clients connect unchanged to 127.0.0.1:{kafka_port}" in out
    through_kafka = [line for line in out.splitlines() if line.startswith("kafka quickstart/")]
    assert len(through_kafka) == 13, out  # kcat (installed by scripts/install --dev) read all 13 orders
    assert "done (TALOS_DEMO_EXIT=1): stopping the server" in out
    assert (demo_dir / "talos-data").is_dir()
    assert not listening(port)


def test_a_demo_whose_server_cannot_start_exits_non_zero(demo_dir: Path) -> None:
    (demo_dir / "talos-data").write_text("a file where the data directory should be\n")
    done = run_demo(demo_dir, free_port())
    assert done.returncode == 1, f"status {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert "the server did not start; see talos-standalone.log" in done.stderr


def test_a_demo_on_a_taken_port_exits_non_zero(demo_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_demo(demo_dir, port)
    assert done.returncode == 1, f"status {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert f"port {port} is in use" in done.stderr
    assert not (demo_dir / "talos-data").exists()
