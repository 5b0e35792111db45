"""``talos cluster up`` / ``down`` as a developer runs them: real ZooKeeper, HDFS and servers, in the background."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from server.devservices import free_port_range, stop_recorded_cluster
from talos import Admin, AuthenticationError, Consumer, Producer

pytestmark = [pytest.mark.hdfs, pytest.mark.zookeeper]

TALOS = [sys.executable, "-m", "talos.cli"]


def talos(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TALOS, *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


def test_cluster_up_and_down(tmp_path: Path) -> None:
    base = tmp_path / "dev-cluster"
    base_port = free_port_range(3)
    try:
        up = talos("cluster", "up", "--servers", "3", "--base-port", str(base_port), "--dir", str(base))
        assert up.returncode == 0, up.stderr
        lines = re.findall(r"^server (\S+) (http://\S+) pid=(\d+)$", up.stdout, re.MULTILINE)
        assert [line[0] for line in lines] == ["s1", "s2", "s3"]
        assert [line[1] for line in lines] == [f"http://127.0.0.1:{base_port + i}" for i in range(3)]
        assert re.search(r"^zookeeper 127\.0\.0\.1:\d+$", up.stdout, re.MULTILINE)
        assert re.search(r"^hdfs hdfs://127\.0\.0\.1:\d+", up.stdout, re.MULTILINE)
        pids = [int(line[2]) for line in lines]
        assert all(alive(pid) for pid in pids)

        # Auth is on in cluster mode: the admin token is in the file `up` names (and only its owner reads it).
        token_file = Path(re.findall(r"^admin-token (\S+)$", up.stdout, re.MULTILINE)[0])
        assert token_file.stat().st_mode & 0o077 == 0
        token = token_file.read_text().strip()
        url = lines[1][1]
        with Admin(url, token="") as anonymous, pytest.raises(AuthenticationError):
            anonymous.list_topics()

        # Usable at once, through any server.
        with Admin(url, token=token) as admin:
            admin.create_topic("dev", partitions=3)
        with Producer(lines[0][1], token=token) as producer:
            for i in range(30):
                producer.send("dev", f"m{i}".encode(), partition=i % 3)
        with Consumer(lines[2][1], topics=["dev"], wait_ms=0, token=token) as consumer:
            got: list[bytes] = []
            while len(got) < 30:
                got += [m.value or b"" for m in consumer.poll(2)]
        assert sorted(got) == sorted(f"m{i}".encode() for i in range(30))

        again = talos("cluster", "up", "--servers", "3", "--base-port", str(base_port), "--dir", str(base))
        assert again.returncode == 0, again.stderr
        assert re.findall(r"^server (\S+) (http://\S+) pid=(\d+)$", again.stdout, re.MULTILINE) == lines
        assert "already up" in again.stderr

        down = talos("cluster", "down", "--dir", str(base))
        assert down.returncode == 0, down.stderr
        assert "server s1" in down.stdout and "zookeeper" in down.stdout
        assert not any(alive(pid) for pid in pids)
        twice = talos("cluster", "down", "--dir", str(base))
        assert twice.returncode == 0 and "no cluster running" in twice.stdout
    finally:
        stop_recorded_cluster(base)  # whatever is left if an assertion failed
