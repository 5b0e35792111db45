"""The transaction APIs' message schemas (server/kafka/protocol/txn_messages.py): registered, within the versions
Kafka's JSON defines, and their defaults those of kafka-python. (test_kafka_protocol.py cross-checks every
registered API's frames against kafka-python byte for byte, these included.)"""

from __future__ import annotations

from typing import Any

import pytest

from server.kafka.protocol.messages import APIS
from server.kafka.protocol.schema import ApiSchema, Field, encode, in_versions
from server.kafka.protocol.txn_messages import TXN_APIS
from tests.unit.test_kafka_protocol import _kafka_python_class, _to_kafka_python

CASES = [(api, version) for api in TXN_APIS for version in range(api.versions[0], api.versions[1] + 1)]
IDS = [f"{api.name}-v{version}" for api, version in CASES]


def _flexible(api: ApiSchema, version: int) -> bool:
    return in_versions(api.flexible_versions, version)


def _kafka_python_version(api: ApiSchema, kind: str, version: int) -> Any:
    cls = _kafka_python_class(api.name + kind)
    if not cls.min_version <= version <= cls.max_version:
        pytest.skip(f"kafka-python has no {api.name}{kind} v{version}")
    return cls[version]


def test_txn_apis_are_well_formed() -> None:
    keys = [api.api_key for api in TXN_APIS]
    assert keys == [24, 25, 26, 27, 28, 61, 65, 66]
    for api in TXN_APIS:
        assert APIS[api.api_key] is api


@pytest.mark.parametrize("api", TXN_APIS, ids=[api.name for api in TXN_APIS])
def test_served_versions_within_the_json(api: ApiSchema) -> None:
    for kind in ("Request", "Response"):
        cls = _kafka_python_class(api.name + kind)
        assert api.api_key == cls.API_KEY
        assert cls.min_version <= api.versions[0] <= api.versions[1] <= cls.max_version
        assert api.flexible_versions == cls.json["flexibleVersions"]


def _defaults_only(fields: tuple[Field, ...], version: int) -> dict[str, Any]:
    """A body that leaves every scalar to its JSON default: the struct fields (arrays of them with one element),
    and null for a nullable field the JSON gives no default (our encoder writes null for it, Kafka's an empty
    string: a convention of ``schema.py``, not of the definitions)."""
    body: dict[str, Any] = {}
    for field in fields:
        if not in_versions(field.versions, version):
            continue
        if field.fields:
            nested = _defaults_only(field.fields, version)
            body[field.name] = [nested] if field.type.startswith("[]") else nested
        elif field.default is None and in_versions(field.nullable_versions, version):
            body[field.name] = None
    return body


@pytest.mark.parametrize(("api", "version"), CASES, ids=IDS)
def test_defaults_match_kafka_python(api: ApiSchema, version: int) -> None:
    """kafka-python fills a missing argument with the JSON default, as our encoder fills a missing key."""
    flexible = _flexible(api, version)
    for kind, fields in (("Request", api.request), ("Response", api.response)):
        cls = _kafka_python_version(api, kind, version)
        body = _defaults_only(fields, version)
        theirs = bytes(_to_kafka_python(cls, fields, body).encode())
        assert encode(fields, version, flexible, body) == theirs
