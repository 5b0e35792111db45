"""How commands print structured answers: JSON documents and lines, and fixed-width tables.

May import: click and the standard library.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import click

__all__ = ["Column", "echo_json", "echo_table"]


def echo_json(data: object, *, indent: int | None = 2, sort_keys: bool = False) -> None:
    """Print DATA as JSON: an indented document, or (indent None) one line, as for JSON lines."""
    click.echo(json.dumps(data, indent=indent, sort_keys=sort_keys))


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a table: the row key it shows, its header, its width (0: as wide as its text) and alignment."""

    key: str
    header: str
    width: int = 0
    align: Literal["<", ">"] = "<"
    gap: str = " "  # put before the column (not before the first)


def echo_table(columns: Sequence[Column], rows: Iterable[Mapping[str, object]], cell: Callable[[object], str]) -> None:
    """Print a header line and one line per row; CELL turns each value into its text before it is padded."""

    def line(texts: Iterable[str]) -> str:
        parts = []
        for index, (column, text) in enumerate(zip(columns, texts, strict=True)):
            padded = text.ljust(column.width) if column.align == "<" else text.rjust(column.width)
            parts.append(padded if index == 0 else column.gap + padded)
        return "".join(parts)

    click.echo(line(column.header for column in columns))
    for row in rows:
        click.echo(line(cell(row[column.key]) for column in columns))
