"""The schema registry (``/schema-registry``) against clients no one here wrote: confluent-kafka's
``SchemaRegistryClient`` with its Avro, JSON Schema and Protobuf serializers round-tripping records through the
Kafka listener, and ``python-schema-registry-client`` registering and checking compatibility; on a real
``talos standalone`` process."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from talos import Admin
from tests.helpers import KafkaStandalone, running_kafka_standalone

USER_AVRO = json.dumps(
    {
        "type": "record",
        "name": "User",
        "namespace": "acme",
        "fields": [{"name": "name", "type": "string"}, {"name": "favorite_number", "type": "int"}],
    }
)
USER_JSON = json.dumps(
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "User",
        "type": "object",
        "properties": {"name": {"type": "string"}, "favorite_number": {"type": "integer"}},
        "required": ["name"],
    }
)


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaStandalone]:
    with running_kafka_standalone(tmp_path_factory.mktemp("registry") / "data") as running:
        yield running


def _registry(kafka: KafkaStandalone) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": f"{kafka.url}/schema-registry"})


def _topic(kafka: KafkaStandalone) -> str:
    name = f"reg-{uuid.uuid4().hex[:8]}"
    with Admin(kafka.url) as admin:
        admin.create_topic(name, partitions=1)
    return name


def _round_trip(kafka: KafkaStandalone, topic: str, serialize: Any, deserialize: Any, values: list[Any]) -> list[Any]:
    producer = KafkaProducer({"bootstrap.servers": kafka.bootstrap})
    for value in values:
        payload = serialize(value, SerializationContext(topic, MessageField.VALUE))
        producer.produce(topic, value=payload)
    assert producer.flush(30) == 0
    consumer = KafkaConsumer(
        {"bootstrap.servers": kafka.bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    out: list[Any] = []
    try:
        while len(out) < len(values):
            message = consumer.poll(10)
            assert message is not None, f"only {len(out)} of {len(values)} records came back"
            assert message.error() is None, message.error()
            out.append(deserialize(message.value(), SerializationContext(topic, MessageField.VALUE)))
    finally:
        consumer.close()
    return out


def test_avro_serializer_round_trips_through_the_kafka_listener(kafka: KafkaStandalone) -> None:
    topic = _topic(kafka)
    registry = _registry(kafka)
    serializer = AvroSerializer(registry, USER_AVRO)
    deserializer = AvroDeserializer(registry)
    users = [{"name": f"user-{i}", "favorite_number": i} for i in range(5)]
    assert _round_trip(kafka, topic, serializer, deserializer, users) == users
    latest = registry.get_latest_version(f"{topic}-value")
    assert latest.version == 1
    assert json.loads(latest.schema.schema_str)["name"] == "User"
    assert registry.get_subjects() and f"{topic}-value" in registry.get_subjects()


def test_json_serializer_round_trips_through_the_kafka_listener(kafka: KafkaStandalone) -> None:
    topic = _topic(kafka)
    registry = _registry(kafka)
    serializer = JSONSerializer(USER_JSON, registry)
    deserializer = JSONDeserializer(USER_JSON, schema_registry_client=registry)
    users = [{"name": f"user-{i}", "favorite_number": i} for i in range(3)]
    assert _round_trip(kafka, topic, serializer, deserializer, users) == users
    assert registry.get_latest_version(f"{topic}-value").schema.schema_type == "JSON"


def _user_message_class(package: str) -> Any:
    """A generated-style Protobuf message class, made at run time (no protoc here): what ``user_pb2.User`` is."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    file = descriptor_pb2.FileDescriptorProto(name=f"{package}/user.proto", package=package, syntax="proto3")
    message = file.message_type.add(name="User")
    message.field.add(name="name", number=1, type=9, label=1)  # string
    message.field.add(name="favorite_number", number=2, type=5, label=1)  # int32
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.User"))


def test_protobuf_serializer_round_trips_through_the_kafka_listener(kafka: KafkaStandalone) -> None:
    topic = _topic(kafka)
    registry = _registry(kafka)
    user = _user_message_class(f"acme{uuid.uuid4().hex[:6]}")
    serializer = ProtobufSerializer(user, registry, {"use.deprecated.format": False})
    deserializer = ProtobufDeserializer(user, {"use.deprecated.format": False})
    users = [user(name=f"user-{i}", favorite_number=i) for i in range(3)]
    assert _round_trip(kafka, topic, serializer, deserializer, users) == users
    latest = registry.get_latest_version(f"{topic}-value")
    assert latest.schema.schema_type == "PROTOBUF"
    # the registered descriptor answers as .proto text, and as the descriptor when asked for it serialized
    assert "message User" in registry.get_schema(latest.schema_id).schema_str
    serialized = _registry(kafka).get_schema(latest.schema_id, fmt="serialized").schema_str
    assert "message User" not in serialized and base64.b64decode(serialized)


