"""What a person reads for each quota field. The forms post, and the API and the audit log keep, the field
names (``produce_bytes_per_s``…); the pages show these words instead, and the figures in their own units
(``format_amount``: "2 MiB/s", "100 req/s", "8 partitions"). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["FIELDS", "FieldText", "choice", "label"]


@dataclass(frozen=True, slots=True)
class FieldText:
    label: str  # a column heading: "Produce"
    meaning: str  # what the limit counts, for the request form's choice


FIELDS: Mapping[str, FieldText] = MappingProxyType(
    {
        "produce_bytes_per_s": FieldText("Produce", "bytes written per second"),
        "fetch_bytes_per_s": FieldText("Fetch", "bytes read per second"),
        "requests_per_s": FieldText("Requests", "requests per second"),
        "partitions": FieldText("Partitions", "number of partitions"),
    }
)


def label(field: str) -> str:
    """``"Produce"`` for ``produce_bytes_per_s``."""
    return FIELDS[field].label


def choice(field: str) -> str:
    """``"Produce (bytes written per second)"``: an option of the request form, where no figure shows the unit."""
    text = FIELDS[field]
    return f"{text.label} ({text.meaning})"
