"""The transaction APIs' message schemas (server/kafka/protocol/txn_messages.py), cross-checked byte for byte
against kafka-python as test_kafka_protocol.py checks the registered APIs.

``TXN_APIS`` is not in the listener's registry yet, so ``read_request``/``write_response`` cannot reach it; these
tests drive the same plans through ``schema.encode``/``schema.decode`` with the schema's own flexible versions,
and split or build the (generic) frame headers here."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from server.kafka.protocol import RequestHeader
from server.kafka.protocol.messages import APIS
from server.kafka.protocol.primitives import Reader, Writer
from server.kafka.protocol.schema import ApiSchema, Field, decode, encode, in_versions
from server.kafka.protocol.txn_messages import TXN_APIS
from tests.unit.test_kafka_protocol import _all_names, _kafka_python_class, _project, _sample, _to_kafka_python

CASES = [(api, version) for api in TXN_APIS for version in range(api.versions[0], api.versions[1] + 1)]
IDS = [f"{api.name}-v{version}" for api, version in CASES]


def _flexible(api: ApiSchema, version: int) -> bool:
    return in_versions(api.flexible_versions, version)


def _kafka_python_version(api: ApiSchema, kind: str, version: int) -> Any:
    cls = _kafka_python_class(api.name + kind)
    if not cls.min_version <= version <= cls.max_version:
        pytest.skip(f"kafka-python has no {api.name}{kind} v{version}")
    return cls[version]


def _read_request(api: ApiSchema, frame: bytes) -> tuple[RequestHeader, bytes, dict[str, Any]]:
    """What ``read_request`` does once the schema is registered: header v1 (v2 when flexible), then the body,
    here with no bytes left over. Returns the header, its bytes and the body."""
    reader = Reader(frame)
    api_key, version, correlation_id = reader.read_int16(), reader.read_int16(), reader.read_int32()
    header = RequestHeader(api_key, version, correlation_id, reader.read_nullable_string())
    flexible = _flexible(api, version)
    if flexible:
        reader.skip_tagged_fields()
    return header, frame[: reader.pos], decode(api.request, version, flexible, frame[reader.pos :])


def _write_response(api: ApiSchema, version: int, correlation_id: int, body: dict[str, Any]) -> bytes:
    """What ``write_response`` writes: size, correlation id, header tagged fields when flexible, the body."""
    flexible = _flexible(api, version)
    writer = Writer()
    writer.write_int32(correlation_id)
    if flexible:
        writer.write_tagged_fields()
    payload = writer.getvalue() + encode(api.response, version, flexible, body)
    return struct.pack(">i", len(payload)) + payload


def _decode_response(api: ApiSchema, version: int, frame: bytes) -> tuple[int, dict[str, Any]]:
    reader = Reader(frame)
    correlation_id = reader.read_int32()
    flexible = _flexible(api, version)
    if flexible:
        reader.skip_tagged_fields()
    return correlation_id, decode(api.response, version, flexible, frame[reader.pos :])


def test_txn_apis_are_well_formed() -> None:
    keys = [api.api_key for api in TXN_APIS]
    assert keys == [24, 25, 26, 27, 28, 61, 65, 66]
    # Registering one in APIS is the handler's job; if it is there, it must be this schema.
    for api in TXN_APIS:
        assert APIS.get(api.api_key, api) is api


@pytest.mark.parametrize("api", TXN_APIS, ids=[api.name for api in TXN_APIS])
def test_served_versions_within_the_json(api: ApiSchema) -> None:
    for kind in ("Request", "Response"):
        cls = _kafka_python_class(api.name + kind)
        assert api.api_key == cls.API_KEY
        assert cls.min_version <= api.versions[0] <= api.versions[1] <= cls.max_version
        assert api.flexible_versions == cls.json["flexibleVersions"]


@pytest.mark.parametrize(("api", "version"), CASES, ids=IDS)
def test_kafka_python_requests_decode_and_match(api: ApiSchema, version: int) -> None:
    cls = _kafka_python_version(api, "Request", version)
    flexible = _flexible(api, version)
    for nulls in (False, True):
        body = _sample(api.request, version, nulls)
        request = _to_kafka_python(cls, api.request, body)
        request.with_header(correlation_id=99, client_id="kafka-python")
        frame = bytes(request.encode(header=True))
        header, header_bytes, decoded = _read_request(api, frame)
        assert header == RequestHeader(api.api_key, version, 99, "kafka-python")
        assert _project(decoded, body) == body
        assert set(decoded) == _all_names(api.request)
        assert header_bytes + encode(api.request, version, flexible, body) == frame


@pytest.mark.parametrize(("api", "version"), CASES, ids=IDS)
def test_kafka_python_encodes_responses_like_us(api: ApiSchema, version: int) -> None:
    cls = _kafka_python_version(api, "Response", version)
    for nulls in (False, True):
        body = _sample(api.response, version, nulls)
        response = _to_kafka_python(cls, api.response, body)
        response.with_header(correlation_id=99)
        theirs = bytes(response.encode(header=True, framed=True))
        assert _write_response(api, version, 99, body) == theirs
        correlation_id, decoded = _decode_response(api, version, theirs[4:])
        assert correlation_id == 99
        assert _project(decoded, body) == body
        assert set(decoded) == _all_names(api.response)


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
