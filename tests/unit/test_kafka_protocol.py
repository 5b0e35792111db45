"""The Kafka wire-protocol codec (server/kafka/protocol): round trips of every served API and version, the
flexible-version details, malformed input, and a byte-for-byte cross-check against kafka-python."""

from __future__ import annotations

import contextlib
import struct
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.kafka.protocol import (
    API_NAMES,
    SUPPORTED,
    ErrorCode,
    ProtocolError,
    RequestHeader,
    UnsupportedVersion,
    api_versions_fallback,
    decode_response,
    encode_request,
    read_request,
    response_parts,
    write_response,
)
from server.kafka.protocol.messages import APIS
from server.kafka.protocol.primitives import KEPT_APART, Reader, Writer
from server.kafka.protocol.schema import Field, decode, encode, in_versions

ALL_VERSIONS = [(key, version) for key, (low, high) in sorted(SUPPORTED.items()) for version in range(low, high + 1)]
EDGE_VERSIONS = [(key, version) for key, (low, high) in sorted(SUPPORTED.items()) for version in sorted({low, high})]


def _ids(cases: list[tuple[int, int]]) -> list[str]:
    return [f"{API_NAMES[key]}-v{version}" for key, version in cases]


def _fields(key: int, kind: str) -> tuple[Field, ...]:
    return APIS[key].request if kind == "request" else APIS[key].response


# Sample bodies: every field the version carries, with distinct non-default values --------------------------


def _sample(fields: tuple[Field, ...], version: int, nulls: bool, counter: list[int] | None = None) -> dict[str, Any]:
    counter = [0] if counter is None else counter
    return {
        field.name: _value(field, version, nulls, counter) for field in fields if in_versions(field.versions, version)
    }


def _value(field: Field, version: int, nulls: bool, counter: list[int]) -> Any:
    counter[0] += 1
    k = counter[0]
    if nulls and in_versions(field.nullable_versions, version):
        return None
    if field.fields:
        if field.type.startswith("[]"):
            return [_sample(field.fields, version, nulls, counter) for _ in range(2)]
        return _sample(field.fields, version, nulls, counter)
    if field.type.startswith("[]"):
        item = Field("item", field.type[2:], field.versions)
        return [_value(item, version, nulls, counter) for _ in range(2)]
    return {
        "int8": k % 100,
        "int16": 300 + k,
        "int32": 70_000 + k,
        "int64": 2**40 + k,
        "uint16": 40_000 + k,
        "bool": bool(k % 2),
        "float64": k + 0.5,
        "uuid": uuid.UUID(int=k),
        "string": f"s{k}-é",
        "bytes": bytes([k % 256]) * 3,
        "records": b"R" * (k % 7 + 1),
    }[field.type]


def _project(decoded: Any, expected: Any) -> Any:
    """``decoded`` restricted to the keys ``expected`` has (decoded dicts carry every field), views as bytes."""
    if isinstance(expected, dict) and isinstance(decoded, dict):
        return {key: _project(decoded.get(key, "<missing>"), value) for key, value in expected.items()}
    if isinstance(expected, list) and isinstance(decoded, list) and len(expected) == len(decoded):
        return [_project(item, want) for item, want in zip(decoded, expected, strict=True)]
    if isinstance(decoded, memoryview):
        return bytes(decoded)
    return decoded


def _all_names(fields: tuple[Field, ...]) -> set[str]:
    return {field.name for field in fields}


# Round trips ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "version"), ALL_VERSIONS, ids=_ids(ALL_VERSIONS))
def test_request_round_trip(key: int, version: int) -> None:
    header = RequestHeader(key, version, 123_456, "client-é")
    for nulls in (False, True):
        body = _sample(APIS[key].request, version, nulls)
        decoded_header, decoded = read_request(encode_request(header, body))
        assert decoded_header == header
        assert _project(decoded, body) == body
        assert set(decoded) == _all_names(APIS[key].request)


@pytest.mark.parametrize(("key", "version"), ALL_VERSIONS, ids=_ids(ALL_VERSIONS))
def test_response_round_trip(key: int, version: int) -> None:
    for nulls in (False, True):
        body = _sample(APIS[key].response, version, nulls)
        if key == 18:
            body["error_code"] = 0  # a non-zero ApiVersions error is read as v0 by clients
        frame = write_response(RequestHeader(key, version, -7, None), body)
        (size,) = struct.unpack_from(">i", frame)
        assert size == len(frame) - 4
        correlation_id, decoded = decode_response(key, version, frame[4:])
        assert correlation_id == -7
        assert _project(decoded, body) == body
        assert set(decoded) == _all_names(APIS[key].response)


