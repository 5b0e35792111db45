"""Push subscriptions on a real three-server cluster: three subscriber processes (two go to the coordinator,
one stays where it connected and is relayed) share a key-ordered subscription while one of them is killed -9,
one is paused (SIGSTOP) past the ack timeout, and the server coordinating the subscription is killed -9.
Every message is acknowledged once by some subscriber (or dead-lettered), redelivered only while
unacknowledged, and a key's messages are handed out in order."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from server.devservices import wait_until
from talos import Admin, Consumer, Producer
from tests.cluster.conftest import Cluster

REPO = Path(__file__).resolve().parents[2]
MESSAGES = 1500
KEYS = 25


def _events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def test_subscribers_killed_and_paused_while_the_coordinator_dies(cluster: Cluster, tmp_path: Path) -> None:
    servers = list(cluster.servers.values())
    url = servers[0].url
    admin = Admin(url)
    admin.create_topic("jobs", partitions=6)
    made = admin.create_subscription(
        "workers", "jobs", ack_timeout_ms=2000, max_deliveries=5, key_ordered=True, start="earliest"
    )
    coordinator = cluster.servers[str(made["coordinator"])]
    others = [s.url for s in servers if s is not coordinator]
    logs = {name: tmp_path / f"{name}.jsonl" for name in ("a", "b", "c")}
    processes: dict[str, subprocess.Popen[bytes]] = {}
    for index, name in enumerate(logs):
        urls = [s.url for s in servers[index:] + servers[:index]]  # each starts at another server
        processes[name] = subprocess.Popen(
            [
                *(sys.executable, "-m", "tests.cluster.subscriber_process", "workers", name, str(logs[name])),
                "relay"
                if name == "c"
                else "follow",  # c stays where it connected: relayed, unless that is the coordinator
                *urls,
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / f"{name}.err", "wb"),  # noqa: SIM115 - closed with the process
        )
    produced: dict[str, tuple[str, int, int]] = {}  # value -> key, partition, offset
    try:
        wait_until(lambda: all(_events(p) for p in logs.values()), timeout=30, what="subscribers started")

        def write() -> None:
            with Producer(others[0], idempotent=True) as producer:
                futures = []
                for i in range(MESSAGES):
                    key = f"k{i % KEYS}"
                    futures.append((str(i), key, producer.send("jobs", value=str(i).encode(), key=key.encode())))
                    time.sleep(0.004)
                for value, key, future in futures:
                    stored = future.result(timeout=120)
                    produced[value] = (key, stored.partition, stored.offset)

        writer = threading.Thread(target=write)
        writer.start()
        time.sleep(1.5)
        os.kill(processes["a"].pid, signal.SIGKILL)
        time.sleep(1.0)
        os.kill(processes["b"].pid, signal.SIGSTOP)
        time.sleep(1.0)
        coordinator.kill()
        time.sleep(3.0)  # b stays paused past the ack timeout
        os.kill(processes["b"].pid, signal.SIGCONT)
        writer.join(timeout=180)
        assert len(produced) == MESSAGES

        def all_settled() -> bool:
            try:
                rows = Admin(others[0]).describe_subscription("workers")["partitions"]
            except Exception:
                return False
            ends = {p: max((o for _, q, o in produced.values() if q == p), default=-1) + 1 for p in range(6)}
            return all(row["floor"] == ends[row["partition"]] for row in rows)

        wait_until(all_settled, timeout=150, what="every message settled", interval=0.5)
        for name in ("b", "c"):  # the paused one and the one left alone lived through it all
            assert processes[name].poll() is None, (tmp_path / f"{name}.err").read_text()[-3000:]
    finally:
        for name in ("b", "c"):
            if processes[name].poll() is None:
                os.kill(processes[name].pid, signal.SIGCONT)
                processes[name].terminate()
        for process in processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    with Consumer(others[0], topics=["__sub-dlq.workers"], start="earliest") as consumer:
        dead = {(m.value or b"").decode() for m in consumer.poll(timeout=3)}

    events = [e for path in logs.values() for e in _events(path)]
    got: dict[str, list[dict[str, Any]]] = defaultdict(list)
    acked: dict[str, list[dict[str, Any]]] = defaultdict(list)  # confirmed acknowledgements
    sent: dict[tuple[int, int, int], dict[str, Any]] = {}  # (partition, offset, delivery) -> the ack sent
    value_of: dict[tuple[int, int], str] = {}
    for event in events:
        if event["event"] == "got":
            got[event["value"]].append(event)
            value_of[(event["partition"], event["offset"])] = event["value"]
        elif event["event"] == "ack":
            sent[(event["partition"], event["offset"], event["delivery"])] = event
    for event in events:
        if event["event"] == "acked":
            acked[value_of[(event["partition"], event["offset"])]].append(event)

    settled_at: dict[str, float] = {}
    for value, (_key, partition, offset) in produced.items():
        assert got[value] or value in dead, f"message {value} was never handed out"
        confirmed = acked[value]
        assert len(confirmed) <= 1, f"message {value} acknowledged twice: {confirmed}"
        if confirmed:
            settling = confirmed[0]
        elif value not in dead:
            # Acknowledged by the subscriber killed before the confirmation came: its last delivery's
            # acknowledgement was sent, by a, and nothing came after it.
            last = max(e["delivery"] for e in got[value])
            settling = sent.get((partition, offset, last), {})
            assert settling.get("who") == "a", f"message {value} settled by nobody: {got[value]}"
        else:
            continue
        assert all(e["delivery"] <= settling["delivery"] for e in got[value]), f"{value} came again after its ack"
        settled_at[value] = sent[(partition, offset, settling["delivery"])]["t"]
    assert dead <= set(produced)
    assert not dead & set(acked)

    by_key: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for value, (key, _partition, offset) in produced.items():
        by_key[key].append((offset, value))
    for key, items in by_key.items():
        ordered = [value for _, value in sorted(items)]
        for earlier, later in itertools.pairwise(ordered):
            if earlier in settled_at:
                first = min(e["t"] for e in got[later]) if got[later] else float("inf")
                assert first >= settled_at[earlier], f"key {key}: {later} handed out before {earlier} was settled"
    redelivered = sum(1 for value in produced if len(got[value]) > 1)
    print(f"{MESSAGES} messages, {redelivered} delivered more than once, {len(dead)} dead-lettered")
