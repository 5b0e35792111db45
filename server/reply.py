"""A plain HTTP answer (status, body, content type, headers) that both the fast path and FastAPI can send."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["JSON", "Reply"]

JSON = "application/json"


@dataclass(slots=True)
class Reply:
    status: int
    body: bytes
    content_type: str = JSON
    headers: dict[str, str] = field(default_factory=dict)
