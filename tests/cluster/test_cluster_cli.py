"""``talos cluster up`` / ``down`` as a developer runs them: real ZooKeeper, HDFS and servers, in the background."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from server.devservices import free_port_range, stop_recorded_cluster
from talos import TLS, Admin, AuthenticationError, Consumer, Producer, TransportError

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


def test_cluster_up_with_tls(tmp_path: Path) -> None:
    """``talos cluster up --tls``: a CA made for the cluster, every server on https (and its Kafka listener on
    TLS), clients that trust the CA named by ``up`` served, the others refused."""
    base = tmp_path / "tls-cluster"
    try:
        up = talos(
            *("cluster", "up", "--servers", "2", "--storage", "file", "--kafka-base-port", "0", "--tls"),
            *("--dir", str(base)),
        )
        assert up.returncode == 0, up.stderr
        urls = re.findall(r"^server \S+ (\S+) pid=\d+$", up.stdout, re.MULTILINE)
        assert len(urls) == 2 and all(url.startswith("https://127.0.0.1:") for url in urls)
        ca = Path(re.findall(r"^ca (\S+)$", up.stdout, re.MULTILINE)[0])
        assert ca == base.resolve() / "tls" / "ca.pem" and "TALOS_CA_FILE" in up.stderr
        token = Path(re.findall(r"^admin-token (\S+)$", up.stdout, re.MULTILINE)[0]).read_text().strip()
        tls = TLS(ca_file=str(ca))
        with Admin(urls[0], token=token, tls=tls) as admin:
            admin.create_topic("secure", partitions=2)
        with Producer(urls[1], token=token, tls=tls) as producer:  # routes to both servers' https URLs
            for i in range(10):
                producer.send("secure", f"s{i}".encode(), partition=i % 2)
        with Admin(urls[1], token=token, tls=tls) as admin:
            assert sum(p.latest or 0 for p in admin.describe_topic("secure").partition_offsets) == 10
        with Admin(urls[0], token=token) as untrusting, pytest.raises(TransportError):
            untrusting.list_topics()  # the system's CAs do not know the cluster's
        [kafka] = re.findall(r"^kafka s1 (\S+)$", up.stdout, re.MULTILINE)
        listed = listed_topics(kafka, ca, token)
        assert "secure" in listed
        down = talos("cluster", "down", "--dir", str(base))
        assert down.returncode == 0, down.stderr
    finally:
        stop_recorded_cluster(base)


def listed_topics(bootstrap: str, ca: Path, token: str) -> set[str]:
    client = AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "admin",
            "sasl.password": token,
            "ssl.ca.location": str(ca),
        }
    )
    return set(client.list_topics(timeout=20).topics)
