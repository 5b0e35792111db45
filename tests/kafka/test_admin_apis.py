"""The Kafka listener's admin APIs against Kafka clients no one here wrote — confluent-kafka's AdminClient
(librdkafka), kafka-python's and aiokafka's, ``kcat -L`` — and a real ``talos standalone --kafka-port``: topic
and broker configs described, altered whole and incrementally, more partitions, records deleted, the cluster
described, groups and their offsets deleted; and DeleteRecords on REST, in the SDK and the CLI, the same log start
the Kafka clients see."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from server.kafka.protocol.errors import ErrorCode
from server.topic_configs import KAFKA_SETTINGS, READ_ONLY
from talos import Admin, AsyncAdmin, OffsetOutOfRangeError
from talos.cli import main as talos_cli
from tests.helpers import KafkaStandalone, running_kafka_standalone
from tests.kafka_wire import KafkaWire

pytestmark = pytest.mark.slow  # a real server and clients

SEGMENT_BYTES = 4 * 1024 * 1024  # the server's, so that a topic's unset segment.bytes shows it


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaStandalone]:
    with running_kafka_standalone(
        tmp_path_factory.mktemp("kafka-admin") / "data", env={"TALOS_SEGMENT_BYTES": str(SEGMENT_BYTES)}
    ) as running:
        yield running


@pytest.fixture(scope="module")
def admin(kafka: KafkaStandalone) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka.bootstrap, "socket.timeout.ms": 10000})


def _topic(kafka: KafkaStandalone, partitions: int = 1, **settings: Any) -> str:
    name = f"a-{uuid.uuid4().hex[:10]}"
    with Admin(kafka.url) as talos:
        talos.create_topic(name, partitions=partitions, **settings)
    return name


def _produce(kafka: KafkaStandalone, topic: str, partitions: int, per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5})
    for partition in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=partition)
    assert producer.flush(30) == 0


def _configs(admin: AdminClient, topic: str) -> dict[str, Any]:
    [future] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)], request_timeout=15).values()
    return dict(future.result())


def _error_code(future: Any) -> int:
    with pytest.raises(KafkaException) as info:
        future.result(timeout=30)
    return int(info.value.args[0].code())


def _wait_for(condition: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


# ---------------------------------------------------------------- DescribeConfigs


def test_describe_configs_of_a_topic(kafka: KafkaStandalone, admin: AdminClient) -> None:
    topic = _topic(kafka, cleanup_policy="compact", retention_ms=3_600_000)
    configs = _configs(admin, topic)
    assert set(configs) == {s.name for s in KAFKA_SETTINGS} | set(READ_ONLY) | {"max.message.bytes"}
    set_here = {name for name, entry in configs.items() if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    assert set_here == {"cleanup.policy", "retention.ms"}
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.bytes"].value == "-1"  # unlimited
    assert configs["retention.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["segment.bytes"].value == str(SEGMENT_BYTES)  # the server's, the topic leaving it unset
    assert configs["max.message.bytes"].value == str(8 * 1024 * 1024)  # the server's max_request_bytes
    for name, entry in configs.items():
        assert entry.is_read_only == (name in READ_ONLY or name == "max.message.bytes"), name
        assert not entry.is_sensitive
    # What Quix Streams reads back (its inspect_topics): the values as strings it can parse
    assert int(configs["retention.ms"].value) == 3_600_000


def test_describe_configs_every_version_with_keys_synonyms_and_documentation(kafka: KafkaStandalone) -> None:
    topic = _topic(kafka, retention_bytes=1 << 30)
    resource = {"resource_type": 2, "resource_name": topic, "configuration_keys": ["retention.bytes", "nope"]}
    with KafkaWire(kafka.bootstrap) as wire:
        for version in range(5):
            body = {"resources": [resource], "include_synonyms": True, "include_documentation": True}
            [result] = wire.call(32, version, body)["results"]
            assert result["error_code"] == 0
            [config] = result["configs"]  # only the key asked for (and known)
            assert (config["name"], config["value"]) == ("retention.bytes", str(1 << 30))
            if version == 0:
                assert config["is_default"] is False
            else:
                assert config["config_source"] == 1  # DYNAMIC_TOPIC_CONFIG
                assert [s["name"] for s in config["synonyms"]] == ["retention.bytes", "log.retention.bytes"]
            if version >= 3:
                assert config["config_type"] == 5  # LONG
                assert "size" in config["documentation"]
        everything = {"resource_type": 2, "resource_name": topic, "configuration_keys": None}
        [result] = wire.call(32, 4, {"resources": [everything]})["results"]
        assert len(result["configs"]) == len(KAFKA_SETTINGS) + len(READ_ONLY) + 1
        assert all(c["documentation"] is None and c["synonyms"] == [] for c in result["configs"])  # not asked
        missing = {"resource_type": 2, "resource_name": "no-such-topic", "configuration_keys": None}
        unknown_type = {"resource_type": 8, "resource_name": "x", "configuration_keys": None}
        results = wire.call(32, 1, {"resources": [missing, unknown_type]})["results"]
        assert [r["error_code"] for r in results] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_REQUEST]


def test_describe_configs_of_the_broker(kafka: KafkaStandalone, admin: AdminClient) -> None:
    [broker_id] = admin.list_topics(timeout=10).brokers
    [future] = admin.describe_configs([ConfigResource(ResourceType.BROKER, str(broker_id))]).values()
    configs = future.result()
    expected = {
        "default.replication.factor": "1",
        "auto.create.topics.enable": "false",
        "log.cleanup.policy": "delete",
        "log.retention.ms": "-1",
        "log.segment.bytes": str(SEGMENT_BYTES),
        "num.partitions": "1",
        "message.max.bytes": str(8 * 1024 * 1024),
        "broker.id": str(broker_id),
        "min.insync.replicas": "1",
    }
    assert {name: configs[name].value for name in expected} == expected
    assert all(entry.is_read_only for entry in configs.values())
    assert configs["log.retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["message.max.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    with KafkaWire(kafka.bootstrap) as wire:  # "" is the cluster-wide defaults; another id is not a broker here
        resources = [
            {"resource_type": 4, "resource_name": "", "configuration_keys": ["num.partitions"]},
            {"resource_type": 4, "resource_name": str(broker_id + 1), "configuration_keys": None},
        ]
        default, other = wire.call(32, 4, {"resources": resources})["results"]
    assert default["error_code"] == 0
    assert [(c["name"], c["value"]) for c in default["configs"]] == [("num.partitions", "1")]
    assert other["error_code"] == ErrorCode.INVALID_REQUEST


def test_kafka_python_and_aiokafka_describe_configs(kafka: KafkaStandalone) -> None:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource as AioResource
    from aiokafka.admin.config_resource import ConfigResourceType
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as PyResource

    topic = _topic(kafka, cleanup_policy="compact,delete", min_compaction_lag_ms=1000)
    client = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    try:
        described = client.describe_configs([PyResource("TOPIC", topic)])  # only the modified ones by default
        found = {name: config["value"] for name, config in described["topic"][topic].items()}
        assert found == {"cleanup.policy": "compact,delete", "min.compaction.lag.ms": "1000"}
    finally:
        client.close()

    async def aio() -> dict[str, str]:
        aio_admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
        await aio_admin.start()
        try:
            [response] = await aio_admin.describe_configs([AioResource(ConfigResourceType.TOPIC, topic)])
            [resource] = response.resources
            return {name: value for name, value, *_ in resource[4]}
        finally:
            await aio_admin.close()

    values = asyncio.run(aio())
    assert values["cleanup.policy"] == "compact,delete"
    assert values["retention.ms"] == "-1"


def test_create_topics_takes_fixed_configs_at_their_value(kafka: KafkaStandalone, admin: AdminClient) -> None:
    fine, wrong = f"c-{uuid.uuid4().hex[:8]}", f"c-{uuid.uuid4().hex[:8]}"
    config = {"cleanup.policy": "compact", "min.insync.replicas": "1", "compression.type": "producer"}
    futures = admin.create_topics(
        [NewTopic(fine, 1, 1, config=config), NewTopic(wrong, 1, 1, config={"min.insync.replicas": "2"})],
        request_timeout=15,
    )
    futures[fine].result(timeout=30)
    assert _error_code(futures[wrong]) == ErrorCode.INVALID_CONFIG
    assert _configs(admin, fine)["cleanup.policy"].value == "compact"


# ---------------------------------------------------------------- AlterConfigs, IncrementalAlterConfigs


def _incremental(admin: AdminClient, topic: str, *entries: ConfigEntry, validate_only: bool = False) -> Any:
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=list(entries))
    [future] = admin.incremental_alter_configs([resource], validate_only=validate_only).values()
    return future


def test_incremental_alter_configs(kafka: KafkaStandalone, admin: AdminClient) -> None:
    topic = _topic(kafka)
    set_ = AlterConfigOpType.SET
    _incremental(
        admin,
        topic,
        ConfigEntry("retention.ms", "60000", incremental_operation=set_),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ).result()
    with Admin(kafka.url) as talos:  # through the same service as REST's PATCH: the topic's settings
        info = talos.describe_topic(topic)
    assert (info.retention_ms, info.cleanup_policy) == (60000, "compact,delete")
    assert info.version == 2  # one change
    _incremental(
        admin, topic, ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)
    )
    _wait_for(lambda: _configs(admin, topic)["cleanup.policy"].value == "compact")
    _incremental(admin, topic, ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE))
    _wait_for(lambda: _configs(admin, topic)["retention.ms"].value == "-1")
    # validate_only: checked, not changed
    _incremental(
        admin, topic, ConfigEntry("segment.ms", "1000", incremental_operation=set_), validate_only=True
    ).result()
    assert _configs(admin, topic)["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    # refused: a value of the wrong type, a config Talos does not have, a fixed one, appending to a number
    refused = [
        ConfigEntry("retention.ms", "soon", incremental_operation=set_),
        ConfigEntry("flush.ms", "1000", incremental_operation=set_),
        ConfigEntry("min.insync.replicas", "2", incremental_operation=set_),
        ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("cleanup.policy", "forever", incremental_operation=set_),
    ]
    for entry in refused:
        assert _error_code(_incremental(admin, topic, entry)) == ErrorCode.INVALID_CONFIG, entry
    # a fixed config at its one value is accepted and changes nothing
    _incremental(admin, topic, ConfigEntry("min.insync.replicas", "1", incremental_operation=set_)).result()
    assert _error_code(
        _incremental(admin, "no-such-topic", ConfigEntry("retention.ms", "1", incremental_operation=set_))
    ) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def test_alter_configs_replaces_the_whole_set(kafka: KafkaStandalone, admin: AdminClient) -> None:
    topic = _topic(kafka, cleanup_policy="compact", retention_ms=1000, delete_retention_ms=5000)
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.bytes": "123456"})
    [future] = admin.alter_configs([resource]).values()
    future.result()
    with Admin(kafka.url) as talos:
        info = talos.describe_topic(topic)
    # as Kafka's AlterConfigs: what it does not name goes back to its default
    assert (info.retention_bytes, info.retention_ms, info.cleanup_policy) == (123456, None, "delete")
    assert info.delete_retention_ms == 86_400_000
    [future] = admin.alter_configs(
        [ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.bytes": "7"})], validate_only=True
    ).values()
    future.result()
    with Admin(kafka.url) as talos:
        assert talos.describe_topic(topic).retention_bytes == 123456
    [broker_id] = admin.list_topics(timeout=10).brokers
    broker = ConfigResource(ResourceType.BROKER, str(broker_id), set_config={"num.partitions": "3"})
    [future] = admin.alter_configs([broker]).values()
    assert _error_code(future) == ErrorCode.POLICY_VIOLATION
    broker = ConfigResource(
        ResourceType.BROKER,
        str(broker_id),
        incremental_configs=[ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)],
    )
    [future] = admin.incremental_alter_configs([broker]).values()
    assert _error_code(future) == ErrorCode.POLICY_VIOLATION


def test_kafka_python_alters_and_resets_configs(kafka: KafkaStandalone) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as PyResource

    topic = _topic(kafka)
    client = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    try:
        client.alter_configs([PyResource("TOPIC", topic, configs={"segment.ms": "600000", "retention.ms": "1000"})])
        with Admin(kafka.url) as talos:
            info = talos.describe_topic(topic)
        assert (info.segment_ms, info.retention_ms) == (600000, 1000)
        client.reset_configs([PyResource("TOPIC", topic, configs=["segment.ms"])])
        with Admin(kafka.url) as talos:
            info = talos.describe_topic(topic)
        assert (info.segment_ms, info.retention_ms) == (None, 1000)
    finally:
        client.close()


# ---------------------------------------------------------------- CreatePartitions


def test_create_partitions(kafka: KafkaStandalone, admin: AdminClient) -> None:
    topic = _topic(kafka, partitions=2)
    [future] = admin.create_partitions([NewPartitions(topic, 5)], validate_only=True).values()
    future.result()
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 2
    [future] = admin.create_partitions([NewPartitions(topic, 4)]).values()
    future.result()
    _wait_for(lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 4)
    _produce(kafka, topic, 4, 3)  # the new partitions take messages
    with Admin(kafka.url) as talos:
        assert [p.latest for p in talos.describe_topic(topic).partition_offsets] == [3, 3, 3, 3]
    for fewer_or_same in (3, 4):
        [future] = admin.create_partitions([NewPartitions(topic, fewer_or_same)]).values()
        assert _error_code(future) == ErrorCode.INVALID_PARTITIONS
    with KafkaWire(kafka.bootstrap) as wire:
        body = {"topics": [{"name": topic, "count": 6, "assignments": [{"broker_ids": [1]}, {"broker_ids": [1]}]}]}
        [result] = wire.call(37, 3, body)["results"]
        assert result["error_code"] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
        body = {"topics": [{"name": "no-such-topic", "count": 6, "assignments": None}]}
        [result] = wire.call(37, 0, body)["results"]
        assert result["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# ---------------------------------------------------------------- DeleteRecords (Kafka, REST, SDK, CLI)


def test_delete_records_over_kafka(kafka: KafkaStandalone, admin: AdminClient) -> None:
    topic = _topic(kafka, partitions=2)
    _produce(kafka, topic, 2, 10)
    futures = admin.delete_records([TopicPartition(topic, 0, 4), TopicPartition(topic, 1, -1)])
    low = {tp.partition: future.result().low_watermark for tp, future in futures.items()}
    assert low == {0: 4, 1: 10}  # -1: up to the high watermark
    [future] = admin.delete_records([TopicPartition(topic, 0, 11)]).values()  # past the end
    assert _error_code(future) == ErrorCode.OFFSET_OUT_OF_RANGE
    [future] = admin.delete_records([TopicPartition(topic, 0, 2)]).values()  # below the start: stays
    assert future.result().low_watermark == 4
    # readers see the new start: earliest is 4, and a consumer from 0 is reset to it
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "unused", "auto.offset.reset": "earliest"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (4, 10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        offsets: list[int] = []
        deadline = time.monotonic() + 20
        while len(offsets) < 6 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                offsets.append(message.offset())
        assert offsets == list(range(4, 10))
    finally:
        consumer.close()
    with Admin(kafka.url) as talos:
        assert [(p.earliest, p.latest) for p in talos.describe_topic(topic).partition_offsets] == [(4, 10), (10, 10)]


def test_kafka_python_and_aiokafka_delete_records(kafka: KafkaStandalone) -> None:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.records_to_delete import RecordsToDelete
    from aiokafka.structs import TopicPartition as AioPartition
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as PyPartition

    topic = _topic(kafka)
    _produce(kafka, topic, 1, 10)
    client = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    try:
        result = client.delete_records({PyPartition(topic, 0): 3})
        assert result[PyPartition(topic, 0)]["low_watermark"] == 3
    finally:
        client.close()

    async def aio() -> Any:
        aio_admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
        await aio_admin.start()
        try:
            return await aio_admin.delete_records({AioPartition(topic, 0): RecordsToDelete(7)})
        finally:
            await aio_admin.close()

    assert asyncio.run(aio()) == {AioPartition(topic, 0): 7}
    with Admin(kafka.url) as talos:
        assert talos.offsets(topic, 0)["earliest"] == 7


def test_delete_records_over_rest_the_sdk_and_the_cli(kafka: KafkaStandalone) -> None:
    topic = _topic(kafka, partitions=3)
    _produce(kafka, topic, 3, 10)
    with httpx.Client(base_url=kafka.url, timeout=30) as http:
        answer = http.post(f"/v1/topics/{topic}/delete-records", json={"partitions": [{"partition": 0, "offset": 5}]})
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"topic": topic, "partitions": [{"partition": 0, "low_watermark": 5}]}
        past = http.post(f"/v1/topics/{topic}/delete-records", json={"partitions": [{"partition": 1, "offset": 99}]})
        assert past.status_code == 416
        assert past.json()["error"]["code"] == "OFFSET_OUT_OF_RANGE"
        assert (past.json()["error"]["earliest"], past.json()["error"]["latest"]) == (0, 10)
        for body, status in (
            ({"partitions": [{"partition": 7, "offset": 1}]}, 404),  # no such partition
            ({"partitions": [{"partition": 0, "offset": -2}]}, 400),
            ({"partitions": [{"partition": 0, "offset": 1}, {"partition": 0, "offset": 2}]}, 400),
            ({"partitions": []}, 400),
            ({"offsets": {"0": 1}}, 400),
        ):
            refused = http.post(f"/v1/topics/{topic}/delete-records", json=body)
            assert refused.status_code == status, (body, refused.text)
            assert set(refused.json()["error"]) >= {"code", "message", "retriable"}
        missing = http.post(
            "/v1/topics/no-such-topic/delete-records", json={"partitions": [{"partition": 0, "offset": 0}]}
        )
        assert missing.status_code == 404
        one = http.post(f"/v1/topics/{topic}/partitions/2/delete-records", json={"offset": 2})
        assert one.json() == {"partition": 2, "low_watermark": 2}
    with Admin(kafka.url) as talos:
        assert talos.delete_records(topic, {1: 6, 2: -1}) == {1: 6, 2: 10}
        with pytest.raises(OffsetOutOfRangeError):
            talos.delete_records(topic, {0: 11})

    async def twin() -> dict[int, int]:
        async with AsyncAdmin(kafka.url) as talos:
            return await talos.delete_records(topic, {1: 7})

    assert asyncio.run(twin()) == {1: 7}
    result = CliRunner().invoke(talos_cli, ["topics", "delete-records", topic, "0=8", "--yes", "--url", kafka.url])
    assert result.exit_code == 0, result.output
    assert result.output == "partition 0\tearliest=8\n"
    result = CliRunner().invoke(talos_cli, ["topics", "delete-records", topic, "0:8", "--yes", "--url", kafka.url])
    assert result.exit_code != 0
    assert "PARTITION=OFFSET" in result.output


def test_cli_creates_and_alters_with_kafka_config_names(kafka: KafkaStandalone, admin: AdminClient) -> None:
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    runner = CliRunner()
    created = runner.invoke(
        talos_cli,
        ["topics", "create", topic, "--partitions", "2", "--config", "cleanup.policy=compact", "--config",
         "min.cleanable.dirty.ratio=0.25", "--url", kafka.url],
    )  # fmt: skip
    assert created.exit_code == 0, created.output
    configs = _configs(admin, topic)
    assert (configs["cleanup.policy"].value, configs["min.cleanable.dirty.ratio"].value) == ("compact", "0.25")
    altered = runner.invoke(
        talos_cli,
        ["topics", "alter", topic, "--partitions", "3", "--config", "retention.ms=1000", "--url", kafka.url],
    )
    assert altered.exit_code == 0, altered.output
    assert "3 partition(s)" in altered.output
    with Admin(kafka.url) as talos:
        assert talos.describe_topic(topic).retention_ms == 1000
    unlimited = runner.invoke(talos_cli, ["topics", "alter", topic, "--config", "retention.ms=-1", "--url", kafka.url])
    assert unlimited.exit_code == 0, unlimited.output
    with Admin(kafka.url) as talos:
        assert talos.describe_topic(topic).retention_ms is None
    validated = runner.invoke(
        talos_cli, ["topics", "alter", topic, "--config", "confluent.value.schema.validation=true", "--url", kafka.url]
    )
    assert validated.exit_code == 0, validated.output
    assert _configs(admin, topic)["confluent.value.schema.validation"].value == "true"  # Kafka's name and type
    for bad in ("flush.ms=1", "retention.ms", "retention.ms=soon", "confluent.key.schema.validation=maybe"):
        refused = runner.invoke(talos_cli, ["topics", "alter", topic, "--config", bad, "--url", kafka.url])
        assert refused.exit_code == 2, refused.output
        assert "--config" in refused.output
    nothing = runner.invoke(talos_cli, ["topics", "alter", topic, "--url", kafka.url])
    assert nothing.exit_code == 2
    assert "nothing to change" in nothing.output


# ---------------------------------------------------------------- DescribeCluster, ApiVersions, kcat


def test_describe_cluster_and_api_versions(kafka: KafkaStandalone, admin: AdminClient) -> None:
    described = admin.describe_cluster(request_timeout=10).result()
    brokers = admin.list_topics(timeout=10).brokers
    assert described.cluster_id == "talos"
    assert {node.id for node in described.nodes} == set(brokers)
    assert described.controller.id in brokers
    with KafkaWire(kafka.bootstrap) as wire:
        versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in wire.call(18, 3, {})["api_keys"]}
        for key, low_high in {
            21: (0, 2),
            32: (0, 4),
            33: (0, 2),
            37: (0, 3),
            42: (0, 2),
            44: (0, 1),
            47: (0, 0),
            60: (0, 1),
        }.items():
            assert versions[key] == low_high
        for version in (0, 1):
            answer = wire.call(60, version, {"include_cluster_authorized_operations": True})
            assert answer["error_code"] == 0
            assert [b["broker_id"] for b in answer["brokers"]] == sorted(brokers)
            assert answer["cluster_authorized_operations"] > 0  # auth off: anyone is the admin
        assert wire.call(60, 1, {"endpoint_type": 2})["error_code"] == ErrorCode.MISMATCHED_ENDPOINT_TYPE

    from kafka import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    try:
        assert client.describe_cluster()["cluster_id"] == "talos"
    finally:
        client.close()


def test_kcat_lists_brokers_and_topics(kafka: KafkaStandalone) -> None:
    kcat = shutil.which("kcat")
    assert kcat, "kcat is missing: scripts/install --dev installs Debian's kcat"
    topic = _topic(kafka, partitions=3)
    out = subprocess.run(
        [kcat, "-b", kafka.bootstrap, "-L", "-t", topic], capture_output=True, check=True, timeout=60, text=True
    ).stdout
    assert "1 brokers:" in out
    assert f'topic "{topic}" with 3 partitions:' in out
    assert out.count("leader ") == 3


# ---------------------------------------------------------------- DeleteGroups, OffsetDelete


def _commit(kafka: KafkaStandalone, group: str, offsets: list[TopicPartition]) -> None:
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.assign(offsets)
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()


def test_delete_groups(kafka: KafkaStandalone, admin: AdminClient) -> None:
    topic = _topic(kafka, partitions=2)
    _produce(kafka, topic, 2, 5)
    group = f"g-{uuid.uuid4().hex[:8]}"
    _commit(kafka, group, [TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 4)])
    with Admin(kafka.url) as talos:
        assert group in talos.list_groups()
    # a group with a live member is not deleted
    member = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group, "session.timeout.ms": 6000})
    try:
        member.subscribe([topic])
        _wait_for(lambda: member.poll(0.2) is not None or bool(member.assignment()))
        [future] = admin.delete_consumer_groups([group], request_timeout=15).values()
        assert _error_code(future) == ErrorCode.NON_EMPTY_GROUP
    finally:
        member.close()
    [future] = admin.delete_consumer_groups([group], request_timeout=15).values()
    future.result()
    with Admin(kafka.url) as talos:
        assert group not in talos.list_groups()
    [future] = admin.delete_consumer_groups([group], request_timeout=15).values()
    assert _error_code(future) == ErrorCode.GROUP_ID_NOT_FOUND
    # used again, it starts with no committed offsets
    reader = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group})
    try:
        committed = reader.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
        assert [tp.offset for tp in committed] == [-1001, -1001]  # OFFSET_INVALID: none
    finally:
        reader.close()


def test_kafka_python_deletes_group_offsets(kafka: KafkaStandalone) -> None:
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as PyPartition

    kept, dropped = _topic(kafka), _topic(kafka, partitions=2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    _commit(kafka, group, [TopicPartition(kept, 0, 0), TopicPartition(dropped, 0, 0), TopicPartition(dropped, 1, 0)])
    client = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    try:
        result = client.delete_group_offsets(group, [PyPartition(dropped, 0), PyPartition(dropped, 1)])
        assert all(error is None or getattr(error, "errno", 0) == 0 for error in result.values()), result
        offsets = client.list_group_offsets(group)[group]
    finally:
        client.close()
    assert {(tp.topic, tp.partition) for tp in offsets} == {(kept, 0)}
    with KafkaWire(kafka.bootstrap) as wire:  # a group nobody used
        body = {
            "group_id": f"none-{uuid.uuid4().hex[:6]}",
            "topics": [{"name": kept, "partitions": [{"partition_index": 0}]}],
        }
        assert wire.call(47, 0, body)["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
