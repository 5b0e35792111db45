"""What a record becomes in the search server, with no I/O: its index (from a pattern), its ``_id`` and
its document (a JSON object value as it is, anything else under ``value``; metadata under one field).

The ``_id`` is ``<topic>-<partition>-<offset>``, so indexing a record again (after a crash, before the
commit) overwrites the same document instead of adding one. The index pattern uses the record's own
timestamp, not the clock, so a replay lands in the same index too.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import orjson

from connectors.records import text_or_b64
from talos import Message

__all__ = ["check_index_pattern", "document", "document_id", "index_name"]

_TOKEN = re.compile(r"\{([^{}]*)\}")
_DATE_PARTS = {"yyyy": "%Y", "yy": "%y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M"}
_DATE_FORMAT = re.compile(r"^(?:yyyy|yy|MM|dd|HH|mm|[.\-_])+$")
_FORBIDDEN = set('\\/*?"<>| ,#:')


def _strftime(token: str) -> str:
    return re.sub(r"yyyy|yy|MM|dd|HH|mm", lambda m: _DATE_PARTS[m.group(0)], token)


def check_index_pattern(pattern: str) -> str:
    """The pattern, or ValueError saying what is wrong with it."""
    if not pattern:
        raise ValueError("the index pattern is empty")
    for token in _TOKEN.findall(pattern):
        if token not in ("topic", "partition") and not _DATE_FORMAT.match(token):
            raise ValueError(
                f"unknown placeholder {{{token}}} in index {pattern!r}: use {{topic}}, {{partition}} or a date "
                "like {yyyy.MM.dd} (yyyy yy MM dd HH mm and . - _)"
            )
    literal = _TOKEN.sub("", pattern)
    if "{" in literal or "}" in literal:
        raise ValueError(f"unbalanced braces in index {pattern!r}")
    bad = sorted(_FORBIDDEN & set(literal))
    if bad or (literal[:1] in ("-", "_", "+") and pattern[:1] != "{"):
        raise ValueError(f"index {pattern!r}: names cannot contain {' '.join(bad) or 'a leading - _ +'}")
    return pattern


def index_name(pattern: str, *, topic: str, partition: int, timestamp_ms: int) -> str:
    """The index of one record (lower case, as the search server requires)."""
    moment = datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC)

    def fill(match: re.Match[str]) -> str:
        token = match.group(1)
        if token == "topic":
            return topic
        if token == "partition":
            return str(partition)
        return moment.strftime(_strftime(token))

    return _TOKEN.sub(fill, pattern).lower()


def document_id(topic: str, partition: int, offset: int) -> str:
    return f"{topic}-{partition}-{offset}"


def document(message: Message, metadata_field: str | None) -> dict[str, Any]:
    """The document to index: the value if it is a JSON object, else ``{"value": ...}``; with
    ``metadata_field``, the record's topic, partition, offset, timestamp and key under that field."""
    body: dict[str, Any] | None = None
    if message.value:
        try:
            parsed = orjson.loads(message.value)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            body = parsed
    if body is None:
        body = text_or_b64("value", message.value)
    if metadata_field:
        body[metadata_field] = {
            "topic": message.topic,
            "partition": message.partition,
            "offset": message.offset,
            "timestamp": message.timestamp,
            **text_or_b64("key", message.key),
        }
    return body
