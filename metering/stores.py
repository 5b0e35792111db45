"""Which store a command line names: a DuckDB file (the embedded default) or Druid."""

from __future__ import annotations

from pathlib import Path

from metering.store import Store

__all__ = ["DEFAULT_DIR", "open_store"]

DEFAULT_DIR = Path("talos-metering")


def open_store(
    *, duckdb_path: str | Path | None = None, druid_url: str | None = None, state_dir: Path = DEFAULT_DIR
) -> Store:
    if druid_url:
        from metering.druid_store import DruidStore

        return DruidStore(druid_url, positions_path=state_dir / "druid-positions.json")
    from metering.duckdb_store import DuckDbStore

    return DuckDbStore(duckdb_path or state_dir / "usage.duckdb")