def test_registration_is_idempotent_and_ids_are_shared_across_subjects(kafka: KafkaStandalone) -> None:
    registry = _registry(kafka)
    text = json.dumps({**json.loads(USER_AVRO), "name": f"Shared{uuid.uuid4().hex[:6]}"})
    first = registry.register_schema("same-a", Schema(text, "AVRO"))
    again = registry.register_schema("same-a", Schema(text, "AVRO"))
    # the same schema written differently (white space, key order): its canonical form is the same
    respelled = json.dumps(json.loads(text), indent=2, sort_keys=True)
    other = registry.register_schema("same-b", Schema(respelled, "AVRO"))
    assert first == again == other
    assert registry.get_versions("same-a") == [1]
    assert sorted(v.subject for v in registry.get_schema_versions(first)) == ["same-a", "same-b"]
    assert registry.lookup_schema("same-b", Schema(text, "AVRO")).version == 1


def test_incompatible_change_is_refused_with_confluents_error(kafka: KafkaStandalone) -> None:
    registry = _registry(kafka)
    subject = f"compat-{uuid.uuid4().hex[:6]}"
    registry.register_schema(subject, Schema(USER_AVRO, "AVRO"))
    added_without_default = json.loads(USER_AVRO)
    added_without_default["fields"].append({"name": "age", "type": "int"})
    new = Schema(json.dumps(added_without_default), "AVRO")
    assert registry.test_compatibility(subject, new) is False
    with pytest.raises(SchemaRegistryError) as refused:
        registry.register_schema(subject, new)
    assert refused.value.http_status_code == 409
    assert refused.value.error_code == 409
    registry.set_compatibility(subject, "NONE")
    assert registry.test_compatibility(subject, new) is True
    assert registry.register_schema(subject, new) > 0
    assert registry.get_versions(subject) == [1, 2]


def test_soft_then_hard_delete(kafka: KafkaStandalone) -> None:
    registry = _registry(kafka)
    subject = f"del-{uuid.uuid4().hex[:6]}"
    schema_id = registry.register_schema(subject, Schema(USER_AVRO, "AVRO"))
    with pytest.raises(SchemaRegistryError) as not_soft:
        registry.delete_subject(subject, permanent=True)
    assert not_soft.value.error_code == 40405
    assert registry.delete_subject(subject) == [1]
    assert subject not in registry.get_subjects()
    assert registry.get_schema(schema_id).schema_str  # a soft-deleted version's id is still answered
    assert registry.delete_subject(subject, permanent=True) == [1]
    with pytest.raises(SchemaRegistryError) as gone:
        registry.get_versions(subject)
    assert gone.value.error_code == 40401


def test_validation_on_produce_refuses_records_without_a_registered_id(kafka: KafkaStandalone) -> None:
    topic = _topic(kafka)
    registry = _registry(kafka)
    with Admin(kafka.url) as admin:
        assert admin.alter_topic(topic, value_schema_validation=True).value_schema_validation
    serializer = AvroSerializer(registry, USER_AVRO)
    good = serializer({"name": "ok", "favorite_number": 1}, SerializationContext(topic, MessageField.VALUE))
    schema_id = int.from_bytes(good[1:5], "big")
    foreign = registry.register_schema(
        f"other-{uuid.uuid4().hex[:6]}",
        Schema(
            json.dumps(
                {"type": "record", "name": f"Other{uuid.uuid4().hex[:6]}", "fields": [{"name": "x", "type": "int"}]}
            ),
            "AVRO",
        ),
    )
    assert foreign != schema_id
    unregistered = b"\x00" + foreign.to_bytes(4, "big") + good[5:]
    results: dict[bytes, Any] = {}
    producer = KafkaProducer({"bootstrap.servers": kafka.bootstrap, "retries": 0})
    for value in (good, b"plain bytes", unregistered):
        producer.produce(topic, value=value, on_delivery=lambda err, msg: results.__setitem__(msg.value(), err))
        producer.flush(30)
    assert results[good] is None
    for refused in (b"plain bytes", unregistered):
        assert results[refused] is not None and results[refused].name() == "INVALID_RECORD", results[refused]
    # REST answers the same refusal, with its reason, and takes the framed value
    with httpx.Client(base_url=kafka.url) as http:
        answer = http.post(f"/v1/topics/{topic}/messages", json={"messages": [{"value": "not framed"}]})
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["code"] == "SCHEMA_VALIDATION_FAILED"
        assert "carries no schema id" in answer.json()["error"]["message"]
        accepted = http.post(
            f"/v1/topics/{topic}/messages",
            json={"messages": [{"value_b64": base64.b64encode(good).decode()}]},
        )
        assert accepted.status_code == 200, accepted.text
    with Admin(kafka.url) as admin:
        assert admin.describe_topic(topic).partition_offsets[0].latest == 2  # the two accepted records only


def test_a_subject_may_hold_a_slash(kafka: KafkaStandalone) -> None:
    registry = _registry(kafka)  # Confluent's client sends it as %2F
    subject = f"team/{uuid.uuid4().hex[:6]}"
    schema_id = registry.register_schema(subject, Schema(USER_AVRO, "AVRO"))
    assert registry.get_latest_version(subject).schema_id == schema_id
    assert subject in registry.get_subjects()
    assert registry.delete_subject(subject) == [1]