@pytest.mark.parametrize(("key", "version"), EDGE_VERSIONS, ids=_ids(EDGE_VERSIONS))
def test_empty_bodies_encode_as_defaults(key: int, version: int) -> None:
    header = RequestHeader(key, version, 1, None)
    _, request = read_request(encode_request(header, {}))
    assert set(request) == _all_names(APIS[key].request)
    _, response = decode_response(key, version, write_response(header, {})[4:])
    assert set(response) == _all_names(APIS[key].response)


def test_defaults_follow_the_json() -> None:
    _, fetch = read_request(encode_request(RequestHeader(1, 4, 1, "c"), {"topics": [{"topic": "t"}]}))
    assert fetch["replica_id"] == -1
    assert fetch["max_bytes"] == 0x7FFFFFFF
    assert fetch["isolation_level"] == 0
    assert fetch["session_epoch"] == -1  # v7+: absent at v4, so its default
    assert fetch["rack_id"] == ""
    assert fetch["cluster_id"] is None  # a tag of v12+
    assert fetch["topics"] == [{"topic": "t", "partitions": []}]
    assert fetch["forgotten_topics_data"] == []

    # Nullable from v1: v0 writes an empty array for a missing key, v1 writes null ("all topics").
    assert read_request(encode_request(RequestHeader(3, 0, 1, None), {}))[1]["topics"] == []
    assert read_request(encode_request(RequestHeader(3, 1, 1, None), {}))[1]["topics"] is None
    metadata = read_request(encode_request(RequestHeader(3, 3, 1, None), {}))[1]
    assert metadata["allow_auto_topic_creation"] is True  # default "true", absent before v4

    _, produce = read_request(encode_request(RequestHeader(0, 3, 1, None), {"acks": 1}))
    assert produce["transactional_id"] is None
    assert produce["acks"] == 1

    _, fetch_response = decode_response(
        1, 12, write_response(RequestHeader(1, 12, 1, None), {"responses": [{"partitions": [{}]}]})[4:]
    )
    partition = fetch_response["responses"][0]["partitions"][0]
    assert partition["current_leader"] == {"leader_id": -1, "leader_epoch": -1}
    assert partition["diverging_epoch"] == {"epoch": -1, "end_offset": -1}
    assert partition["records"] is None


def test_decoded_defaults_are_not_shared() -> None:
    frame = encode_request(RequestHeader(1, 4, 1, None), {})
    first = read_request(frame)[1]
    first["forgotten_topics_data"].append("x")
    assert read_request(frame)[1]["forgotten_topics_data"] == []


