"""JSON request bodies read by hand (routes that forward a request must read its raw body first, so they
cannot let FastAPI parse it): a pydantic model's validation as a 400, and its schema for the OpenAPI document."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from server.errors import ApiError

__all__ = ["body_schema", "parse_body"]

M = TypeVar("M", bound=BaseModel)


def body_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` declaring ``model`` as the request body."""
    return {"requestBody": {"content": {"application/json": {"schema": model.model_json_schema()}}}}


def parse_body(model: type[M], raw: bytes) -> M:
    """``raw`` (empty: ``{}``) as ``model``; 400 INVALID_REQUEST naming the first field that is wrong."""
    try:
        return model.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ())) or "body"
        raise ApiError(400, "INVALID_REQUEST", f"{where}: {first.get('msg', 'invalid')}") from None
