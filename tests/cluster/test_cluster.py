"""Cluster mode on real processes: 3 servers, real ZooKeeper, real HDFS.

Any server answers; the SDK goes straight to owners; a crash moves partitions after ``reassign_delay``
without losing an acknowledged message; a restart inside the delay moves nothing; a server paused past
its ZooKeeper session acknowledges nothing that is lost and rejoins cleanly.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from server.devservices import HdfsCluster, ZooKeeperServer, wait_until
from talos import Admin, Consumer, Producer, TalosError
from tests.cluster.conftest import FAST, Cluster, get_json, metric, post_json, start_cluster

pytestmark = [pytest.mark.hdfs, pytest.mark.zookeeper]


def assert_round_robin(url: str, topic: str, *, prefix: str, count: int, partitions: int = 6) -> None:
    """The topic holds exactly what ``Cluster.seed``/``write`` wrote, each partition in order."""
    stored = read_all(url, topic)
    for partition in range(partitions):
        assert stored[partition] == [f"{prefix}:{i}".encode() for i in range(count) if i % partitions == partition]


def read_all(url: str, topic: str) -> dict[int, list[bytes]]:
    """Every message of every partition, from the start, in offset order (checked contiguous)."""
    out: dict[int, list[bytes]] = defaultdict(list)
    admin = Admin(url)
    partitions = admin.describe_topic(topic).partitions
    with Consumer(url, topics=[topic], start="earliest", wait_ms=0) as consumer:
        expected = {p: admin.offsets(topic, p)["latest"] for p in range(partitions)}
        next_offset = dict.fromkeys(range(partitions), 0)
        deadline = time.monotonic() + 60
        while any(next_offset[p] < expected[p] for p in expected) and time.monotonic() < deadline:
            for message in consumer.poll(0.5):
                assert message.offset == next_offset[message.partition], "offsets must be contiguous"
                next_offset[message.partition] += 1
                assert message.value is not None
                out[message.partition].append(message.value)
    admin.close()
    assert next_offset == expected, "could not read every partition to its end"
    return out


@dataclass
class Load:
    """Producers writing ``<writer>:<n>`` values, recording what was acknowledged (and where)."""

    url: str
    topic: str
    acked: dict[bytes, tuple[int, int, float]] = field(default_factory=dict)  # value → (partition, offset, when)
    failed: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def sdk_writer(self, name: str, partitions: int) -> None:
        with Producer(self.url, linger_ms=2, delivery_timeout_s=60, retry_backoff_ms=50) as producer:
            n = 0
            while not self.stop.is_set():
                futures = []
                for _ in range(20):
                    value = f"{name}:{n}".encode()
                    futures.append((value, producer.send(self.topic, value, partition=n % partitions)))
                    n += 1
                for value, future in futures:
                    try:
                        meta = future.result(timeout=90)
                    except (TalosError, TimeoutError) as exc:
                        self.failed.append(f"{value!r}: {exc}")
                        continue
                    with self.lock:
                        self.acked[value] = (meta.partition, meta.offset, time.monotonic())
                time.sleep(0.01)

    def start(self, *writers: tuple[str, int]) -> None:
        for name, partitions in writers:
            thread = threading.Thread(target=self.sdk_writer, args=(name, partitions), daemon=True)
            thread.start()
            self.threads.append(thread)

    def wait_flowing(self, count: int = 200) -> None:
        """Until the writers have ``count`` acknowledgements: the load runs (a fixed sleep may not, under CI load)."""
        wait_until(lambda: len(self.acked) >= count, timeout=60, what=f"{count} acknowledged writes")

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=120)
        assert not any(t.is_alive() for t in self.threads)


def check_no_loss(url: str, load: Load) -> dict[int, list[bytes]]:
    """Every acknowledged value is stored at its acknowledged offset, and each writer's acknowledged values
    are in send order within each partition.

    Without an idempotent producer (issue 5) a batch whose acknowledgement was lost (the owner died or
    paused after its flush) is sent again, so an unacknowledged earlier copy may also be stored: that is a
    duplicate, counted and printed, not a loss or a reordering of what was acknowledged.
    """
    stored = read_all(url, load.topic)
    for value, (partition, offset, _when) in load.acked.items():
        assert offset < len(stored[partition]), f"acknowledged {value!r} at {partition}/{offset} is missing"
        assert stored[partition][offset] == value, f"{partition}/{offset} holds {stored[partition][offset]!r}"
    by_writer: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)  # (writer, partition) → (n, offset)
    for value, (partition, offset, _when) in load.acked.items():
        writer, number = value.decode().rsplit(":", 1)
        by_writer[(writer, partition)].append((int(number), offset))
    for (writer, partition), acked in by_writer.items():
        offsets = [offset for _number, offset in sorted(acked)]
        assert offsets == sorted(offsets), f"{writer}'s acknowledged messages out of order in partition {partition}"
    duplicates = sum(len(values) - len(set(values)) for values in stored.values())
    print(f"acknowledged {len(load.acked)}, stored {sum(map(len, stored.values()))}, duplicates {duplicates}")
    return stored


def test_any_server_answers_sdk_goes_to_owners_rest_forwards(cluster: Cluster) -> None:
    s1, s2, s3 = (cluster.servers[i] for i in ("s1", "s2", "s3"))
    status, created = post_json(f"{s1.url}/v1/topics", {"name": "orders", "partitions": 12})
    assert status == 201, created
    # The topic is visible on every server (ZooKeeper metadata, watched).
    for server in (s2, s3):
        assert get_json(f"{server.url}/v1/topics/orders")["partitions"] == 12
    routes = cluster.routes("orders")
    assert set(routes.values()) == {"s1", "s2", "s3"}, routes  # 12 partitions over 3 servers
    assert all(cluster.routes("orders", via=s) == routes for s in (s1, s2, s3))  # all agree

    # REST through a server that owns only some partitions: the rest is forwarded.
    forwarded_before = metric(s2.url, "talos_forwarded_requests_total")
    messages = [{"value": f"rest-{i}", "partition": i % 12} for i in range(60)]
    status, answer = post_json(f"{s2.url}/v1/topics/orders/messages", {"messages": messages})
    assert status == 200, answer
    results = answer["results"]
    assert isinstance(results, list) and [r["partition"] for r in results] == [i % 12 for i in range(60)]
    foreign = sum(1 for p, owner in routes.items() if owner != "s2")
    assert metric(s2.url, "talos_forwarded_requests_total") - forwarded_before == foreign

    # The SDK routes by itself: nothing is forwarded, nothing misdirected.
    before = {s.server_id: metric(s.url, "talos_forwarded_requests_total") for s in (s1, s2, s3)}
    with Producer(s3.url, linger_ms=1) as producer:
        futures = [producer.send("orders", f"sdk-{i}".encode(), partition=i % 12) for i in range(600)]
        producer.flush()
    assert all(f.result().offset >= 5 for f in futures)  # after the 5 REST messages of each partition
    after = {s.server_id: metric(s.url, "talos_forwarded_requests_total") for s in (s1, s2, s3)}
    assert after == before, "client-side addressing must not need forwarding"
    assert sum(metric(s.url, "talos_misdirected_requests_total") for s in (s1, s2, s3)) == 0

    # Reading through any server gives the same data, in order.
    stored = read_all(s1.url, "orders")
    for partition in range(12):
        expected = [f"rest-{i}".encode() for i in range(60) if i % 12 == partition]
        expected += [f"sdk-{i}".encode() for i in range(600) if i % 12 == partition]
        assert stored[partition] == expected
    answer = get_json(f"{s3.url}/v1/topics/orders/partitions/0/messages?offset=0&max_messages=3")
    assert len(answer["messages"]) == 3  # type: ignore[arg-type]


def test_direct_requests_get_421_and_forwarding_is_bounded(cluster: Cluster) -> None:
    s1 = cluster.servers["s1"]
    post_json(f"{s1.url}/v1/topics", {"name": "t", "partitions": 3})
    routes = cluster.routes("t")
    partition, owner = next((p, o) for p, o in routes.items() if o != "s1")
    url = f"{s1.url}/v1/topics/t/partitions/{partition}/messages"
    status, answer = post_json(url, {"messages": [{"value": "x"}]}, headers={"x-talos-route": "direct"})
    assert status == 421
    error = answer["error"]
    assert isinstance(error, dict)
    assert error["owner"] == owner and error["owner_url"] == cluster.servers[owner].url
    assert error["retriable"] is True

    # A request that has already been forwarded as often as allowed is not forwarded again.
    status, answer = post_json(url, {"messages": [{"value": "x"}]}, headers={"x-talos-hops": "2"})
    assert status == 503
    assert answer["error"]["code"] == "TOO_MANY_HOPS"  # type: ignore[index]
    assert get_json(f"{s1.url}/v1/topics/t/partitions/{partition}/offsets")["latest"] == 0  # nothing stored


@pytest.mark.quick_reassign
@pytest.mark.parametrize("which", ["an owner", "the producers' bootstrap server"])
def test_kill_9_moves_partitions_after_the_delay_and_loses_nothing(cluster: Cluster, which: str) -> None:
    s1 = cluster.servers["s1"]
    post_json(f"{s1.url}/v1/topics", {"name": "load", "partitions": 6})
    routes = cluster.routes("load")
    if which == "an owner":
        victim = next(owner for owner in ("s2", "s3") if owner in routes.values())
    else:
        victim = "s1"  # the SDK must find the cluster through the servers the routes named
        assert "s1" in routes.values()
    victim_partitions = {p for p, o in routes.items() if o == victim}
    load = Load(s1.url, "load")
    load.start(("a", 6), ("b", 6))
    load.wait_flowing()
    acked_before = len(load.acked)
    killed_at = time.monotonic()
    cluster.servers[victim].kill()
    # The ring drops the victim only once its session expired and reassign_delay passed.
    cluster.wait_members({"s1", "s2", "s3"} - {victim}, timeout=60)
    moved_after = time.monotonic() - killed_at
    assert moved_after >= cluster.settings.reassign_delay_s, f"moved after {moved_after:.1f}s"
    new_routes = cluster.routes("load")
    assert victim not in new_routes.values()
    assert all(new_routes[p] == routes[p] for p in routes if p not in victim_partitions), "others stay put"
    moved_at = killed_at + moved_after

    def moved_partitions_take_writes() -> bool:
        with load.lock:
            acked = list(load.acked.values())
        return all(any(p == partition and when > moved_at for p, _o, when in acked) for partition in victim_partitions)

    wait_until(moved_partitions_take_writes, timeout=30, what="writes to the moved partitions")
    time.sleep(1)
    load.finish()
    assert len(load.acked) > acked_before + 100
    assert not load.failed, load.failed[:5]
    check_no_loss(cluster.any_alive().url, load)


@pytest.mark.parametrize("how", ["graceful", "kill"])
def test_restart_within_reassign_delay_moves_nothing(cluster: Cluster, how: str) -> None:
    s1, s2 = cluster.servers["s1"], cluster.servers["s2"]
    cluster.seed("steady", prefix="w")
    version, members = cluster.ring()
    routes = cluster.routes("steady")

    if how == "graceful":
        s2.stop()  # flush, seal, deregister; the ring keeps it for reassign_delay
    else:
        s2.kill()  # its registration lives until the session expires; the new process waits for that
    restarted_at = time.monotonic()
    s2.start()
    assert time.monotonic() - restarted_at < cluster.settings.zk_session_timeout_s + cluster.settings.reassign_delay_s
    # Past the delay, counted from when the ring lost s2's registration: a removal would have happened by now.
    # Graceful: it deregistered before ``restarted_at``. Killed: its session ended by the time start returned.
    lost_by = restarted_at if how == "graceful" else time.monotonic()
    time.sleep(max(0.0, lost_by + cluster.settings.reassign_delay_s + 1 - time.monotonic()))
    assert cluster.ring() == (version, members), "a restart inside the delay must not change the ring"
    assert cluster.routes("steady") == routes

    cluster.write("steady", prefix="w", numbers=range(60, 120))
    assert_round_robin(s1.url, "steady", prefix="w", count=120)


@pytest.mark.slow
@pytest.mark.quick_reassign
def test_sigstop_past_the_session_is_fenced_and_rejoins(cluster: Cluster) -> None:
    """Split brain: the paused owner must not acknowledge a write the new owner does not have."""
    s1 = cluster.servers["s1"]
    post_json(f"{s1.url}/v1/topics", {"name": "brain", "partitions": 6})
    routes = cluster.routes("brain")
    victim_id = next(owner for owner in ("s2", "s3") if owner in routes.values())
    victim = cluster.servers[victim_id]
    victim_partitions = sorted(p for p, o in routes.items() if o == victim_id)
    load = Load(s1.url, "brain")
    load.start(("a", 6), ("b", 6))

    # Writers aimed straight at the victim's partitions on the victim (REST): their requests are in
    # its socket while it is paused, and it handles them once it resumes.
    direct_acked: list[tuple[int, int, bytes]] = []
    direct_stop = threading.Event()

    def direct_writer(partition: int) -> None:
        n = 0
        while not direct_stop.is_set():
            value = f"d{partition}:{n}".encode()
            try:
                status, answer = post_json(
                    f"{victim.url}/v1/topics/brain/partitions/{partition}/messages",
                    {"messages": [{"value": value.decode()}]},
                    timeout=60,
                )
            except OSError:
                time.sleep(0.2)
                continue
            if status == 200:
                result = answer["results"][0]  # type: ignore[index]
                direct_acked.append((partition, int(result["offset"]), value))
            n += 1
            time.sleep(0.05)

    direct = [threading.Thread(target=direct_writer, args=(p,), daemon=True) for p in victim_partitions]
    for thread in direct:
        thread.start()
    load.wait_flowing()
    wait_until(
        lambda: {p for p, _o, _v in direct_acked} == set(victim_partitions),
        timeout=60,
        what="direct writes acknowledged by the victim",
    )
    victim.pause()
    paused_at = time.monotonic()
    cluster.wait_members({"s1", "s2", "s3"} - {victim_id}, timeout=60)
    time.sleep(2)  # the new owners take writes while the victim sleeps
    victim.resume()
    print(f"paused for {time.monotonic() - paused_at:.1f}s")
    # It finds its session gone, drops its partitions, registers again and rejoins the ring.
    cluster.wait_members({"s1", "s2", "s3"}, timeout=60)
    victim.wait_ready(timeout=30)
    time.sleep(3)  # partitions move back to it under load
    direct_stop.set()
    for thread in direct:
        thread.join(timeout=90)
    load.finish()
    assert not load.failed, load.failed[:5]

    stored = check_no_loss(s1.url, load)
    for partition, offset, value in direct_acked:
        assert stored[partition][offset] == value, f"direct write {value!r} acknowledged at {offset} is lost"
    assert cluster.routes("brain") == routes  # back where the ring puts them
    log = (victim.log_dir / f"server-{victim_id}.log").read_text()
    assert "session lost" in log
    print(f"acknowledged: {len(load.acked)} through the SDK, {len(direct_acked)} directly to the paused server")


def test_graceful_leave_moves_partitions_at_once(zookeeper: ZooKeeperServer, hdfs: HdfsCluster, tmp_path: Path) -> None:
    """``--leave-on-shutdown``: flush, seal, leave the ring: the partitions move now, not after the delay."""
    slow_reassign = dataclasses.replace(FAST, reassign_delay_s=60.0)
    cluster = start_cluster(zookeeper, hdfs, tmp_path / "logs", slow_reassign, count=2)
    try:
        leaver = cluster.add("s3", extra_args=("--leave-on-shutdown",))
        cluster.wait_members({"s1", "s2", "s3"})
        s1 = cluster.servers["s1"]
        cluster.seed("drain", prefix="w")
        leaving = {p for p, owner in cluster.routes("drain").items() if owner == "s3"}
        assert leaving
        stopped_at = time.monotonic()
        leaver.stop()
        cluster.wait_members({"s1", "s2"}, timeout=30)
        with Producer(s1.url) as producer:
            futures = [producer.send("drain", f"w:{i}".encode(), partition=i % 6) for i in range(60, 120)]
        assert all(f.result().partition in range(6) for f in futures)
        assert time.monotonic() - stopped_at < slow_reassign.reassign_delay_s  # did not wait for the delay
        stored = read_all(s1.url, "drain")
        for partition in range(6):
            assert stored[partition] == [f"w:{i}".encode() for i in range(120) if i % 6 == partition]
    finally:
        cluster.stop()
