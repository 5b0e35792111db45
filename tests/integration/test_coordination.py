"""The ZooKeeper recipes against the real ZooKeeper: registration, epoch CAS, ring CAS."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import ZnodeStat

from fencing import DirectoryEpochSource, PartitionLog, open_storage
from hashring import Ring
from server.cluster import ClusterMember
from server.config import ServerConfig
from server.coordination import RingKeeper, RingStore, ServerRegistry, StaleRingError, ZkEpochSource
from server.devservices import ZooKeeperServer, wait_until
from talos import RecordData, encode_batch
from tests.integration.conftest import Connect


def test_registration_is_ephemeral(connect: Connect) -> None:
    first, observer = connect(), connect()
    ServerRegistry(first).register("s1", "http://127.0.0.1:9001")
    registry = ServerRegistry(observer)
    live = registry.live()
    assert list(live) == ["s1"]
    assert live["s1"].url == "http://127.0.0.1:9001"
    assert abs(live["s1"].since - time.time()) < 60
    with pytest.raises(RuntimeError, match="registered by another"):
        registry.register("s1", "http://elsewhere")
    first.stop()  # its session ends: the registration goes with it
    deadline = time.monotonic() + 10
    while registry.live() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert registry.live() == {}


def test_epochs_are_unique_and_increasing_under_contention(connect: Connect) -> None:
    clients = [connect() for _ in range(4)]
    granted: list[int] = []
    lock = threading.Lock()

    def take(client: KazooClient, name: str) -> None:
        source = ZkEpochSource(client, "orders", 3, owner=name, ring_version=1)
        for _ in range(10):
            epoch = source.next_epoch()
            with lock:
                granted.append(epoch)

    threads = [threading.Thread(target=take, args=(c, f"s{i}")) for i, c in enumerate(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(granted) == list(range(1, 41))  # every CAS won exactly one epoch
    record = ZkEpochSource(clients[0], "orders", 3, owner="x", ring_version=1).current()
    assert record is not None
    assert record["epoch"] == 40


def test_an_older_ring_cannot_take_the_partition_back(connect: Connect) -> None:
    zk = connect()
    assert ZkEpochSource(zk, "orders", 0, owner="new", ring_version=5).next_epoch() == 1
    with pytest.raises(StaleRingError):
        ZkEpochSource(zk, "orders", 0, owner="old", ring_version=4).next_epoch()
    assert ZkEpochSource(zk, "orders", 0, owner="newer", ring_version=6).next_epoch() == 2


def test_zk_epochs_drive_the_fenced_takeover(connect: Connect, tmp_path: Path) -> None:
    """The log's takeover protocol with epochs from ZooKeeper instead of the directory."""
    zk = connect()
    fs, root = open_storage(str(tmp_path))
    first = PartitionLog.open(fs, f"{root}/p", ZkEpochSource(zk, "t", 0, owner="a", ring_version=1))
    first.append(encode_batch([RecordData(b"a")]))
    first.flush()
    second = PartitionLog.open(fs, f"{root}/p", ZkEpochSource(zk, "t", 0, owner="b", ring_version=1))
    assert (first.epoch, second.epoch) == (1, 2)
    assert DirectoryEpochSource(fs, f"{root}/p").next_epoch() == 3  # the markers agree with ZooKeeper
    second.close()


def test_ring_publication_is_compare_and_set(connect: Connect) -> None:
    a, b = RingStore(connect()), RingStore(connect())
    ring, version = a.read()
    assert (ring.members, version) == ({}, -1)
    assert a.publish(Ring.of(["s1"], version=1), version)
    assert not b.publish(Ring.of(["s2"], version=1), -1)  # b's view is stale
    current, version = b.read()
    assert (dict(current.members), current.version) == ({"s1": 160}, 1)
    assert b.publish(current.with_members({"s1": 160, "s2": 160}), version)
    assert not a.publish(Ring.of(["s3"], version=2), version)  # a still holds the old version
    assert set(a.read()[0].members) == {"s1", "s2"}


def wait_for_ring(keeper: RingKeeper, members: set[str], timeout: float = 10.0) -> Ring:
    deadline = time.monotonic() + timeout
    while True:
        ring = keeper.tick()
        if set(ring.members) == members or time.monotonic() > deadline:
            return ring
        time.sleep(0.05)


