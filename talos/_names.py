"""The topic-name rule, shared by the SDK and the server (which imports it from here; never the reverse).

Topic names become directory names: letters, digits, '.', '_', '-'; no leading '.', '_' or '-'; names starting
with '__' are the servers' internal topics. Imports nothing of Talos.
"""

from __future__ import annotations

import re

__all__ = ["INTERNAL_NAME", "TOPIC_NAME", "topic_name_problem"]

TOPIC_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,248}$")
INTERNAL_NAME = re.compile(r"^__[A-Za-z0-9][A-Za-z0-9._-]{0,246}$")


def topic_name_problem(name: str, *, internal_ok: bool = False) -> str | None:
    """Why ``name`` is not a valid topic name, or None if it is (``internal_ok``: '__' names are too)."""
    if (internal_ok and INTERNAL_NAME.match(name)) or TOPIC_NAME.match(name):
        return None
    return f"invalid topic name {name[:300]!r}: 1-249 characters of A-Z a-z 0-9 . _ -, not starting with . _ -"
