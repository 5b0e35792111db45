"""Confluent's compatibility levels, for a format's own check of whether one schema reads data of another.

- ``BACKWARD``: consumers with the new schema read data written with the latest one (upgrade consumers first);
- ``FORWARD``: consumers with the latest schema read data written with the new one (upgrade producers first);
- ``FULL``: both; ``NONE``: nothing is checked;
- ``*_TRANSITIVE``: the same against every earlier version, not only the latest.

Pure: the check comes from the format (``server.schemas.avro.read_problems`` for Avro).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["DEFAULT_LEVEL", "LEVELS", "problems"]

LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)
DEFAULT_LEVEL = "BACKWARD"  # Confluent's default

S = TypeVar("S")


def problems(
    level: str,
    new: S,
    earlier: Sequence[S],
    read_problems: Callable[[S, S], list[str]],
    *,
    numbers: Sequence[int] | None = None,
) -> list[str]:
    """Why ``new`` may not follow ``earlier`` (its subject's versions, oldest first) at ``level``; empty if it may.
    ``read_problems(reader, writer)``: why data written with ``writer`` cannot be read with ``reader``.
    ``numbers``: the versions ``earlier`` are, for the messages (1, 2, ... if not given)."""
    if level not in LEVELS:
        raise ValueError(f"compatibility level {level!r}: expected one of {', '.join(LEVELS)}")
    if level == "NONE" or not earlier:
        return []
    against = list(earlier) if level.endswith("_TRANSITIVE") else [earlier[-1]]
    kind = level.removesuffix("_TRANSITIVE")
    found: list[str] = []
    labels = list(numbers) if numbers is not None else list(range(1, len(earlier) + 1))
    for version, old in zip(labels[len(earlier) - len(against) :], against, strict=True):
        if kind in ("BACKWARD", "FULL"):
            found += [f"version {version}'s data, read with the new schema: {p}" for p in read_problems(new, old)]
        if kind in ("FORWARD", "FULL"):
            found += [f"the new schema's data, read with version {version}: {p}" for p in read_problems(old, new)]
    return found
