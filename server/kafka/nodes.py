"""Kafka's view of the cluster: every registered server with a Kafka listener is a broker, and a
partition's leader is its ring owner (what the SDK routes to).

Kafka names brokers by an int32 node id; Talos servers have string ids that are stable across restarts
(delayed reassignment counts on it), so a node id is a hash of the server id: the same server keeps its
node id, and every server computes the same one without asking anyone.

The hash keeps 24 bits, so a node id's first byte on the wire is zero, as a Kafka broker id's (small numbers)
always is: librdkafka (2.12) copies Metadata's cluster id up to the first zero byte rather than by its length,
and the controller id follows it. With a full 31-bit id it read on into the id's bytes, and its
``describe_cluster`` crashed the Python client on the resulting cluster id, which was not UTF-8.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from server.broker import Broker
from server.cluster import Owner

__all__ = ["Node", "leader_of", "node_id", "node_of", "nodes"]


@dataclass(frozen=True, slots=True)
class Node:
    node_id: int
    host: str
    port: int


def node_id(server_id: str) -> int:
    return zlib.crc32(server_id.encode()) & 0xFFFFFF


def _node(server_id: str, address: str) -> Node | None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return None
    return Node(node_id(server_id), host.strip("[]"), int(port))


def nodes(broker: Broker, listener: str | None = None) -> list[Node]:
    """The brokers a Metadata answer lists: this server, and every live server with a Kafka listener, each at its
    address of ``listener`` (the listener the client connected to, by name: ``server.kafka_listeners``)."""
    config = broker.config
    me = broker.cluster.server_id if broker.cluster is not None else config.member_id
    found: dict[str, Node] = {}
    if broker.cluster is not None:
        for server in list(broker.cluster.servers.values()):
            address = server.kafka_address(listener)
            if address and (node := _node(server.server_id, address)) is not None:
                found[server.server_id] = node
    if me not in found and (own := _node(me, config.kafka_address_of(listener))) is not None:
        found[me] = own
    return sorted(found.values(), key=lambda n: n.node_id)


def node_of(broker: Broker, owner: Owner, listener: str | None = None) -> Node | None:
    """The broker serving what ``owner`` owns, at its address of ``listener``; None while it is not registered
    (or has no Kafka listener)."""
    if owner.local:
        return _node(owner.server_id, broker.config.kafka_address_of(listener))
    if broker.cluster is None:
        return None
    server = broker.cluster.servers.get(owner.server_id)
    address = server.kafka_address(listener) if server is not None else ""
    return _node(owner.server_id, address) if address else None


def leader_of(broker: Broker, topic: str, partition: int) -> int:
    """The node id of the partition's owner; -1 while it has no registered owner."""
    node = node_of(broker, broker.owner(topic, partition))
    return -1 if node is None else node.node_id
