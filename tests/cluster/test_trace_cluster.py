"""The message trace on a real three-server cluster: any server answers a message's timeline or a key's
messages, forwarding to the owners of the trace partitions that hold them."""

from __future__ import annotations

from typing import Any

from server.devservices import wait_until
from talos import Admin, Producer
from tests.cluster.conftest import Cluster


def test_any_server_answers_a_trace_query(cluster: Cluster) -> None:
    servers = list(cluster.servers.values())
    with Admin(servers[0].url) as admin:
        admin.create_topic("traced", partitions=6)
        admin.alter_topic("traced", trace_sample=1)
    stored = {}
    with Producer(servers[1].url) as producer:
        for partition in range(6):
            stored[partition] = producer.send(
                "traced", value=f"v{partition}".encode(), key=b"k-order-7", partition=partition
            ).result(timeout=30)
    for server in servers:
        with Admin(server.url) as admin:
            for partition, meta in stored.items():

                def produced(admin: Admin = admin, partition: int = partition, offset: int = meta.offset) -> bool:
                    found: dict[str, Any] = admin.trace("traced", partition, offset)
                    return "produced" in {e["event"] for e in found["events"]}

                wait_until(produced, timeout=20, what=f"traced/{partition} from {server.server_id}")
            keyed = admin.trace_key("traced", "k-order-7")
            assert sorted(m["partition"] for m in keyed) == list(range(6))  # every trace partition was asked
    routes = cluster.routes("__talos_trace")
    assert len(set(routes.values())) > 1  # the trace partitions are spread: some answers were forwarded
