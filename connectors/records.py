"""A message as a JSON object, losslessly: text stays text, other bytes become base64 (``*_b64``).

The shape is the REST API's fetch answer (``offset``, ``timestamp``, ``key``, ``value`` | ``value_b64``,
``headers``) plus ``topic`` and ``partition``: what the HDFS sink writes as JSON lines, and what the
Elasticsearch sink indexes for a value that is not a JSON object.
"""

from __future__ import annotations

import base64
from typing import Any

from talos import Message

__all__ = ["message_json", "text_or_b64"]


def text_or_b64(name: str, data: bytes | None) -> dict[str, Any]:
    """``{name: text}`` for UTF-8 bytes, ``{name_b64: base64}`` for other bytes, ``{name: None}`` for None."""
    if data is None:
        return {name: None}
    try:
        return {name: data.decode()}
    except UnicodeDecodeError:
        return {f"{name}_b64": base64.b64encode(data).decode()}


def message_json(message: Message) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    for key, value in message.headers:
        if value is None:
            headers[key] = None
        else:
            headers.update(text_or_b64(key, value))
    return {
        "topic": message.topic,
        "partition": message.partition,
        "offset": message.offset,
        "timestamp": message.timestamp,
        **text_or_b64("key", message.key),
        **text_or_b64("value", message.value),
        "headers": headers,
    }
