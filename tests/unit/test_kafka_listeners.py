"""Kafka's ``listeners`` / ``advertised.listeners`` as configured (``server.kafka_listeners``), and the brokers a
Metadata answer lists per listener (``server.kafka.nodes``): each server at its address of the listener the client
connected to."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from server.config import ServerConfig
from server.coordination.registry import LiveServer
from server.kafka.nodes import node_id, node_of, nodes
from server.kafka_listeners import KafkaListenerSpec, parse_listeners


def _parse(listeners: str, advertised: str = "", *, port: int = 0, tls: bool = True) -> list[KafkaListenerSpec]:
    return parse_listeners(listeners, advertised, port=port, port_advertised="", host="10.0.0.5", tls=tls)


def test_listeners_are_opened_where_named_and_advertised_by_name() -> None:
    specs = _parse("PLAINTEXT://:9092, ssl://0.0.0.0:9093", "SSL://kafka.example.com:443")
    assert specs == [
        KafkaListenerSpec("PLAINTEXT", "10.0.0.5", 9092, "10.0.0.5:9092", False),
        KafkaListenerSpec("SSL", "0.0.0.0", 9093, "kafka.example.com:443", True),
    ]
    assert [s.protocol(sasl=True) for s in specs] == ["SASL_PLAINTEXT", "SASL_SSL"]
    assert _parse("SASL_SSL://[::1]:9093")[0] == KafkaListenerSpec("SASL_SSL", "::1", 9093, "::1:9093", True)


def test_kafka_port_alone_is_one_listener_tls_when_a_certificate_is_set() -> None:
    assert _parse("", port=9092, tls=False) == [
        KafkaListenerSpec("PLAINTEXT", "10.0.0.5", 9092, "10.0.0.5:9092", False)
    ]
    assert _parse("", port=9092)[0].name == "SSL"
    assert _parse("", port=0) == []


@pytest.mark.parametrize(
    ("listeners", "advertised", "port", "tls", "complaint"),
    [
        ("PLAINTEXT://:9092,SSL://:9092", "", 0, True, "a port of its own"),
        ("PLAINTEXT://:9092,PLAINTEXT://:9093", "", 0, True, "given twice"),
        ("INTERNAL://:9092", "", 0, True, "NAME://HOST:PORT"),
        ("PLAINTEXT://:http", "", 0, True, "NAME://HOST:PORT"),
        ("PLAINTEXT://:70000", "", 0, True, "NAME://HOST:PORT"),
        ("127.0.0.1:9092", "", 0, True, "NAME://HOST:PORT"),
        ("SSL://:9093", "", 0, False, "needs a TLS certificate"),
        ("PLAINTEXT://:9092", "SSL://x:1", 0, True, "not opened: SSL"),
        ("PLAINTEXT://:9092", "", 9092, True, "set one"),
        ("", "PLAINTEXT://x:1", 0, True, "needs kafka_listeners"),
    ],
)
def test_wrong_listeners_say_what_is_wrong(
    listeners: str, advertised: str, port: int, tls: bool, complaint: str
) -> None:
    with pytest.raises(ValueError, match=complaint):
        _parse(listeners, advertised, port=port, tls=tls)


def _broker(config: ServerConfig, servers: dict[str, LiveServer]) -> Any:
    cluster = SimpleNamespace(server_id="me", servers=servers)
    return SimpleNamespace(config=config, cluster=cluster)


def test_metadata_lists_every_broker_at_its_address_of_the_clients_listener() -> None:
    config = ServerConfig(
        kafka_listeners="PLAINTEXT://:9092,SSL://:9093",
        kafka_advertised_listeners="PLAINTEXT://me.internal:9092,SSL://me.example.com:9093",
        tls_cert_file="cert.pem",
    )
    two = {"PLAINTEXT": "peer.internal:9092", "SSL": "peer.example.com:9093"}
    servers = {
        "peer": LiveServer("peer", "https://peer", 0.0, "peer.internal:9092", kafka_listeners=two),
        "old": LiveServer("old", "https://old", 0.0, "old.internal:9092"),  # one listener: its only address
    }
    broker = _broker(config, servers)
    by_listener = {
        listener: {(n.host, n.port) for n in nodes(broker, listener)} for listener in ("PLAINTEXT", "SSL", None)
    }
    assert by_listener["SSL"] == {("me.example.com", 9093), ("peer.example.com", 9093), ("old.internal", 9092)}
    assert by_listener["PLAINTEXT"] == {("me.internal", 9092), ("peer.internal", 9092), ("old.internal", 9092)}
    assert by_listener[None] == by_listener["PLAINTEXT"]  # the first listener's
    owner = SimpleNamespace(server_id="peer", local=False)
    node = node_of(broker, owner, "SSL")  # type: ignore[arg-type]
    assert node is not None and (node.node_id, node.host, node.port) == (node_id("peer"), "peer.example.com", 9093)