@pytest.mark.slow
def test_delayed_reassignment_on_the_real_zookeeper(connect: Connect) -> None:
    servers = {name: connect() for name in ("s1", "s2", "s3")}
    # join_delay is long enough for the keeper's own connection to be made inside it on a loaded CI machine
    # (at 0.5 s the first tick once came after it and found everybody already in)
    join_delay = 3.0
    keeper = RingKeeper(connect(), join_delay=join_delay, reassign_delay=1.5)
    registered = time.monotonic()
    for name, client in servers.items():
        ServerRegistry(client).register(name, f"http://{name}")
    assert keeper.tick().members == {}  # nobody has been up for join_delay yet
    ring = wait_for_ring(keeper, {"s1", "s2", "s3"})
    assert set(ring.members) == {"s1", "s2", "s3"}
    assert time.monotonic() - registered >= join_delay - 0.1

    # s2 restarts within reassign_delay: the ring does not change at all
    servers["s2"].stop()
    time.sleep(0.3)
    assert keeper.tick() == ring
    servers["s2"] = connect()
    ServerRegistry(servers["s2"]).register("s2", "http://s2")
    time.sleep(1.6)  # past the delay, but s2 is back
    assert keeper.tick() == ring

    # s3 is gone for good: it leaves only once reassign_delay has passed
    servers["s3"].stop()
    gone_at = time.monotonic()
    assert "s3" in keeper.tick().members
    shrunk = wait_for_ring(keeper, {"s1", "s2"})
    assert set(shrunk.members) == {"s1", "s2"}
    assert time.monotonic() - gone_at >= 1.4
    assert shrunk.version == ring.version + 1


def test_concurrent_keepers_agree_on_one_ring(connect: Connect) -> None:
    for name in ("a", "b", "c", "d"):
        ServerRegistry(connect()).register(name, f"http://{name}")
    keepers = [RingKeeper(connect(), join_delay=0.0, reassign_delay=60) for _ in range(4)]
    rings: list[Ring] = []
    lock = threading.Lock()

    def run(keeper: RingKeeper) -> None:
        ring = keeper.tick()
        with lock:
            rings.append(ring)

    threads = [threading.Thread(target=run, args=(k,)) for k in keepers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(set(r.members) == {"a", "b", "c", "d"} for r in rings)
    final, _ = RingStore(connect()).read()
    assert set(final.members) == {"a", "b", "c", "d"}
    assert {r.version for r in rings} == {final.version}  # one publication won; the others read it


def test_a_ring_change_its_watch_missed_is_read_by_the_ring_keeper(
    zookeeper: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The ring's watch is one-shot and set again by a read that kazoo retries only a few times: under the
    # campaign's flapping links a server missed a ring change for good and went on serving a partition it had
    # lost. Here the watch hears nothing once `deaf` is set; the server must still act on the new ring.
    deaf = threading.Event()
    heard = ClusterMember._ring_changed

    def unless_deaf(self: ClusterMember, data: bytes | None, stat: ZnodeStat | None) -> None:
        if not deaf.is_set():
            heard(self, data, stat)

    monkeypatch.setattr(ClusterMember, "_ring_changed", unless_deaf)
    rings: list[Ring] = []
    config = ServerConfig(
        zk=f"{zookeeper.address}/missed-{uuid.uuid4().hex[:8]}",
        server_id="s1",
        zk_session_timeout_s=4.0,
        join_delay_s=0.2,
        reassign_delay_s=30.0,  # s2 below is in the ring without a registration: it stays meanwhile
        ring_check_s=0.1,
    )
    member = ClusterMember(config, on_ring=rings.append, on_session_lost=lambda: None)
    member.start()
    other = KazooClient(hosts=config.zk)
    try:
        wait_until(lambda: "s1" in member.ring.members, timeout=10, what="s1 in its ring")
        deaf.set()
        other.start(timeout=15)
        store = RingStore(other)
        ring, version = store.read()
        assert store.publish(ring.with_members({**ring.members, "s2": 160}), version)
        wait_until(lambda: member.ring.version > ring.version, timeout=5, what="the new ring, with its watch deaf")
        assert set(member.ring.members) == {"s1", "s2"}
        assert rings[-1] == member.ring  # the broker was told
    finally:
        member.stop(leave=False)
        other.stop()
        other.close()
