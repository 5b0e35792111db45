"""What every HTTP edge (the REST API, the portal, the WebSocket endpoint) needs and none of them owns: the
ASGI types, reading a request's body within a limit, integer query parameters, JSON bodies parsed into a
pydantic model (and its schema for the OpenAPI document), and JSON and plain answers as Starlette responses.

Edge-neutral on purpose: the edges import it and never each other. It imports no edge; of the services only
the :class:`~server.messaging.caller.Caller` an HTTP request is served for (:func:`caller_of`).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from starlette.responses import Response

from server.errors import ApiError
from server.messaging.caller import Caller
from server.peers import HOPS_HEADER, JSON, ROUTE_HEADER, Reply
from server.tls import request_credentials
from server.trace.recorder import CLIENT_HEADER
from server.usage.meter import TENANT_HEADER

__all__ = [
    "INT64_MAX",
    "JSON",
    "MAX_ADMIN_BODY",
    "ASGIApp",
    "Receive",
    "Scope",
    "Send",
    "as_response",
    "body_schema",
    "caller_of",
    "check_declared_length",
    "int_param",
    "json_response",
    "parse_body",
    "read_body",
]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_ADMIN_BODY = 1024 * 1024  # everything but produce: topics, groups, tenants, portal forms
# Every integer a client sends ends in a signed 64-bit field (batch header, JSON documents via orjson).
INT64_MAX = 2**63 - 1
_INTEGER = re.compile(r"-?[0-9]{1,19}")

M = TypeVar("M", bound=BaseModel)


async def read_body(receive: Receive, limit: int, declared: str | None) -> bytes:
    """The whole request body, refusing (413) more than ``limit`` bytes before reading them all."""
    check_declared_length(limit, declared)
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionResetError("client went away")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "REQUEST_TOO_LARGE", f"request body over the limit of {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def check_declared_length(limit: int, declared: str | None) -> None:
    """413 if the request's content-length says its body is over ``limit`` (before a byte of it is read)."""
    if declared is not None and _is_length(declared) and (len(declared) > 18 or int(declared) > limit):
        raise ApiError(413, "REQUEST_TOO_LARGE", f"request body of {declared} bytes; the limit is {limit}")


def _is_length(header: str) -> bool:
    return header.isascii() and header.isdigit()


def int_param(
    query: Mapping[str, str], name: str, default: int | None, *, low: int = 0, high: int | None = None
) -> int:
    raw = query.get(name)
    if raw is None:
        if default is None:
            raise ApiError(400, "INVALID_REQUEST", f"query parameter {name!r} is required")
        return default
    if not _INTEGER.fullmatch(raw):  # int() also takes "٣", " 5", "1_0" and thousands of digits
        raise ApiError(400, "INVALID_REQUEST", f"{name} must be an integer, got {raw[:50]!r}")
    value = int(raw)
    if value < low or value > (high if high is not None else INT64_MAX):
        bound = f"between {low} and {high if high is not None else INT64_MAX}"
        raise ApiError(400, "INVALID_REQUEST", f"{name} must be {bound}, got {value}")
    return value


def isolation_param(query: Mapping[str, str]) -> bool:
    """``?isolation=read_committed`` (True) or ``read_uncommitted`` (False, the default): what a fetch or an
    offsets request may see of transactions not yet decided."""
    raw = query.get("isolation", "read_uncommitted")
    if raw not in ("read_committed", "read_uncommitted"):
        raise ApiError(
            400, "INVALID_REQUEST", f"isolation must be read_committed or read_uncommitted, got {raw[:50]!r}"
        )
    return raw == "read_committed"


def caller_of(headers: Mapping[str, str]) -> Caller:
    """Who an authenticated HTTP request is served for (``headers``: lower-case names, with the tenant header
    its authentication set), for the service layer: one tuple, no copy of the headers."""
    return Caller(
        headers.get(TENANT_HEADER),
        headers.get(CLIENT_HEADER),
        request_credentials(headers),
        headers.get(HOPS_HEADER),
        headers.get(ROUTE_HEADER),
    )


def body_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` declaring ``model`` as the request body."""
    return {"requestBody": {"content": {"application/json": {"schema": model.model_json_schema()}}}}


def parse_body(model: type[M], raw: bytes) -> M:
    """``raw`` (empty: ``{}``) as ``model``; 400 INVALID_REQUEST naming the first field that is wrong.

    For routes that read their raw body first (those that forward a request cannot let FastAPI parse it)."""
    try:
        return model.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ())) or "body"
        raise ApiError(400, "INVALID_REQUEST", f"{where}: {first.get('msg', 'invalid')}") from None


def as_response(reply: Reply) -> Response:
    """The reply as FastAPI sends it."""
    return Response(reply.body, status_code=reply.status, headers=reply.headers, media_type=reply.content_type)


def json_response(data: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(data), status_code=status, headers=headers, media_type=JSON)
