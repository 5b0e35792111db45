"""A plain HTTP answer (status, body, content type, headers) that both the fast path and FastAPI can send."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.responses import Response

from server.errors import ApiError

__all__ = ["JSON", "Reply", "answer_of", "as_response", "json_response"]

JSON = "application/json"


@dataclass(slots=True)
class Reply:
    status: int
    body: bytes
    content_type: str = JSON
    headers: dict[str, str] = field(default_factory=dict)


def as_response(reply: Reply) -> Response:
    """The reply as FastAPI sends it."""
    return Response(reply.body, status_code=reply.status, headers=reply.headers, media_type=reply.content_type)


def json_response(data: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(data), status_code=status, headers=headers, media_type=JSON)


def answer_of(reply: Reply) -> dict[str, Any]:
    """The JSON document of a 2xx answer (another server's, or an endpoint's called in-process; an empty body
    is ``{}``); the answer's own error otherwise, as an :class:`ApiError` with the same status, code and
    retriability."""
    try:
        doc = orjson.loads(reply.body) if reply.body else {}
    except orjson.JSONDecodeError:
        doc = {}
    if 200 <= reply.status < 300 and isinstance(doc, dict):
        return doc
    error = doc.get("error", {}) if isinstance(doc, dict) else {}
    raise ApiError(
        reply.status if reply.status >= 400 else 502,
        str(error.get("code", "FORWARD_FAILED")),
        str(error.get("message", f"the owner answered {reply.status}")),
        retriable=bool(error.get("retriable", reply.status >= 500)),
        headers={k: v for k, v in reply.headers.items() if k.lower() == "retry-after"},
    )
