"""A real cluster per test: three ``talos server`` processes on the session's ZooKeeper and HDFS.

Each cluster gets its own ZooKeeper chroot and HDFS directory, so tests cannot see each other's state.
Servers are stopped by PID when the test ends, also when it fails (SIGCONT first, in case one is paused).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import secrets
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from server.devservices import (
    ClusterServer,
    ClusterSettings,
    HdfsCluster,
    ZooKeeperServer,
    free_port,
    free_port_range,
    wait_until,
)
from talos import Producer

_counter = itertools.count()

# Auth is on in cluster mode: the tests act as the admin (the SDK and the CLI read TALOS_TOKEN).
CLUSTER_TOKEN = f"cluster-admin-{secrets.token_hex(16)}"
AUTH = {"authorization": f"Bearer {CLUSTER_TOKEN}"}

# Short timers so failover happens within seconds: session 3 s, reassignment 4 s after the session ends.
FAST = ClusterSettings(
    zk_session_timeout_s=3.0,
    join_delay_s=0.5,
    reassign_delay_s=4.0,
    env={"TALOS_RING_CHECK_S": "0.25", "TALOS_LOG_LEVEL": "info"},
    admin_token=CLUSTER_TOKEN,
)
# For tests that wait for a dead server's partitions to move (``@pytest.mark.quick_reassign``): the move comes
# 2 s after the session ends. FAST keeps 4 s, which a restarted server must beat even on a loaded machine.
QUICK_REASSIGN = dataclasses.replace(FAST, reassign_delay_s=2.0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:  # every test here starts servers, most of them three, and kills or pauses some
        if item.path.is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True, scope="module")
def admin_token_in_environment() -> Iterator[None]:
    before = os.environ.get("TALOS_TOKEN")
    os.environ["TALOS_TOKEN"] = CLUSTER_TOKEN
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TALOS_TOKEN", None)
        else:
            os.environ["TALOS_TOKEN"] = before


def get_json(url: str, timeout: float = 5.0) -> dict[str, object]:
    with urllib.request.urlopen(urllib.request.Request(url, headers=AUTH), timeout=timeout) as answer:
        data = json.load(answer)
    assert isinstance(data, dict)
    return data


def post_json(
    url: str, body: object, timeout: float = 30.0, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, object]]:
    sent = {"content-type": "application/json", **AUTH, **(headers or {})}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=sent, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def metric(url: str, name: str) -> float:
    """Sum of a Prometheus counter's samples on one server."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


@dataclass
class Cluster:
    zk: str
    storage: str
    log_dir: Path
    settings: ClusterSettings
    servers: dict[str, ClusterServer] = field(default_factory=dict)

    def add(
        self,
        server_id: str,
        *,
        port: int | None = None,
        wait: bool = True,
        kafka_port: int | None = None,
        **overrides: object,
    ) -> ClusterServer:
        """Start server ``server_id``; with ``kafka_port``, with a Kafka listener there (advertised as such)."""
        settings = dataclasses.replace(self.settings, **overrides)  # type: ignore[arg-type]
        server = ClusterServer(
            server_id,
            port or free_port(),
            zk=self.zk,
            storage=self.storage,
            log_dir=self.log_dir,
            settings=settings,
            kafka_port=kafka_port,
        )
        self.servers[server_id] = server
        server.start(wait=wait)
        return server

    def any_alive(self, *, besides: str | None = None) -> ClusterServer:
        return next(s for s in self.servers.values() if s.alive() and s.server_id != besides)

    def ring(self, via: ClusterServer | None = None) -> tuple[int, dict[str, int]]:
        server = via or self.any_alive()
        ring = get_json(f"{server.url}/v1/cluster")["ring"]
        assert isinstance(ring, dict)
        return int(ring["version"]), {str(k): int(v) for k, v in ring["members"].items()}

    def wait_members(self, members: set[str], *, timeout: float = 60.0, via: ClusterServer | None = None) -> None:
        wait_until(lambda: set(self.ring(via)[1]) == members, timeout=timeout, what=f"ring members {sorted(members)}")

    def routes(self, topic: str, via: ClusterServer | None = None) -> dict[int, str]:
        server = via or self.any_alive()
        table = get_json(f"{server.url}/v1/routes?topic={topic}")["topics"]
        assert isinstance(table, dict)
        return {int(e["partition"]): str(e["owner"]) for e in table[topic]}

    def seed(self, topic: str, *, prefix: str, partitions: int = 6, count: int = 60) -> None:
        """Create ``topic`` and write ``prefix:i`` for i < count, round-robin over its partitions."""
        post_json(f"{self.any_alive().url}/v1/topics", {"name": topic, "partitions": partitions})
        self.write(topic, prefix=prefix, numbers=range(count), partitions=partitions)

    def write(self, topic: str, *, prefix: str, numbers: range, partitions: int = 6) -> None:
        """Write ``prefix:i`` for each i in ``numbers`` to partition i % partitions (acknowledged on return)."""
        with Producer(self.any_alive().url) as producer:
            for i in numbers:
                producer.send(topic, f"{prefix}:{i}".encode(), partition=i % partitions)

    def stop(self) -> None:
        for server in self.servers.values():  # their graceful shutdowns run at once, then each is waited for
            server.terminate()
        for server in self.servers.values():
            server.stop()

    def logs(self) -> str:
        out = []
        for server in self.servers.values():
            if server.process is not None:
                out.append(f"--- {server.server_id}\n{server.process.tail(40)}")
        return "\n".join(out)


def start_cluster(
    zookeeper: ZooKeeperServer,
    hdfs: HdfsCluster,
    log_dir: Path,
    settings: ClusterSettings,
    count: int = 3,
    *,
    kafka: bool = False,
) -> Cluster:
    """``count`` servers, ready and in the ring; with ``kafka``, each with a Kafka listener of its own."""
    name = f"c{os.getpid()}-{next(_counter)}"
    cluster = Cluster(f"{zookeeper.address}/{name}", f"{hdfs.url}/clusters/{name}", log_dir, settings)
    try:
        base_port = free_port_range(count)  # not free_port() per server: one not yet bound could come twice
        kafka_ports: list[int | None] = [None] * count
        if kafka:
            kafka_base = free_port_range(count)
            while set(range(kafka_base, kafka_base + count)) & set(range(base_port, base_port + count)):
                kafka_base = free_port_range(count)
            kafka_ports = [kafka_base + index for index in range(count)]
        for index in range(count):
            cluster.add(f"s{index + 1}", port=base_port + index, wait=False, kafka_port=kafka_ports[index])
        for server in cluster.servers.values():
            server.wait_ready()
        cluster.wait_members(set(cluster.servers))
    except BaseException:
        cluster.stop()
        raise
    return cluster


@pytest.fixture
def cluster(
    zookeeper: ZooKeeperServer, hdfs: HdfsCluster, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    started = time.monotonic()
    settings = QUICK_REASSIGN if request.node.get_closest_marker("quick_reassign") else FAST
    kafka = request.node.get_closest_marker("kafka") is not None
    running = start_cluster(zookeeper, hdfs, tmp_path / "logs", settings, kafka=kafka)
    print(f"cluster of 3{' with Kafka listeners' if kafka else ''} up in {time.monotonic() - started:.1f}s")
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def pair(zookeeper: ZooKeeperServer, hdfs: HdfsCluster, tmp_path: Path) -> Iterator[Cluster]:
    """A cluster of two servers (a module may override it with other settings)."""
    running = start_cluster(zookeeper, hdfs, tmp_path / "logs", FAST, count=2)
    try:
        yield running
    finally:
        running.stop()
