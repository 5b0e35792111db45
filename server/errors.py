"""API errors: one exception type, rendered as ``{"error": {"code", "message", "retriable"}}``."""

from __future__ import annotations

import orjson
from starlette.responses import Response

from fencing import OffsetOutOfRangeError

__all__ = ["ApiError", "error_body", "error_response", "out_of_range"]


class ApiError(Exception):
    """An error a client sees, with its HTTP status and a stable code."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        retriable: bool = False,
        headers: dict[str, str] | None = None,
        details: dict[str, object] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retriable = retriable
        self.headers = headers or {}
        self.details = details or {}


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
