"""One admin request, described once (method, path, body, how to read the answer) for both twins."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from talos._transport import Response

__all__ = ["Call"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    method: str
    path: str
    read: Callable[[Response], T]
    body: bytes | None = None
    params: dict[str, str | int] | None = None
