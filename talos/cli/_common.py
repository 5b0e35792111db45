"""What the command groups share: the ``--url``, ``--dir`` and ``--compression`` options, one Admin call, an SDK
error as a CLI error.

May import: click and the public SDK (``talos``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TypeVar

import click

from talos import DEFAULT_URL, Admin, TalosError

__all__ = ["CLUSTER_DIR", "COMPRESSION", "URL", "YES", "admin_call", "fail"]

_T = TypeVar("_T")

URL = click.option(
    "--url", envvar="TALOS_URL", default=DEFAULT_URL, show_default=True, help="Server URL (env TALOS_URL)."
)

# The producer's codec (`talos produce`, `talos bench produce`): Kafka's, applied to each batch's records.
COMPRESSION = click.option(
    "--compression",
    type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
    default="none",
    show_default=True,
    help="Compress each batch's records.",
)

# Deletes ask first (`talos topics delete`, `talos tenants delete`); scripts skip the question.
YES = click.option("--yes", is_flag=True, help="Do not ask.")

# The directory of a local cluster (`talos cluster up/down`), which `talos verify --faults local` acts on too.
CLUSTER_DIR = click.option(
    "--dir",
    "base_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("talos-cluster"),
    show_default=True,
    help="Data, logs and cluster.json (what `down` stops).",
)


def fail(error: Exception) -> NoReturn:
    """Stop the command with ERROR's message (exit 1), as click prints its own errors."""
    raise click.ClickException(str(error)) from error


def admin_call(url: str, action: Callable[[Admin], _T]) -> _T:
    """ACTION's answer from an Admin client of URL; a Talos error ends the command."""
    try:
        with Admin(url) as admin:
            return action(admin)
    except TalosError as exc:
        fail(exc)
