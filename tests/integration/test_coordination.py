"""The ZooKeeper recipes against the real ZooKeeper: registration, epoch CAS, ring CAS."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from fencing import DirectoryEpochSource, PartitionLog, open_storage
from hashring import Ring
from server.coordination import RingStore, ServerRegistry, StaleRingError, ZkEpochSource
from talos import RecordData, encode_batch
from talos.devservices import ZooKeeperServer

Connect = Callable[[], KazooClient]


@pytest.fixture
def connect(zookeeper: ZooKeeperServer) -> Iterator[Connect]:
    """Clients under a fresh chroot per test, all stopped at the end."""
    chroot = f"/test-{uuid.uuid4().hex[:8]}"
    root = KazooClient(hosts=zookeeper.address)
    root.start(timeout=15)
    root.ensure_path(chroot)
    root.stop()
    root.close()
    clients: list[KazooClient] = []

    def make() -> KazooClient:
        client = KazooClient(hosts=zookeeper.address + chroot, timeout=4)
        client.start(timeout=15)
        clients.append(client)
        return client

    try:
        yield make
    finally:
        for client in clients:
            client.stop()
            client.close()


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
