"""The optional parts of the install: which commands need which extra, and one line saying how to get it.

``pip install talos-mq`` is the client: the SDK and the commands that talk to a server. Running a server
(``talos standalone``, ``talos server``, ``talos cluster up``), connectors (``talos connect``) and the metering job
(``talos metering``) need the packages of an extra; without them such a command prints one line naming the extra
and exits 1, before anything imports them (``find_spec`` looks the modules up without importing any).

May import: click. ``tests/unit/test_client_extras.py`` checks these lists against pyproject.toml's extras.
"""

from __future__ import annotations

import importlib.util

import click

__all__ = ["EXTRAS", "missing", "require"]

# extra -> (what it brings, the top-level modules its commands import from it)
EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "server": (
        "the server",
        (
            "fastapi",
            "uvicorn",
            "httptools",
            "hdfs_native",
            "kazoo",
            "uhashring",
            "prometheus_client",
            "jinja2",
            "cryptography",
            "jsonschema",
            "google",
            "fastavro",
        ),
    ),
    "connect": ("the connectors", ("hdfs", "opensearchpy", "yaml", "pydantic", "pyarrow")),
    "metering": ("the metering extra", ("pyspark", "pyarrow", "pandas", "duckdb", "pydruid", "yaml", "pydantic")),
}


def missing(extra: str, modules: tuple[str, ...] | None = None) -> list[str]:
    """The modules of EXTRA (or only MODULES of it) that this interpreter cannot import."""
    return [name for name in modules or EXTRAS[extra][1] if importlib.util.find_spec(name) is None]


def require(command: str, extra: str, modules: tuple[str, ...] | None = None) -> None:
    """End COMMAND (exit 1) with one line on how to install EXTRA, unless its modules (or MODULES) are all there."""
    absent = missing(extra, modules)
    if absent:
        what = EXTRAS[extra][0]
        raise click.ClickException(
            f"talos {command} needs {what}: pip install 'talos-mq[{extra}]' (missing: {', '.join(absent)})"
        )
