"""API errors: one exception type, rendered as ``{"error": {"code", "message", "retriable"}}``.

The type is the SDK's :class:`talos.ApiError` (one definition of status, code, message, retriable and
details on both sides of the wire) plus the response headers only a server sends. Every room of the server
may import this module; it imports only ``talos`` and ``fencing``."""

from __future__ import annotations

from typing import TypedDict, Unpack

import orjson
from starlette.responses import Response

import talos
from fencing import OffsetOutOfRangeError

__all__ = ["ApiError", "error_body", "error_response", "out_of_range"]


class _Fields(TypedDict, total=False):
    """The SDK error's keyword fields, passed through as they are."""

    retriable: bool
    details: dict[str, object] | None


class ApiError(talos.ApiError):
    """An error a client sees, with its HTTP status and a stable code, and the headers of its response."""

    def __init__(
        self, status: int, code: str, message: str, *, headers: dict[str, str] | None = None, **fields: Unpack[_Fields]
    ) -> None:
        super().__init__(status, code, message, **fields)
        self.headers = headers or {}

    def __str__(self) -> str:
        # The message alone, as the server has always logged it (the SDK's form prefixes status and code).
        return self.message


def out_of_range(error: OffsetOutOfRangeError) -> ApiError:
    """416 with the partition's bounds, so a client can move to a valid offset."""
    return ApiError(
        416, "OFFSET_OUT_OF_RANGE", str(error), details={"earliest": error.earliest, "latest": error.latest}
    )


def error_body(error: ApiError) -> bytes:
    body: dict[str, object] = {"code": error.code, "message": error.message, "retriable": error.retriable}
    body.update(error.details)
    return orjson.dumps({"error": body})


def error_response(error: ApiError) -> Response:
    return Response(error_body(error), status_code=error.status, headers=error.headers, media_type="application/json")