def test_records_are_views_into_the_frame() -> None:
    batch = bytes(range(256)) * 4
    body = {"acks": -1, "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch}]}]}
    for version in (3, 9):
        _, decoded = read_request(encode_request(RequestHeader(0, version, 1, None), body))
        records = decoded["topic_data"][0]["partition_data"][0]["records"]
        assert isinstance(records, memoryview)
        assert records == batch


@pytest.mark.parametrize("version", [4, 11, 12])
def test_a_fetch_answers_large_records_are_sent_as_they_are(version: int) -> None:
    """The records of a Fetch answer go to the socket as the object the log read gave (no copy into the frame);
    small ones are copied in; either way the parts are the frame ``write_response`` writes."""
    large, small = bytes(range(256)) * (KEPT_APART // 256), b"s" * (KEPT_APART - 1)
    partitions = [{"partition_index": 0, "records": large}, {"partition_index": 1, "records": small}]
    body = {"responses": [{"topic": "t", "topic_id": uuid.uuid4(), "partitions": partitions}]}
    header = RequestHeader(1, version, 7, "c")
    parts = response_parts(header, body)
    assert [part for part in parts if part is large] == [large]
    assert not any(part is small for part in parts)
    frame = b"".join(parts)
    assert frame == write_response(header, body)
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    correlation_id, decoded = decode_response(1, version, frame[4:])
    assert correlation_id == 7
    records = [p["records"] for p in decoded["responses"][0]["partitions"]]
    assert records == [large, small]


def test_schema_level_helpers() -> None:
    fields = APIS[12].request  # Heartbeat
    data = encode(fields, 4, True, {"group_id": "g", "generation_id": 1, "member_id": "m"})
    assert data == b"\x02g\x00\x00\x00\x01\x02m\x00\x00"
    assert decode(fields, 4, True, data)["member_id"] == "m"
    with pytest.raises(ProtocolError, match="trailing"):
        decode(fields, 4, True, data + b"\x00")


# Flexible versions ------------------------------------------------------------------------------------------


def test_heartbeat_bytes_non_flexible_and_flexible() -> None:
    body = {"group_id": "grp", "generation_id": 5, "member_id": "m"}
    legacy = encode_request(RequestHeader(12, 3, 9, "c"), body)
    assert legacy == (
        b"\x00\x0c\x00\x03\x00\x00\x00\x09\x00\x01c"  # header v1
        b"\x00\x03grp\x00\x00\x00\x05\x00\x01m\xff\xff"  # int16 lengths, null group_instance_id
    )
    flexible = encode_request(RequestHeader(12, 4, 9, "c"), body)
    assert flexible == (
        b"\x00\x0c\x00\x04\x00\x00\x00\x09\x00\x01c\x00"  # header v2: client id keeps int16 length, then tags
        b"\x04grp\x00\x00\x00\x05\x02m\x00\x00"  # compact length+1, null as 0, empty tag section
    )


def test_unknown_tags_are_skipped() -> None:
    header = b"\x00\x0c\x00\x04\x00\x00\x00\x09\x00\x01c"
    # Header tags: two unknown ones (tag 5 of 2 bytes, tag 300 of 1 byte; 300 takes a two-byte varint).
    header_tags = b"\x02" + b"\x05\x02ab" + b"\xac\x02\x01z"
    body = b"\x04grp\x00\x00\x00\x05\x02m\x00"
    body_tags = b"\x01" + b"\x07\x03xyz"
    decoded_header, decoded = read_request(header + header_tags + body + body_tags)
    assert decoded_header == RequestHeader(12, 4, 9, "c")
    assert decoded == {"group_id": "grp", "generation_id": 5, "member_id": "m", "group_instance_id": None}


def test_known_tag_is_read_and_default_tag_not_written() -> None:
    plain = encode_request(RequestHeader(1, 12, 1, None), {})
    tagged = encode_request(RequestHeader(1, 12, 1, None), {"cluster_id": "kc"})
    # The request's own tag section closes it: empty, or one field (tag 0, 3 bytes, compact string "kc").
    assert plain.endswith(b"\x00")
    assert tagged == plain[:-1] + b"\x01\x00\x03\x03kc"
    assert read_request(tagged)[1]["cluster_id"] == "kc"
    assert read_request(plain)[1]["cluster_id"] is None


def test_tagged_struct_only_when_not_default() -> None:
    def partition_bytes(partition: dict[str, Any]) -> bytes:
        return write_response(RequestHeader(1, 12, 1, None), {"responses": [{"topic": "t", "partitions": [partition]}]})

    default_leader = partition_bytes({"current_leader": {"leader_id": -1, "leader_epoch": -1}})
    assert default_leader == partition_bytes({})
    assert partition_bytes({"current_leader": {"leader_epoch": -1}}) == default_leader
    frame = partition_bytes({"current_leader": {"leader_id": 3, "leader_epoch": 7}})
    _, body = decode_response(1, 12, frame[4:])
    assert body["responses"][0]["partitions"][0]["current_leader"] == {"leader_id": 3, "leader_epoch": 7}


def test_response_header_versions() -> None:
    # Flexible responses carry header v1 (an empty tag section after the correlation id) ...
    metadata = write_response(RequestHeader(3, 9, 0x01020304, None), {})
    assert metadata[4:9] == b"\x01\x02\x03\x04\x00"
    legacy = write_response(RequestHeader(3, 8, 0x01020304, None), {})
    assert legacy[4:8] == b"\x01\x02\x03\x04"
    # ... except ApiVersions, always header v0 so a client can read it before it knows our versions.
    api_versions = write_response(RequestHeader(18, 3, 0x01020304, None), {"error_code": 0})
    assert api_versions[4:10] == b"\x01\x02\x03\x04\x00\x00"  # correlation id, then error_code straight away


def test_api_versions_fallback() -> None:
    frame = api_versions_fallback(RequestHeader(18, 9, 77, "newer-client"))
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    correlation_id, body = decode_response(18, 0, frame[4:])
    assert correlation_id == 77
    assert body["error_code"] == ErrorCode.UNSUPPORTED_VERSION == 35
    assert {entry["api_key"]: (entry["min_version"], entry["max_version"]) for entry in body["api_keys"]} == SUPPORTED


def test_supported_table() -> None:
    assert SUPPORTED == {
        0: (3, 9),
        1: (4, 12),
        2: (1, 7),
        3: (0, 12),
        8: (0, 8),
        9: (0, 7),
        10: (0, 4),
        11: (0, 7),
        12: (0, 4),
        13: (0, 4),
        14: (0, 5),
        15: (0, 5),
        16: (0, 4),
        17: (0, 1),
        18: (0, 3),
        19: (0, 7),
        20: (0, 6),
        21: (0, 2),
        22: (0, 4),
        24: (0, 4),
        25: (0, 3),
        26: (0, 4),
        27: (1, 1),
        28: (0, 3),
        32: (0, 4),
        33: (0, 2),
        36: (0, 2),
        37: (0, 3),
        42: (0, 2),
        44: (0, 1),
        47: (0, 0),
        60: (0, 1),
        61: (0, 0),
        65: (0, 0),
        66: (0, 1),
    }
    assert API_NAMES[0] == "Produce"
    assert API_NAMES[36] == "SaslAuthenticate"


# Unsupported and malformed input ----------------------------------------------------------------------------


def _header_bytes(key: int, version: int, correlation_id: int, client_id: bytes | None) -> bytes:
    prefix = struct.pack(">hhi", key, version, correlation_id)
    if client_id is None:
        return prefix + b"\xff\xff"
    return prefix + struct.pack(">h", len(client_id)) + client_id


@pytest.mark.parametrize(
    ("key", "version"),
    [(99, 0), (0, 2), (0, 10), (1, 3), (1, 13), (18, 4), (18, -1), (4, 0), (-1, 0)],
)
def test_unsupported_versions_carry_the_header(key: int, version: int) -> None:
    with pytest.raises(UnsupportedVersion) as info:
        read_request(_header_bytes(key, version, 42, b"cli") + b"whatever the body is")
    assert info.value.header == RequestHeader(key, version, 42, "cli")


def test_unsupported_with_a_broken_client_id() -> None:
    with pytest.raises(UnsupportedVersion) as info:
        read_request(struct.pack(">hhi", 18, 9, 5) + b"\x00\x10ab")
    assert info.value.header == RequestHeader(18, 9, 5, None)


def test_writing_an_unsupported_version_is_refused() -> None:
    with pytest.raises(UnsupportedVersion):
        write_response(RequestHeader(0, 10, 1, None), {})


@pytest.mark.parametrize(("key", "version"), EDGE_VERSIONS, ids=_ids(EDGE_VERSIONS))
def test_every_truncation_is_a_protocol_error(key: int, version: int) -> None:
    frame = encode_request(RequestHeader(key, version, 1, "c"), _sample(APIS[key].request, version, False))
    for end in range(len(frame)):
        with pytest.raises(ProtocolError):
            read_request(frame[:end])
    response = write_response(RequestHeader(key, version, 1, None), _sample(APIS[key].response, version, False))
    for end in range(4, len(response) - 1):
        with pytest.raises(ProtocolError):
            decode_response(key, version, response[4:end])


def test_trailing_bytes_are_ignored_as_kafka_brokers_ignore_them() -> None:
    """librdkafka sends Metadata v12 with three bytes of fields v12 no longer has; a broker reads past them."""
    frame = encode_request(RequestHeader(12, 0, 1, None), {"group_id": "g", "member_id": "m"})
    assert read_request(frame + b"\x00\x01\x02") == read_request(frame)


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        # Metadata v1: an array of 2**31-1 topics in a few bytes.
        (_header_bytes(3, 1, 1, None) + b"\x7f\xff\xff\xff\x00\x01a", "cannot fit"),
        # Metadata v9 (compact): the same with an unsigned varint count.
        (_header_bytes(3, 9, 1, None) + b"\x00" + b"\xff\xff\xff\xff\x0f" + b"\x00", "cannot fit"),
        # Metadata v0: topics may not be null before v1.
        (_header_bytes(3, 0, 1, None) + b"\xff\xff\xff\xff", "non-nullable"),
        (_header_bytes(3, 0, 1, None) + b"\xff\xff\xff\xfe", "length -2"),
        # Heartbeat v0: a group id longer than the frame, one of negative length, one not UTF-8.
        (_header_bytes(12, 0, 1, None) + b"\x7f\xffab", "need 32767 bytes"),
        (_header_bytes(12, 0, 1, None) + b"\xff\xffab", "non-nullable string"),
        (_header_bytes(12, 0, 1, None) + b"\x00\x02\xc3\x28\x00\x00\x00\x01\x00\x00", "not UTF-8"),
        # Heartbeat v4: a compact string longer than Kafka allows, and a varint that never ends.
        (_header_bytes(12, 4, 1, None) + b"\x00" + b"\x81\x80\x02" + b"x" * 40_000, "exceeds"),
        (_header_bytes(12, 4, 1, None) + b"\x00" + b"\xff" * 6, "varint longer"),
        # A header shorter than its fixed part.
        (b"\x00\x03\x00", "need 2 bytes"),
        # A client id longer than the frame.
        (struct.pack(">hhi", 3, 1, 1) + b"\x00\x09abc", "need 9 bytes"),
        # A flexible header whose tag overruns the frame.
        (_header_bytes(12, 4, 1, None) + b"\x01\x00\x09ab", "need 9 bytes"),
    ],
)
def test_malformed_frames(frame: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        read_request(frame)


def test_encode_refuses_values_the_version_cannot_carry() -> None:
    with pytest.raises(ValueError, match="non-nullable array"):
        encode_request(RequestHeader(3, 0, 1, None), {"topics": None})
    with pytest.raises(ValueError, match="does not fit"):
        encode_request(RequestHeader(12, 0, 1, None), {"generation_id": 2**31})
    with pytest.raises(ValueError, match="expected a string"):
        encode_request(RequestHeader(12, 0, 1, None), {"group_id": None})
    with pytest.raises(ValueError, match="expected a mapping"):
        write_response(RequestHeader(3, 0, 1, None), {"brokers": [None]})


# Fuzzing: nothing but ProtocolError / UnsupportedVersion ever escapes ---------------------------------------


def _read_quietly(frame: bytes) -> None:
    with contextlib.suppress(ProtocolError, UnsupportedVersion):
        read_request(frame)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_random_frames(frame: bytes) -> None:
    _read_quietly(frame)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(ALL_VERSIONS), st.booleans(), st.binary(max_size=96))
