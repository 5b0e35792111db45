"""Compaction under a takeover on a real three-server cluster on HDFS: the owner of a compacted partition is
frozen (SIGSTOP, the server and its compaction worker) in the middle of a pass, past its ZooKeeper session; a
new owner takes the partition over, writes, deletes a key and compacts; then the old owner is resumed. Nothing
acknowledged is lost, no offset moves, the zombie's pass changes nothing, and a deleted key stays deleted once
its tombstone has gone too."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from pathlib import Path

import httpx

from server.devservices import HdfsCluster, ZooKeeperServer, wait_until
from talos import Producer
from tests.cluster.conftest import AUTH, FAST, post_json, start_cluster

TOPIC = "table"


def children(pid: int) -> list[int]:
    """The processes ``pid`` started, from any of its threads (the compactor's thread starts the worker)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def read_all(url: str) -> list[tuple[int, str, str | None]]:
    out: list[tuple[int, str, str | None]] = []
    offset = 0
    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as client:
        while True:
            answer = client.get(f"/v1/topics/{TOPIC}/partitions/0/messages", params={"offset": offset})
            answer.raise_for_status()
            doc = answer.json()
            if not doc["messages"]:
                return out
            out.extend((m["offset"], m["key"], m["value"]) for m in doc["messages"])
            offset = doc["next_offset"]


def test_a_frozen_owner_mid_compaction_changes_nothing_after_a_takeover(
    zookeeper: ZooKeeperServer, hdfs: HdfsCluster, tmp_path: Path
) -> None:
    # Compaction slowed to 16 KiB/s (a pass over this partition takes seconds) and only on request.
    env = {**FAST.env, "TALOS_COMPACTION_IO_BYTES_PER_S": "16384", "TALOS_MAINTENANCE_INTERVAL_S": "3600"}
    cluster = start_cluster(zookeeper, hdfs, tmp_path / "logs", dataclasses.replace(FAST, env=env))
    frozen: list[int] = []
    try:
        url = cluster.any_alive().url
        status, body = post_json(
            f"{url}/v1/topics",
            {"name": TOPIC, "cleanup_policy": "compact", "segment_bytes": 1024, "delete_retention_ms": 2000},
        )
        assert status == 201, body
        acknowledged: dict[int, tuple[str, str | None]] = {}

        def write(values: list[tuple[str, str | None]]) -> None:
            """One batch (a request) per call: small batches make many small segments."""
            with Producer(cluster.any_alive().url) as producer:
                futures = [(k, v, producer.send(TOPIC, v, key=k, partition=0)) for k, v in values]
                for key, value, future in futures:
                    acknowledged[future.result(timeout=120).offset] = (key, value)

        for round_ in range(30):
            write([(f"k{i}", f"v{round_}") for i in range(20)])
        write([(f"k{i}", None) for i in range(5)])  # k0..k4 deleted
        for round_ in range(5):
            write([("filler", f"{round_}.{i}") for i in range(20)])  # the tombstones' segment gets sealed
        time.sleep(3.0)  # HDFS closes rolled segments in the background (~0.5 s each): a pass reads sealed ones

        owner_id = cluster.routes(TOPIC)[0]
        owner = cluster.servers[owner_id]
        passes: list[tuple[int, object]] = []

        def compact_on_the_owner() -> None:
            passes.append(post_json(f"{owner.url}/v1/topics/{TOPIC}/partitions/0/compact", {}, timeout=120))

        pass_thread = threading.Thread(target=compact_on_the_owner, daemon=True)
        pass_thread.start()
        wait_until(lambda: bool(children(owner.pid)) or bool(passes), timeout=30, what="the compaction worker")
        assert not passes, passes  # still running
        time.sleep(1.0)  # well into the pass (it reads at 16 KiB/s)
        frozen = [owner.pid, *children(owner.pid)]
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        others = [s for s in cluster.servers.values() if s.server_id != owner_id]
        wait_until(
            lambda: cluster.routes(TOPIC, via=others[0])[0] != owner_id, timeout=60, what="a new owner", interval=0.5
        )
        new_owner = cluster.servers[cluster.routes(TOPIC, via=others[0])[0]]
        with Producer(new_owner.url) as producer:  # the new owner writes, and deletes k5
            for key, value in [("k6", "after"), ("k5", None), *[("filler", f"f{i}") for i in range(100)]]:
                acknowledged[producer.send(TOPIC, value, key=key, partition=0).result(timeout=120).offset] = (
                    key,
                    value,
                )
        first = post_json(f"{new_owner.url}/v1/topics/{TOPIC}/partitions/0/compact", {}, timeout=300)
        assert first[0] == 200, first
        for pid in frozen:  # the zombie and its worker go on where they stopped
            os.kill(pid, signal.SIGCONT)
        frozen = []
        pass_thread.join(120)
        assert passes and passes[0][0] != 200, passes  # the zombie's pass was refused, not committed

        time.sleep(2.5)  # past delete.retention.ms: the tombstones that went through a pass may go now
        second = post_json(f"{new_owner.url}/v1/topics/{TOPIC}/partitions/0/compact", {}, timeout=300)
        assert second[0] == 200, second

        seen = read_all(cluster.any_alive().url)
        offsets = [offset for offset, _, _ in seen]
        assert offsets == sorted(set(offsets)), "order kept, every offset once"
        for offset, key, value in seen:
            assert acknowledged[offset] == (key, value), f"offset {offset} holds what was acknowledged there"
        latest: dict[str, tuple[int, str | None]] = {}
        for offset in sorted(acknowledged):
            key, value = acknowledged[offset]
            latest[key] = (offset, value)
        present = {offset for offset, _, _ in seen}
        for key, (offset, value) in latest.items():
            if value is not None:
                assert offset in present, f"the last value of {key} is gone"
        deleted = {key for key, (_, value) in latest.items() if value is None}
        assert deleted == {"k0", "k1", "k2", "k3", "k4", "k5"}
        resurrected = [(o, k, v) for o, k, v in seen if k in deleted and v is not None]
        assert not resurrected, f"deleted keys came back: {resurrected}"
        assert len(seen) < len(acknowledged) / 2, "compaction removed the superseded values"
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        cluster.stop()
