"""A stored record as JSON: what REST's fetch answers and what push subscriptions deliver (a key, a value and
header values as UTF-8 text, or base64 in ``*_b64`` where they are not text)."""

from __future__ import annotations

import base64

from talos import Record

__all__ = ["message_json"]


def _text_or_b64(name: str, data: bytes | None, into: dict[str, object]) -> None:
    if data is None:
        into[name] = None
        return
    try:
        into[name] = data.decode()
    except UnicodeDecodeError:
        into[f"{name}_b64"] = base64.b64encode(data).decode()


def message_json(record: Record) -> dict[str, object]:
    item: dict[str, object] = {"offset": record.offset, "timestamp": record.timestamp}
    _text_or_b64("key", record.key, item)
    _text_or_b64("value", record.value, item)
    headers: dict[str, str | None] = {}
    for name, value in record.headers:
        try:
            headers[name] = None if value is None else value.decode()
        except UnicodeDecodeError:
            headers[name] = base64.b64encode(value or b"").decode()
    item["headers"] = headers
    return item
