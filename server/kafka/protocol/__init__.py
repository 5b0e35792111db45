"""The Kafka wire protocol: request frames in, response frames out (pure codec, no I/O).

``read_request`` takes a frame without its 4-byte size prefix and returns the header and the body as a dict
(snake_case field names, see ``messages.py``); ``write_response`` returns a whole frame, size prefix
included, and ``response_parts`` the same frame as buffers (a Fetch answer's records are not copied into it).
Only the APIs and versions in ``SUPPORTED`` are decoded; anything else raises :class:`UnsupportedVersion`
carrying the header, so the caller can still answer (for ApiVersions, with :func:`api_versions_fallback`).
``encode_request`` and ``decode_response`` are the client-side counterparts, for tests and tools.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from server.kafka.protocol.errors import ErrorCode
from server.kafka.protocol.messages import APIS
from server.kafka.protocol.primitives import Buffer, ProtocolError, Reader, Writer
from server.kafka.protocol.schema import StructCodec, compile_struct, parse_versions

__all__ = [
    "API_NAMES",
    "SUPPORTED",
    "ErrorCode",
    "ProtocolError",
    "RequestHeader",
    "UnsupportedVersion",
    "api_versions_fallback",
    "decode_response",
    "encode_request",
    "read_request",
    "response_parts",
    "write_response",
]

API_VERSIONS_KEY = 18

_SIZE = struct.Struct(">i")
_FIXED_HEADER = struct.Struct(">hhi")


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


class UnsupportedVersion(Exception):
    """The request's API key is unknown here or its version is outside ``SUPPORTED``; the body was not read."""

    def __init__(self, header: RequestHeader, message: str) -> None:
        super().__init__(message)
        self.header = header


SUPPORTED: dict[int, tuple[int, int]] = {key: api.versions for key, api in APIS.items()}
API_NAMES: dict[int, str] = {key: api.name for key, api in APIS.items()}


def _first_flexible(flexible_versions: str) -> int:
    bounds = parse_versions(flexible_versions)
    # "none": no version of the API is flexible.
    return 0x7FFF + 1 if bounds is None else bounds[0]


_FLEXIBLE_FROM: dict[int, int] = {key: _first_flexible(api.flexible_versions) for key, api in APIS.items()}

# Plans by (api key, version), built on first use.
_REQUEST_PLANS: dict[tuple[int, int], StructCodec] = {}
_RESPONSE_PLANS: dict[tuple[int, int], StructCodec] = {}


def _request_plan(api_key: int, version: int) -> StructCodec:
    plan = _REQUEST_PLANS.get((api_key, version))
    if plan is None:
        plan = compile_struct(APIS[api_key].request, version, version >= _FLEXIBLE_FROM[api_key])
        _REQUEST_PLANS[api_key, version] = plan
    return plan


def _response_plan(api_key: int, version: int) -> StructCodec:
    plan = _RESPONSE_PLANS.get((api_key, version))
    if plan is None:
        plan = compile_struct(APIS[api_key].response, version, version >= _FLEXIBLE_FROM[api_key])
        _RESPONSE_PLANS[api_key, version] = plan
    return plan


def _is_supported(api_key: int, version: int) -> bool:
    bounds = SUPPORTED.get(api_key)
    return bounds is not None and bounds[0] <= version <= bounds[1]


def read_request(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, dict[str, Any]]:
    """Decodes one request frame (the bytes after the size prefix): header v1, or v2 for flexible versions.

    ``records`` values are views into ``frame``, which must therefore not be reused while they are alive.
    Bytes left over after the body are ignored."""
    reader = Reader(frame)
    api_key = reader.read_int16()
    api_version = reader.read_int16()
    correlation_id = reader.read_int32()
    if not _is_supported(api_key, api_version):
        try:
            client_id = reader.read_nullable_string()
        except ProtocolError:
            # The caller can still answer the correlation id; the client id is only informative.
            client_id = None
        header = RequestHeader(api_key, api_version, correlation_id, client_id)
        name = API_NAMES.get(api_key, "unknown API")
        raise UnsupportedVersion(header, f"{name} (key {api_key}) version {api_version} is not supported")
    # The client id keeps its two-byte length even in header v2, so that any broker can read the header.
    header = RequestHeader(api_key, api_version, correlation_id, reader.read_nullable_string())
    if api_version >= _FLEXIBLE_FROM[api_key]:
        reader.skip_tagged_fields()
    body = _request_plan(api_key, api_version).decode(reader)
    # Bytes after the body are ignored, as Kafka's brokers ignore them: librdkafka sends Metadata v12 with three
    # bytes of fields that version no longer has.
    return header, body


