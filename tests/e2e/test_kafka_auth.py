"""The Kafka listener with auth on: a tenant's token over SASL (PLAIN or OAUTHBEARER) gets exactly what it
gets over REST — its own topics and groups, what grants give it of others', nothing of the rest, its quota
on partitions — a wrong token is refused, a connection without SASL is closed, and a revoked token stops
working on connections already open."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from server.devservices import free_port
from tests.helpers import SecuredStandalone, secured_standalone
from tests.kafka_wire import KafkaWire

TOPIC_AUTHORIZATION_FAILED = 29
UNKNOWN_TOPIC_OR_PARTITION = 3

pytestmark = pytest.mark.slow  # real servers and clients, seconds each


class Secured:
    def __init__(self, standalone: SecuredStandalone, port: int) -> None:
        self.standalone = standalone
        self.bootstrap = f"127.0.0.1:{port}"

    def conf(self, token: str | None, mechanism: str = "PLAIN") -> dict[str, Any]:
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 5000}
        if token is None:
            return conf
        conf.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism})
        if mechanism == "PLAIN":
            conf.update({"sasl.username": "tenant", "sasl.password": token})
        else:
            conf["oauth_cb"] = lambda _config: (token, time.time() + 3600)
        return conf

    def tenant(self, name: str, mechanism: str = "PLAIN") -> dict[str, Any]:
        return self.conf(self.standalone.tokens[name], mechanism)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    port = free_port()
    tenants = {"acme": {"partitions": 8}, "globex": None}
    data = tmp_path_factory.mktemp("kafka-auth") / "data"
    env = {"TALOS_KAFKA_PORT": str(port), "TALOS_LOG_LEVEL": "debug"}
    with secured_standalone(data, tenants, env=env) as standalone:
        with standalone.admin("acme") as acme:
            acme.create_topic("orders", partitions=2)
        yield Secured(standalone, port)


def _produce(conf: dict[str, Any], topic: str, values: list[bytes]) -> list[KafkaError | None]:
    errors: list[KafkaError | None] = []
    producer = Producer({**conf, "message.timeout.ms": 8000})
    for value in values:
        producer.produce(topic, value=value, on_delivery=lambda error, _message: errors.append(error))
    producer.flush(20)
    return errors


def _read(conf: dict[str, Any], topic: str, partitions: int, count: int) -> list[bytes]:
    consumer = Consumer({**conf, "group.id": f"reader-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("mechanism", ["PLAIN", "OAUTHBEARER"])
def test_a_tenant_produces_and_consumes_its_own_topic(secured: Secured, mechanism: str) -> None:
    conf = secured.tenant("acme", mechanism)
    values = [f"{mechanism}-{i}".encode() for i in range(10)]
    assert _produce(conf, "orders", values) == [None] * 10
    with secured.standalone.admin("admin") as admin:
        stored = sum(int(admin.offsets("orders", p)["latest"]) for p in range(2))
    assert set(values) <= set(_read(conf, "orders", 2, stored))


def test_another_tenant_sees_nothing_of_it_until_granted(secured: Secured) -> None:
    globex = secured.tenant("globex")
    names = AdminClient(globex).list_topics(timeout=10).topics
    assert "orders" not in names  # as REST's topic list: not even its name
    [error] = _produce(globex, "orders", [b"forged"])  # the client never learns of a partition to send to
    assert error is not None and error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._MSG_TIMED_OUT)
    with KafkaWire(secured.bootstrap) as wire:  # and sent anyway: answered as REST answers (404, unknown)
        assert wire.login(secured.standalone.tokens["globex"])["error_code"] == 0
        assert wire.produce("orders", 0, [b"forged"])["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
    with secured.standalone.admin("acme") as acme:
        acme.grant("orders", "globex", ["consume"])
    try:
        assert _read(globex, "orders", 2, 1)  # it may read now
        [error] = _produce(globex, "orders", [b"still forged"])
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        with KafkaWire(secured.bootstrap) as wire:
            assert wire.login(secured.standalone.tokens["globex"], "OAUTHBEARER")["error_code"] == 0
            assert wire.produce("orders", 1, [b"forged"])["error_code"] == TOPIC_AUTHORIZATION_FAILED
    finally:
        with secured.standalone.admin("acme") as acme:
            acme.revoke("orders", "globex")
    with secured.standalone.admin("admin") as admin:
        stored = sum(int(admin.offsets("orders", p)["latest"]) for p in range(2))
    assert b"forged" not in _read(secured.tenant("acme"), "orders", 2, stored)


def test_topics_made_over_kafka_are_the_tenants_and_count_against_its_quota(secured: Secured) -> None:
    admin = AdminClient(secured.tenant("acme"))
    name = f"mine-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(name, num_partitions=2)])[name].result(20)
    with secured.standalone.client("admin") as talos:
        assert talos.get(f"/v1/topics/{name}").json()["tenant"] == "acme"
    big = f"big-{uuid.uuid4().hex[:6]}"
    with pytest.raises(KafkaException) as over:  # acme's quota is 8 partitions: orders 2 + 2 here + 10 > 8
        admin.create_topics([NewTopic(big, num_partitions=10)])[big].result(20)
    assert over.value.args[0].code() == KafkaError.POLICY_VIOLATION
    foreigner = AdminClient(secured.tenant("globex"))  # kept: a client destroyed early fails its futures
    with pytest.raises(KafkaException) as foreign:  # globex may not delete acme's topic: unknown to it
        foreigner.delete_topics([name])[name].result(20)
    assert foreign.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    admin.delete_topics([name])[name].result(20)


def test_a_tenants_group_is_not_anothers(secured: Secured) -> None:
    group = f"billing-{uuid.uuid4().hex[:6]}"
    first = Consumer({**secured.tenant("acme"), "group.id": group, "auto.offset.reset": "earliest"})
    first.subscribe(["orders"])
    try:
        deadline = time.monotonic() + 20
        while not first.assignment() and time.monotonic() < deadline:
            first.poll(0.5)
        assert first.assignment()
        with secured.standalone.admin("acme") as acme:
            acme.grant("orders", "globex", ["consume"])
        intruder = Consumer({**secured.tenant("globex"), "group.id": group})
        try:
            with pytest.raises(KafkaException) as denied:
                intruder.commit(offsets=[TopicPartition("orders", 0, 1)], asynchronous=False)
            assert denied.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
        finally:
            intruder.close()
            with secured.standalone.admin("acme") as acme:
                acme.revoke("orders", "globex")
    finally:
        first.close()


def test_a_wrong_token_or_no_sasl_is_refused(secured: Secured) -> None:
    for conf in (secured.conf("talos_" + "x" * 40), secured.conf(None)):
        with pytest.raises(KafkaException):
            AdminClient(conf).list_topics(timeout=3)
    with KafkaWire(secured.bootstrap) as wire:
        answer = wire.login("talos_" + "y" * 40)
        assert answer["error_code"] == KafkaError.SASL_AUTHENTICATION_FAILED
        assert "not valid" in answer["error_message"]
        with pytest.raises(ConnectionError):  # and the connection is closed after the answer
            wire.call(3, 12, {"topics": None})
    with KafkaWire(secured.bootstrap) as wire, pytest.raises(ConnectionError):  # nothing before SASL
        wire.call(3, 12, {"topics": None})


@pytest.mark.slow
def test_a_revoked_token_stops_working_on_open_connections(secured: Secured) -> None:
    with secured.standalone.admin("admin") as admin:
        made = admin.create_token("acme", name="short-lived")
    producer_conf = secured.conf(made["token"])
    producer = Producer({**producer_conf, "message.timeout.ms": 5000})
    delivered: list[KafkaError | None] = []
    producer.produce("orders", value=b"before", on_delivery=lambda e, _m: delivered.append(e))
    producer.flush(20)
    assert delivered == [None]
    with secured.standalone.admin("admin") as admin:
        admin.revoke_token("acme", made["id"])
    time.sleep(3)  # the server re-reads tokens every security_refresh_s (2 s)
    producer.produce("orders", value=b"after", on_delivery=lambda e, _m: delivered.append(e))
    producer.flush(20)
    assert delivered[1] is not None, "a revoked token still produced"
