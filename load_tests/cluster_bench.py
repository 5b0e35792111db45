"""Cluster benchmarks on a real 3-server cluster (ZooKeeper + HDFS), all in one run on this machine.

    .venv/bin/python load_tests/cluster_bench.py [--messages 3000] [--reassign-delay 5] [--session 4]

1. Forwarding vs client-side addressing. The same producer (bootstrap: server s1) sends one message at
   a time to 12 partitions, first letting s1 forward to owners (``route_to_owner=False``), then routing
   itself from ``/v1/routes``. Reported: Talos payload bytes per message (client request + response bodies,
   plus what the servers forwarded), all loopback bytes per message (HTTP headers, HDFS and ZooKeeper
   traffic included), p50/p95 produce latency, and the ratios.
2. Failover: time from the owner's end to the first write its partition accepts again, for ``kill -9``,
   for a graceful stop that stays in the ring (a rolling restart: the partition waits for the server or
   for ``reassign_delay``), and for a graceful stop with ``--leave-on-shutdown``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Unpack

from server.devservices import ClusterServer, ClusterSettings, LocalCluster, wait_until
from talos import Admin, Producer, Urllib3Transport
from talos._transport import RequestOptions, Response


class CountingTransport(Urllib3Transport):
    """Counts the payload bytes the client sends and receives."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def request(self, method: str, url: str, **options: Unpack[RequestOptions]) -> Response:
        answer = super().request(method, url, **options)
        self.bytes += len(options.get("body") or b"") + len(answer.body)
        return answer


def loopback_bytes() -> int:
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, _, counters = line.partition(":")
        if name.strip() == "lo":
            return int(counters.split()[0])  # received = sent on loopback
    return 0


def forwarded_bytes(cluster: LocalCluster) -> float:
    total = 0.0
    for server in cluster.servers:
        with urllib.request.urlopen(f"{server.url}/metrics", timeout=5) as answer:
            for line in answer.read().decode().splitlines():
                if line.startswith("talos_forwarded_bytes_total"):
                    total += float(line.split()[-1])
    return total


def produce_run(cluster: LocalCluster, *, direct: bool, messages: int) -> dict[str, float]:
    transport = CountingTransport()
    bootstrap = cluster.servers[0].url
    value = b"v" * 100
    latencies = []
    with Producer(bootstrap, linger_ms=0, route_to_owner=direct, transport=transport) as producer:
        for i in range(200):  # warm up: routes, connections, partitions loaded
            producer.send("bench", value, partition=i % 12).result()
        transport.bytes = 0
        forwarded_before, lo_before = forwarded_bytes(cluster), loopback_bytes()
        for i in range(messages):
            started = time.perf_counter()
            producer.send("bench", value, partition=i % 12).result()
            latencies.append(time.perf_counter() - started)
        talos_bytes = transport.bytes + forwarded_bytes(cluster) - forwarded_before
        lo = loopback_bytes() - lo_before
    latencies.sort()
    return {
        "talos_bytes_per_message": talos_bytes / messages,
        "loopback_bytes_per_message": lo / messages,
        "p50_ms": statistics.median(latencies) * 1000,
        "p95_ms": latencies[int(len(latencies) * 0.95)] * 1000,
    }


def owner_of(topic: str, partition: int, via: ClusterServer) -> str:
    with urllib.request.urlopen(f"{via.url}/v1/routes?topic={topic}", timeout=5) as answer:
        table = json.load(answer)["topics"][topic]
    return str(table[partition]["owner"])


def write_ok(via: ClusterServer, topic: str, partition: int) -> bool:
    request = urllib.request.Request(
        f"{via.url}/v1/topics/{topic}/partitions/{partition}/messages",
        data=b'{"messages": [{"value": "probe"}]}',
        headers={"content-type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, TimeoutError):
        return False


def failover(cluster: LocalCluster, how: str) -> float:
    """Seconds from the owner's end until a write to one of its partitions succeeds (through s1)."""
    s1 = cluster.servers[0]
    owners = [owner_of("bench", p, s1) for p in range(12)]
    victim = next(s for s in cluster.servers[1:] if s.server_id in owners)
    partition = owners.index(victim.server_id)
    assert write_ok(s1, "bench", partition)
    if how == "leave":  # restart it with --leave-on-shutdown first
        victim.stop()
        victim.settings = dataclasses.replace(victim.settings, extra_args=("--leave-on-shutdown",))
        victim.start()
        cluster.wait_ring(len(cluster.servers), timeout=60)
        wait_until(lambda: write_ok(s1, "bench", partition), timeout=60, what="the partition back")
    started = time.monotonic()
    if how == "kill":
        victim.kill()
    else:
        victim.stop()
    wait_until(lambda: write_ok(s1, "bench", partition), timeout=180, what="a write after failover", interval=0.05)
    elapsed = time.monotonic() - started
    victim.settings = dataclasses.replace(victim.settings, extra_args=())
    victim.start()  # heal for the next measurement
    cluster.wait_ring(len(cluster.servers), timeout=90)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--session", type=float, default=4.0, help="ZooKeeper session timeout (s)")
    parser.add_argument("--reassign-delay", type=float, default=5.0, help="seconds")
    args = parser.parse_args()
    settings = ClusterSettings(
        zk_session_timeout_s=args.session,
        reassign_delay_s=args.reassign_delay,
        join_delay_s=0.5,
        env={"TALOS_RING_CHECK_S": "0.25", "TALOS_LOG_LEVEL": "warning"},
    )
    with tempfile.TemporaryDirectory(prefix="talos-cluster-bench-") as tmp:
        cluster = LocalCluster(Path(tmp), servers=3, settings=settings)
        cluster.start(progress=True)
        try:
            with Admin(cluster.servers[0].url) as admin:
                admin.create_topic("bench", partitions=12)
            forwarding = produce_run(cluster, direct=False, messages=args.messages)
            direct = produce_run(cluster, direct=True, messages=args.messages)
            print("\n1. forwarding vs client-side addressing (bootstrap s1, 12 partitions, 100-byte values)")
            print(f"{'':28}{'forwarding':>12}{'direct':>12}{'direct/fwd':>12}")
            for key in forwarding:
                ratio = direct[key] / forwarding[key] if forwarding[key] else float("nan")
                print(f"{key:28}{forwarding[key]:12.1f}{direct[key]:12.1f}{ratio:12.2f}")
            print(
                f"\n2. failover (ZooKeeper session {args.session:.0f} s, reassign_delay {args.reassign_delay:.0f} s): "
                "seconds until the partition takes writes again"
            )
            for how in ("kill", "stop", "leave"):
                label = {"kill": "kill -9", "stop": "graceful, stays in ring", "leave": "graceful, --leave-on-shutdown"}
                print(f"  {label[how]:32}{failover(cluster, how):8.2f} s", flush=True)
        finally:
            cluster.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
