"""ZooKeeper clients under a fresh chroot per test (the session's real ZooKeeper)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from server.devservices import ZooKeeperServer

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
