"""The Kafka admin APIs with auth on: a tenant (SASL PLAIN, its token as the password) describes the topics it may
see and alters, grows and deletes records of the ones it may administer; another tenant's topic is unknown to it
(as on REST), a topic it was granted to consume it may describe but not change; a group is deleted only by its
owner; the broker's configs are anyone's to read and nobody's to change over Kafka."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    ResourceType,
)

from server.devservices import free_port
from server.kafka.protocol.errors import ErrorCode
from tests.helpers import SecuredStandalone, secured_standalone
from tests.kafka_wire import KafkaWire

pytestmark = pytest.mark.slow  # a real server and clients


class Secured:
    def __init__(self, standalone: SecuredStandalone, port: int) -> None:
        self.standalone = standalone
        self.bootstrap = f"127.0.0.1:{port}"

    def conf(self, who: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "socket.timeout.ms": 10000,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": who,
            "sasl.password": self.standalone.token(who),
        }

    def admin(self, who: str) -> AdminClient:
        return AdminClient(self.conf(who))


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    port = free_port()
    tenants = {"acme": None, "globex": None}
    data = tmp_path_factory.mktemp("kafka-admin-tenants") / "data"
    with secured_standalone(data, tenants, env={"TALOS_KAFKA_PORT": str(port)}) as standalone:
        yield Secured(standalone, port)


def _topic(secured: Secured, owner: str, partitions: int = 2) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    with secured.standalone.admin(owner) as admin:
        admin.create_topic(name, partitions=partitions)
    return name


def _code(future: Any) -> int:
    try:
        future.result(timeout=30)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return 0


def _describe(admin: AdminClient, topic: str) -> Any:
    [future] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)], request_timeout=15).values()
    return future


def _set_retention(admin: AdminClient, topic: str, value: str) -> Any:
    entry = ConfigEntry("retention.ms", value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    [future] = admin.incremental_alter_configs([resource], request_timeout=15).values()
    return future


def _everything_refused(admin: AdminClient, topic: str, describe: int, change: int) -> None:
    assert _code(_describe(admin, topic)) == describe
    assert _code(_set_retention(admin, topic, "1000")) == change
    replace = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "1000"})
    [future] = admin.alter_configs([replace], request_timeout=15).values()
    assert _code(future) == change
    [future] = admin.create_partitions([NewPartitions(topic, 4)], request_timeout=15).values()
    assert _code(future) == change


def test_a_tenant_administers_its_own_topic_and_nobody_elses(secured: Secured) -> None:
    orders = _topic(secured, "acme")
    producer = Producer(secured.conf("acme"))
    for i in range(10):
        producer.produce(orders, value=b"%d" % i, partition=0)
    assert producer.flush(20) == 0
    acme, globex = secured.admin("acme"), secured.admin("globex")
    # its owner: everything
    assert _code(_set_retention(acme, orders, "60000")) == 0
    assert _describe(acme, orders).result()["retention.ms"].value == "60000"
    [future] = acme.create_partitions([NewPartitions(orders, 3)], request_timeout=15).values()
    assert _code(future) == 0
    [future] = acme.delete_records([TopicPartition(orders, 0, 2)], request_timeout=15).values()
    assert future.result().low_watermark == 2
    # another tenant: the topic does not exist for it, as on REST
    unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    _everything_refused(globex, orders, unknown, unknown)
    with KafkaWire(secured.bootstrap) as wire:  # DeleteRecords sent anyway (the client finds no leader to send to)
        assert wire.login(secured.standalone.token("globex"))["error_code"] == 0
        body = {"topics": [{"name": orders, "partitions": [{"partition_index": 0, "offset": -1}]}], "timeout_ms": 5000}
        [part] = wire.call(21, 2, body)["topics"][0]["partitions"]
        assert part["error_code"] == unknown
    # granted consume: it may see the settings, not change them, nor delete records
    with secured.standalone.admin("acme") as admin:
        admin.grant(orders, "globex", ["consume"])
    try:
        assert _describe(globex, orders).result()["retention.ms"].value == "60000"
        _everything_refused(globex, orders, 0, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        [future] = globex.delete_records([TopicPartition(orders, 0, 5)], request_timeout=15).values()
        assert _code(future) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    finally:
        with secured.standalone.admin("acme") as admin:
            admin.revoke(orders, "globex")
    with secured.standalone.admin("admin") as admin:
        info = admin.describe_topic(orders)
    assert (info.partitions, info.retention_ms) == (3, 60000)  # nothing globex tried changed anything
    assert info.partition_offsets[0].earliest == 2


def test_the_admin_administers_every_topic_and_anyone_reads_the_broker(secured: Secured) -> None:
    orders = _topic(secured, "acme")
    admin = secured.admin("admin")
    assert _code(_set_retention(admin, orders, "5000")) == 0
    [future] = admin.delete_records([TopicPartition(orders, 1, -1)], request_timeout=15).values()
    assert future.result().low_watermark == 0
    globex = secured.admin("globex")
    [broker_id] = globex.list_topics(timeout=10).brokers
    [future] = globex.describe_configs([ConfigResource(ResourceType.BROKER, str(broker_id))]).values()
    configs = future.result()
    assert configs["advertised.listeners"].value == f"SASL_PLAINTEXT://{secured.bootstrap}"
    for client in (globex, admin):
        resource = ConfigResource(ResourceType.BROKER, str(broker_id), set_config={"num.partitions": "3"})
        [future] = client.alter_configs([resource]).values()
        assert _code(future) == ErrorCode.POLICY_VIOLATION
    described = globex.describe_cluster(include_authorized_operations=True, request_timeout=10).result()
    assert described.cluster_id == "talos"


def _commit(secured: Secured, who: str, group: str, topic: str) -> None:
    consumer = Consumer({**secured.conf(who), "group.id": group, "enable.auto.commit": False})
    try:
        offsets = [TopicPartition(topic, 0, 0)]
        consumer.assign(offsets)
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()


def test_only_a_groups_owner_deletes_it_or_its_offsets(secured: Secured) -> None:
    orders = _topic(secured, "acme")
    group = f"g-{uuid.uuid4().hex[:8]}"
    _commit(secured, "acme", group, orders)  # acme's commit claims the group for acme
    globex = secured.admin("globex")
    [future] = globex.delete_consumer_groups([group], request_timeout=15).values()
    assert _code(future) == ErrorCode.GROUP_AUTHORIZATION_FAILED
    with KafkaWire(secured.bootstrap) as wire:
        assert wire.login(secured.standalone.token("globex"))["error_code"] == 0
        body = {"group_id": group, "topics": [{"name": orders, "partitions": [{"partition_index": 0}]}]}
        assert wire.call(47, 0, body)["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED
    with secured.standalone.admin("acme") as admin:
        admin.grant_group(group, "globex")
        admin.grant(orders, "globex", ["consume"])
    try:  # granted the group: it may use it, not delete it
        [future] = globex.delete_consumer_groups([group], request_timeout=15).values()
        assert _code(future) == ErrorCode.GROUP_AUTHORIZATION_FAILED
    finally:
        with secured.standalone.admin("acme") as admin:
            admin.revoke_group(group, "globex")
            admin.revoke(orders, "globex")
    with secured.standalone.admin("acme") as admin:
        assert admin.describe_group(group)["partitions"][0]["committed"] == 0  # still there
    acme = secured.admin("acme")  # kept: a client collected before its futures end destroys them
    [future] = acme.delete_consumer_groups([group], request_timeout=15).values()
    assert _code(future) == 0
    deadline = time.monotonic() + 10
    with secured.standalone.admin("acme") as admin:
        while group in admin.list_groups():
            assert time.monotonic() < deadline
            time.sleep(0.1)
