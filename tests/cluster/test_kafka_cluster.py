"""The Kafka listener on a real cluster (3 servers with Kafka listeners, ZooKeeper, HDFS).

- An idempotent confluent-kafka producer (its own process, SASL PLAIN) writes while the server owning some of
  its partitions is killed (kill -9): librdkafka follows the partitions to their new owners and every value is
  acknowledged, stored once, at its acknowledged offset, in order (``talos._verify.analyse``).
- A partition's leader is its ring owner: every server's Metadata names the same one, among brokers that are
  every server's advertised Kafka address, and a Produce sent to any other server is answered
  NOT_LEADER_OR_FOLLOWER.
- Admin requests reach the owner from any server: DeleteRecords sent to a server that does not own the partition
  is forwarded to the one that does, and a config altered through one server is described by every other.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from server.devservices import ManagedProcess, wait_until
from talos import Admin
from talos._verify import analyse, read_everything
from tests.cluster.conftest import CLUSTER_TOKEN, Cluster
from tests.kafka_wire import KafkaWire

pytestmark = [pytest.mark.hdfs, pytest.mark.zookeeper, pytest.mark.slow, pytest.mark.kafka]

NOT_LEADER_OR_FOLLOWER = 6
PARTITIONS = 6


def bootstrap(cluster: Cluster) -> str:
    return ",".join(str(s.kafka_address) for s in cluster.servers.values())


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def server_log(cluster: Cluster, server_id: str, lines: int = 40) -> str:
    path = cluster.log_dir / f"server-{server_id}.log"
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@pytest.mark.quick_reassign
def test_an_idempotent_kafka_producer_loses_and_duplicates_nothing_across_a_killed_owner(
    cluster: Cluster, tmp_path: Path
) -> None:
    topic, count, rate = "kafka-failover", 3000, 200
    with Admin(cluster.servers["s1"].url) as admin:
        admin.create_topic(topic, partitions=PARTITIONS)
    routes = cluster.routes(topic)
    owned = Counter(routes.values())
    victim = max(sorted(owned), key=lambda s: owned[s])  # the server owning the most of the topic's partitions
    moved = sorted(p for p, owner in routes.items() if owner == victim)
    print(f"routes {routes}; killing {victim}, owner of {moved}")
    log_path = tmp_path / "producer.jsonl"
    argv = [sys.executable, "-m", "tests.cluster.kafka_producer", bootstrap(cluster), topic, str(PARTITIONS)]
    producer = ManagedProcess(
        "kafka-producer",
        [*argv, str(count), str(rate), str(log_path)],
        log_path=tmp_path / "producer.log",
        cwd=Path(__file__).parents[2],
    )
    started = time.monotonic()
    producer.start()
    try:

        def acked() -> list[dict[str, Any]]:
            producer.check_alive()
            return [e for e in read_log(log_path) if e["event"] == "ack"]

        # Early, so that most writes come after the kill: once the victim's partitions have taken some.
        wait_until(
            lambda: sum(1 for e in acked() if e["partition"] in moved) >= 60,
            timeout=60,
            what="the victim's partitions acknowledging writes",
        )
        before_kill = len(acked())
        killed_at = time.time()
        cluster.servers[victim].kill()
        print(f"killed {victim} {time.monotonic() - started:.1f}s after the producer started, {before_kill} acked")
        wait_until(
            lambda: any(e["event"] == "done" for e in read_log(log_path)),
            timeout=150,
            what="the producer's last delivery report",
        )
        producer.stop(timeout=10)
        print(f"producer done {time.monotonic() - started:.1f}s after it started")
        events = read_log(log_path)
        [done] = [e for e in events if e["event"] == "done"]
        errors = [e for e in events if e["event"] == "error"]
        acks = [e for e in events if e["event"] == "ack"]
        assert done["unflushed"] == 0
        assert errors == [], errors[:10]
        survivor = cluster.any_alive(besides=victim)
        routes_after = cluster.routes(topic, via=survivor)
        assert all(routes_after[p] != victim for p in moved), routes_after
        stored = read_everything(survivor.url, topic)
        sent = {f"kafka:{n}" for n in range(count)}
        acked_at = {str(e["value"]): (int(e["partition"]), int(e["offset"])) for e in acks}
        ack_times: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}
        for event in acks:
            ack_times[int(event["partition"])].append(float(event["t"]))
        first = min(float(e["t"]) for e in events)
        last = max(float(e["t"]) for e in acks)
        summary = analyse(sent, acked_at, stored, failed=len(errors), ack_times=ack_times, window=(first, last))
        print(summary.render())
        across = [e for e in acks if float(e["t"]) > killed_at and e["partition"] in moved]
        print(f"{len(across)} writes to the moved partitions {moved} acknowledged after the kill")
        assert len(acks) == count, f"{count - len(acks)} values never acknowledged"
        assert len(acked_at) == count, "a value acknowledged twice"
        assert summary.lost == 0
        assert summary.duplicated == 0
        assert summary.out_of_order == 0
        assert summary.offset_conflicts == 0
        assert summary.problems == []
        assert sum(len(v) for v in stored.values()) == count
        assert before_kill < count // 3, "the kill came too late to matter"
        assert len(across) > count // 10, "too few writes crossed the kill"
        longest = max(summary.unwritable[p].longest_s for p in moved)
        print(f"moved partitions unwritable for up to {longest:.1f}s")
    except BaseException:
        print(f"--- producer\n{producer.tail(30)}")
        print(cluster.logs())
        print(f"--- {victim} (killed)\n{server_log(cluster, victim)}")
        raise
    finally:
        producer.stop(timeout=10)


def test_metadata_names_the_ring_owner_everywhere_and_other_servers_refuse_produce(cluster: Cluster) -> None:
    topic = "kafka-leaders"
    with Admin(cluster.servers["s1"].url) as admin:
        admin.create_topic(topic, partitions=PARTITIONS)
    routes = cluster.routes(topic)
    assert set(routes) == set(range(PARTITIONS))
    advertised = {s.server_id: str(s.kafka_address) for s in cluster.servers.values()}
    leaders_seen: dict[str, dict[int, str]] = {}
    for server in cluster.servers.values():
        with KafkaWire(str(server.kafka_address)) as wire:
            assert wire.login(CLUSTER_TOKEN)["error_code"] == 0
            answer = wire.call(3, 12, {"topics": [{"topic_id": uuid.UUID(int=0), "name": topic}]})
            brokers = {int(b["node_id"]): f"{b['host']}:{b['port']}" for b in answer["brokers"]}
            assert sorted(brokers.values()) == sorted(advertised.values()), answer["brokers"]
            assert len(brokers) == len(advertised)  # one node id per server
            [entry] = answer["topics"]
            assert entry["error_code"] == 0
            assert sorted(p["partition_index"] for p in entry["partitions"]) == list(range(PARTITIONS))
            by_address = {address: sid for sid, address in advertised.items()}
            leaders = {}
            for part in entry["partitions"]:
                assert part["error_code"] == 0
                assert part["replica_nodes"] == part["isr_nodes"] == [part["leader_id"]]
                leaders[int(part["partition_index"])] = by_address[brokers[int(part["leader_id"])]]
            leaders_seen[server.server_id] = leaders
            # Produce to every partition through this server: the owner stores it, the others refuse it.
            for partition, owner in sorted(routes.items()):
                answer = wire.produce(topic, partition, [f"via-{server.server_id}-{partition}".encode()])
                if owner == server.server_id:
                    assert answer["error_code"] == 0, answer
                else:
                    assert answer["error_code"] == NOT_LEADER_OR_FOLLOWER, answer
                    assert answer["base_offset"] == -1
    print(f"leaders {leaders_seen}")
    for server_id, leaders in leaders_seen.items():
        assert leaders == routes, f"{server_id}'s Metadata names leaders {leaders}, the ring {routes}"
    # Only what the owners accepted was stored: one value per partition, written through its owner.
    stored = read_everything(cluster.any_alive().url, topic)
    assert stored == {p: [f"via-{owner}-{p}"] for p, owner in routes.items()}


def test_delete_records_and_configs_from_any_server(cluster: Cluster) -> None:
    topic = "kafka-admin"
    with Admin(cluster.servers["s1"].url) as admin:
        admin.create_topic(topic, partitions=PARTITIONS)
    routes = cluster.routes(topic)
    address = {s.server_id: str(s.kafka_address) for s in cluster.servers.values()}
    for partition, owner in routes.items():
        with KafkaWire(address[owner]) as wire:
            assert wire.login(CLUSTER_TOKEN)["error_code"] == 0
            assert wire.produce(topic, partition, [b"v"] * 5)["error_code"] == 0
    # each partition's records below 1 + p % 4, asked of a server that does not own it: forwarded to the owner
    for partition, owner in sorted(routes.items()):
        via = next(sid for sid in sorted(address) if sid != owner)
        with KafkaWire(address[via]) as wire:
            assert wire.login(CLUSTER_TOKEN)["error_code"] == 0
            body = {
                "topics": [
                    {"name": topic, "partitions": [{"partition_index": partition, "offset": 1 + partition % 4}]}
                ],
                "timeout_ms": 10000,
            }
            [part] = wire.call(21, 2, body)["topics"][0]["partitions"]
            assert (part["error_code"], part["low_watermark"]) == (0, 1 + partition % 4), (partition, owner, via)
    with Admin(cluster.any_alive().url) as admin:
        earliest = {p.partition: p.earliest for p in admin.describe_topic(topic).partition_offsets}
    assert earliest == {p: 1 + p % 4 for p in range(PARTITIONS)}
    # a config altered through s2 is described by every server (once its catalog watch has the change)
    with KafkaWire(address["s2"]) as wire:
        assert wire.login(CLUSTER_TOKEN)["error_code"] == 0
        configs = [{"name": "retention.ms", "config_operation": 0, "value": "3600000"}]
        body = {"resources": [{"resource_type": 2, "resource_name": topic, "configs": configs}], "validate_only": False}
        assert wire.call(44, 1, body)["responses"][0]["error_code"] == 0
    for server_id, kafka_address in sorted(address.items()):
        with KafkaWire(kafka_address) as wire:
            assert wire.login(CLUSTER_TOKEN)["error_code"] == 0
            resource = {"resource_type": 2, "resource_name": topic, "configuration_keys": ["retention.ms"]}

            def described(wire: KafkaWire = wire, resource: dict[str, Any] = resource) -> bool:
                [result] = wire.call(32, 4, {"resources": [resource]})["results"]
                return bool(result["configs"]) and result["configs"][0]["value"] == "3600000"

            wait_until(described, timeout=15, what=f"{server_id} describes the new retention.ms")