def write_response(header: RequestHeader, body: dict[str, Any]) -> bytes:
    """The whole response frame: size, correlation id, header tagged fields when flexible (never for
    ApiVersions, whose response header stays v0 so that a client can read it before knowing our
    versions), then ``body`` encoded at ``header.api_version``."""
    return b"".join(response_parts(header, body))


def response_parts(header: RequestHeader, body: dict[str, Any]) -> list[Buffer]:
    """:func:`write_response`'s frame as buffers for ``writelines``: a Fetch answer's records are not copied."""
    api_key, version = header.api_key, header.api_version
    if not _is_supported(api_key, version):
        raise UnsupportedVersion(header, f"no response schema for key {api_key} version {version}")
    writer = Writer(b"\0\0\0\0")
    writer.write_int32(header.correlation_id)
    if version >= _FLEXIBLE_FROM[api_key] and api_key != API_VERSIONS_KEY:
        writer.write_tagged_fields()
    _response_plan(api_key, version).encode(writer, body)
    return writer.framed_parts()


def _fallback_body() -> bytes:
    writer = Writer()
    _response_plan(API_VERSIONS_KEY, 0).encode(
        writer,
        {
            "error_code": ErrorCode.UNSUPPORTED_VERSION,
            "api_keys": [
                {"api_key": key, "min_version": low, "max_version": high}
                for key, (low, high) in sorted(SUPPORTED.items())
            ],
        },
    )
    return writer.getvalue()


_FALLBACK_BODY = _fallback_body()


def api_versions_fallback(header: RequestHeader) -> bytes:
    """The whole frame answering an ApiVersions request of a version we do not know: a v0 response (the
    one format every client can read) with UNSUPPORTED_VERSION and our version table, from which the
    client picks a version and asks again."""
    return _SIZE.pack(4 + len(_FALLBACK_BODY)) + _SIZE.pack(header.correlation_id) + _FALLBACK_BODY


def encode_request(header: RequestHeader, body: dict[str, Any]) -> bytes:
    """A request frame without its size prefix (what :func:`read_request` takes)."""
    api_key, version = header.api_key, header.api_version
    if not _is_supported(api_key, version):
        raise UnsupportedVersion(header, f"no request schema for key {api_key} version {version}")
    writer = Writer()
    writer.buf += _FIXED_HEADER.pack(api_key, version, header.correlation_id)
    writer.write_nullable_string(header.client_id)
    if version >= _FLEXIBLE_FROM[api_key]:
        writer.write_tagged_fields()
    _request_plan(api_key, version).encode(writer, body)
    return writer.getvalue()


def decode_response(
    api_key: int, api_version: int, frame: bytes | bytearray | memoryview
) -> tuple[int, dict[str, Any]]:
    """The correlation id and body of a response frame without its size prefix."""
    if not _is_supported(api_key, api_version):
        raise ValueError(f"no response schema for key {api_key} version {api_version}")
    reader = Reader(frame)
    correlation_id = reader.read_int32()
    if api_version >= _FLEXIBLE_FROM[api_key] and api_key != API_VERSIONS_KEY:
        reader.skip_tagged_fields()
    body = _response_plan(api_key, api_version).decode(reader)
    if reader.pos != reader.end:
        raise ProtocolError(f"{reader.end - reader.pos} trailing bytes after a {API_NAMES[api_key]} response")
    return correlation_id, body
