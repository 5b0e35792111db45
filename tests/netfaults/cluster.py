"""A 3-server Talos cluster on a :class:`Network`: each server in its own namespace, ZooKeeper in another,
HDFS in a third (so that either can be cut alone; and the NameNode records a DataNode by the source address
of its connection, which must be the DataNode's own), the clients in the root namespace.
Every process is stopped by PID in ``stop``, also after a failed ``start``."""

from __future__ import annotations

import dataclasses
import json
import secrets
import urllib.request
from pathlib import Path

from talos.devservices import ClusterServer, HdfsCluster, ZooKeeperServer, free_port, wait_until
from tests.cluster.conftest import FAST
from tests.netfaults.network import Network

SERVERS = ("s1", "s2", "s3")
GROUPS = {**{s: [s] for s in SERVERS}, "zookeeper": ["zookeeper"], "hdfs": ["hdfs"]}
PORT = 8080  # every server has a namespace, so the same port each

TOKEN = f"netfaults-admin-{secrets.token_hex(16)}"
# The other cluster tests' short timers (a ZooKeeper session of 3 s, reassignment 4 s after it ends).
SETTINGS = dataclasses.replace(FAST, admin_token=TOKEN)


class NetCluster:
    def __init__(self, base_dir: Path, net: Network) -> None:
        self.net = net
        self.base_dir = base_dir
        self.zookeeper = ZooKeeperServer(
            base_dir / "zookeeper", host=net.address("zookeeper"), netns=net.netns("zookeeper"), port=free_port()
        )
        self.hdfs = HdfsCluster(base_dir / "hdfs", host=net.address("hdfs"), netns=net.netns("hdfs"))
        self.servers = {
            name: ClusterServer(
                name,
                PORT,
                zk=self.zookeeper.address,
                storage=f"{self.hdfs.url}/talos",
                log_dir=base_dir / "logs",
                settings=SETTINGS,
                host=net.address(name),
                netns=net.netns(name),
            )
            for name in SERVERS
        }

    def start(self) -> NetCluster:
        try:
            self.zookeeper.start()
            self.hdfs.start()
            for server in self.servers.values():
                server.start(wait=False)
            self.wait_healthy(timeout=120)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for server in self.servers.values():
            server.terminate()
        for server in self.servers.values():
            server.stop()
        self.hdfs.stop()
        self.zookeeper.stop()

    def get(self, server: str, path: str, *, timeout: float = 5.0) -> dict[str, object]:
        request = urllib.request.Request(
            f"{self.servers[server].url}{path}", headers={"authorization": f"Bearer {TOKEN}"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            data = json.load(answer)
        return data if isinstance(data, dict) else {}

    def ring(self, via: str) -> set[str]:
        ring = self.get(via, "/v1/cluster").get("ring", {})
        members = ring.get("members", {}) if isinstance(ring, dict) else {}
        return {str(m) for m in members}

    def owners(self, topic: str, via: str = "s1") -> dict[int, str]:
        """Partition → the server that owns it, as ``via`` sees it now."""
        entries = self.get(via, f"/v1/routes?topic={topic}").get("topics", {})
        table = entries.get(topic, []) if isinstance(entries, dict) else []
        return {int(e["partition"]): str(e["owner"]) for e in table}

    def wait_healthy(self, *, timeout: float) -> None:
        """Every server running, ready, and in every server's ring (after a fault: the cluster healed)."""
        for server in self.servers.values():
            if not server.alive():  # a crash under a fault is a finding; the next fault needs all three
                server.start(wait=False)
        for server in self.servers.values():
            server.wait_ready(timeout)
        wait_until(
            lambda: all(self.ring(s) == set(SERVERS) for s in SERVERS),
            timeout=timeout,
            what="all three servers in every ring",
            interval=0.25,
        )
