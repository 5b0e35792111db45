"""Broker.topic's ZooKeeper read of a name it does not know runs on the event loop: it is bounded, a read still
unanswered makes the next lookups answer 503 at once, and ``known_only`` never reads."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
from kazoo.exceptions import NoNodeError
from kazoo.handlers.threading import SequentialThreadingHandler

from server.broker import Broker
from server.errors import ApiError
from server.topics import TopicConfig


class _Zk:
    """What Broker.topic uses of a KazooClient: ``connected`` and ``get_async`` (kazoo's own async results)."""

    def __init__(self) -> None:
        self.connected = True
        self.handler = SequentialThreadingHandler()
        self.nodes: dict[str, bytes] = {}
        self.hang = False
        self.reads: list[str] = []
        self.pending: list[Any] = []

    def get_async(self, path: str) -> Any:
        self.reads.append(path)
        result = self.handler.async_result()
        if self.hang:
            self.pending.append(result)  # answered later (or never)
        elif path in self.nodes:
            result.set((self.nodes[path], None))
        else:
            result.set_exception(NoNodeError())
        return result


class _Cluster:
    def __init__(self, zk: _Zk) -> None:
        self.zk = zk


def _broker(zk: _Zk, *, read_s: float = 0.2) -> Broker:
    broker = Broker.__new__(Broker)  # only what topic() touches
    broker._topics = {}
    broker.cluster = _Cluster(zk)  # type: ignore[assignment]
    broker._TOPIC_READ_S = read_s
    return broker


def test_a_topic_created_elsewhere_is_read_once_and_kept() -> None:
    zk = _Zk()
    zk.nodes["/talos/topics/orders"] = orjson.dumps(TopicConfig("orders", 3).to_json())
    broker = _broker(zk)
    assert broker.topic("orders").partitions == 3
    assert broker.topic("orders").partitions == 3
    assert len(zk.reads) == 1, "a known topic is not read again"


def test_an_unknown_name_is_404_after_one_read() -> None:
    zk = _Zk()
    broker = _broker(zk)
    with pytest.raises(ApiError) as raised:
        broker.topic("nowhere")
    assert raised.value.status == 404
    assert zk.reads == ["/talos/topics/nowhere"]


def test_known_only_never_reads() -> None:
    zk = _Zk()
    zk.nodes["/talos/topics/orders"] = orjson.dumps(TopicConfig("orders", 3).to_json())
    broker = _broker(zk)
    with pytest.raises(ApiError) as raised:
        broker.topic("orders", known_only=True)
    assert raised.value.status == 404
    assert zk.reads == []


def test_a_read_zookeeper_does_not_answer_is_bounded_and_not_repeated_while_unanswered() -> None:
    zk = _Zk()
    zk.hang = True
    broker = _broker(zk, read_s=0.2)
    began = time.monotonic()
    with pytest.raises(ApiError) as raised:
        broker.topic("orders")
    assert 0.15 <= time.monotonic() - began < 1.0, "the event loop waited longer than the bound"
    assert raised.value.status == 503 and raised.value.retriable
    began = time.monotonic()
    with pytest.raises(ApiError) as again:
        broker.topic("payments")
    assert time.monotonic() - began < 0.05, "while a read is unanswered the next lookup must not wait again"
    assert again.value.status == 503 and "waits for ZooKeeper" in again.value.message
    assert len(zk.reads) == 1
    zk.pending[0].set_exception(NoNodeError())  # ZooKeeper answers at last
    zk.hang = False
    zk.nodes["/talos/topics/payments"] = orjson.dumps(TopicConfig("payments", 2).to_json())
    assert broker.topic("payments").partitions == 2


def test_disconnected_from_zookeeper_is_503_without_a_read() -> None:
    zk = _Zk()
    zk.connected = False
    broker = _broker(zk)
    with pytest.raises(ApiError) as raised:
        broker.topic("orders")
    assert raised.value.status == 503 and "reconnects to ZooKeeper" in raised.value.message
    assert zk.reads == []