def test_random_bodies_after_a_valid_header(case: tuple[int, int], tags: bool, body: bytes) -> None:
    key, version = case
    _read_quietly(_header_bytes(key, version, 1, b"c") + (b"\x00" if tags else b"") + body)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(ALL_VERSIONS), st.data())
def test_mutated_frames(case: tuple[int, int], data: st.DataObject) -> None:
    key, version = case
    frame = bytearray(encode_request(RequestHeader(key, version, 1, "c"), _sample(APIS[key].request, version, False)))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(8, len(frame) - 1))
        frame[position] = data.draw(st.integers(0, 255))
    _read_quietly(bytes(frame))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(ALL_VERSIONS), st.binary(max_size=96))
def test_random_responses(case: tuple[int, int], body: bytes) -> None:
    key, version = case
    with contextlib.suppress(ProtocolError):
        decode_response(key, version, b"\x00\x00\x00\x01" + body)


# Primitives -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
    ],
)
def test_varint_zigzag(value: int, encoded: bytes) -> None:
    writer = Writer()
    writer.write_varint(value)
    assert writer.getvalue() == encoded
    assert Reader(encoded).read_varint() == value


@given(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**32 - 1))
def test_varints_round_trip(varint: int, varlong: int, unsigned: int) -> None:
    writer = Writer()
    writer.write_varint(varint)
    writer.write_varlong(varlong)
    writer.write_unsigned_varint(unsigned)
    reader = Reader(writer.getvalue())
    assert (reader.read_varint(), reader.read_varlong(), reader.read_unsigned_varint()) == (varint, varlong, unsigned)
    assert reader.remaining() == 0


