"""Connector checkpoints in a cluster of three (issue 22, part 4): every server indexes ``__connect_offsets``
by itself, yet a load anywhere sees every save that returned, wherever it was made, also after the
partition's owner was killed and the partition moved (the new owner, and the others, read it from the log)."""

from __future__ import annotations

import pytest

from server.connect_offsets import CONNECT_OFFSETS_TOPIC, partition_of
from server.devservices import wait_until
from talos import Admin
from tests.cluster.conftest import CLUSTER_TOKEN, Cluster

CONNECTOR = "moving"


@pytest.mark.slow
def test_loads_see_every_save_across_servers_and_a_partition_move(cluster: Cluster) -> None:
    servers = list(cluster.servers.values())
    admins = {s.server_id: Admin(s.url, token=CLUSTER_TOKEN) for s in servers}
    try:
        for round_ in range(3):  # saves through each server in turn, loads through all
            for position, server in enumerate(servers):
                admins[server.server_id].save_connector_offsets(CONNECTOR, str(position), {"round": round_})
                for admin in admins.values():
                    assert admin.connector_offsets(CONNECTOR)[str(position)] == {"round": round_}
        partition = partition_of(CONNECTOR)
        owner = cluster.routes(CONNECT_OFFSETS_TOPIC)[partition]
        admins[owner].save_connector_offsets(CONNECTOR, "0", None)  # a tombstone, written at the owner
        cluster.servers[owner].kill()
        survivors = [s for s in servers if s.server_id != owner]
        cluster.wait_members({s.server_id for s in survivors}, timeout=60)
        assert cluster.routes(CONNECT_OFFSETS_TOPIC)[partition] != owner
        expected = {"1": {"round": 2}, "2": {"round": 2}}

        def loads_agree() -> bool:
            try:
                return all(admins[s.server_id].connector_offsets(CONNECTOR) == expected for s in survivors)
            except Exception:  # the new owner still taking the partition over: retriable errors
                return False

        wait_until(loads_agree, timeout=60, what="every survivor's load after the move")
        writer, reader = survivors
        admins[writer.server_id].save_connector_offsets(CONNECTOR, "3", {"round": 3})
        assert admins[reader.server_id].connector_offsets(CONNECTOR) == {**expected, "3": {"round": 3}}
    finally:
        for admin in admins.values():
            admin.close()