@given(st.text(max_size=50), st.none() | st.text(max_size=50), st.binary(max_size=50), st.floats(allow_nan=False))
def test_primitives_round_trip(text: str, maybe: str | None, blob: bytes, number: float) -> None:
    writer = Writer()
    writer.write_string(text)
    writer.write_compact_nullable_string(maybe)
    writer.write_compact_bytes(blob)
    writer.write_nullable_bytes(None)
    writer.write_float64(number)
    writer.write_uuid(uuid.UUID(int=12345))
    writer.write_uint32(2**32 - 1)
    writer.write_tagged_fields({3: b"abc", 1: b""})
    reader = Reader(writer.getvalue())
    assert reader.read_string() == text
    assert reader.read_compact_nullable_string() == maybe
    assert reader.read_compact_bytes() == blob
    assert reader.read_nullable_bytes() is None
    assert reader.read_float64() == number
    assert reader.read_uuid() == uuid.UUID(int=12345)
    assert reader.read_uint32() == 2**32 - 1
    assert reader.read_tagged_fields() == {1: b"", 3: b"abc"}
    assert reader.remaining() == 0


def test_unsigned_varint_bytes() -> None:
    writer = Writer()
    writer.write_unsigned_varint(300)
    assert writer.getvalue() == b"\xac\x02"
    with pytest.raises(ValueError, match="unsigned varint"):
        writer.write_unsigned_varint(-1)


# Cross-check against kafka-python (an independent implementation) -------------------------------------------

# kafka-python renames the authorized-operations int32 bitfields and exposes them as sets of bit numbers.
_KP_BITFIELDS = {"topic_authorized_operations", "cluster_authorized_operations", "authorized_operations"}


def _kafka_python_class(name: str) -> Any:
    pytest.importorskip("kafka.protocol.api_message", reason="kafka-python 3.x is not installed")
    import kafka.protocol.admin
    import kafka.protocol.consumer
    import kafka.protocol.metadata
    import kafka.protocol.producer
    import kafka.protocol.sasl

    for module in (
        kafka.protocol.metadata,
        kafka.protocol.producer,
        kafka.protocol.consumer,
        kafka.protocol.admin,
        kafka.protocol.sasl,
    ):
        found = getattr(module, name, None)
        if found is not None:
            return found
    raise LookupError(name)


def _to_kafka_python(cls: Any, fields: tuple[Field, ...], value: dict[str, Any]) -> Any:
    kwargs: dict[str, Any] = {}
    for field in fields:
        if field.name not in value:
            continue
        item = value[field.name]
        if field.name in _KP_BITFIELDS and "authorized_operations" in cls.fields:
            kwargs["authorized_operations"] = {bit for bit in range(32) if item >> bit & 1}
            continue
        if field.fields and item is not None:
            nested = cls.fields[field.name].data_class
            if field.type.startswith("[]"):
                item = [_to_kafka_python(nested, field.fields, element) for element in item]
            else:
                item = _to_kafka_python(nested, field.fields, item)
        kwargs[field.name] = item
    return cls(**kwargs)


@pytest.mark.parametrize(("key", "version"), ALL_VERSIONS, ids=_ids(ALL_VERSIONS))
def test_kafka_python_requests_decode_and_match(key: int, version: int) -> None:
    cls = _kafka_python_class(API_NAMES[key] + "Request")[version]
    for nulls in (False, True):
        body = _sample(APIS[key].request, version, nulls)
        request = _to_kafka_python(cls, APIS[key].request, body)
        request.with_header(correlation_id=99, client_id="kafka-python")
        frame = bytes(request.encode(header=True))
        header, decoded = read_request(frame)
        assert header == RequestHeader(key, version, 99, "kafka-python")
        assert _project(decoded, body) == body
        assert encode_request(header, body) == frame


@pytest.mark.parametrize(("key", "version"), ALL_VERSIONS, ids=_ids(ALL_VERSIONS))
def test_kafka_python_encodes_responses_like_us(key: int, version: int) -> None:
    cls = _kafka_python_class(API_NAMES[key] + "Response")[version]
    for nulls in (False, True):
        body = _sample(APIS[key].response, version, nulls)
        if key == 18:
            body["error_code"] = 0
        response = _to_kafka_python(cls, APIS[key].response, body)
        response.with_header(correlation_id=99)
        theirs = bytes(response.encode(header=True, framed=True))
        assert write_response(RequestHeader(key, version, 99, None), body) == theirs
        assert _project(decode_response(key, version, theirs[4:])[1], body) == body


def test_kafka_python_reads_our_fallback() -> None:
    cls = _kafka_python_class("ApiVersionsResponse")
    frame = api_versions_fallback(RequestHeader(18, 7, 5, None))
    # A non-zero error makes kafka-python read the body as v0 whatever version it asked for.
    decoded = cls.decode(frame[4:], version=3, header=True)
    assert decoded.error_code == 35
    assert {(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys} == {
        (key, low, high) for key, (low, high) in SUPPORTED.items()
    }
