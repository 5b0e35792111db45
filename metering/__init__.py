"""Metering: usage from ``__talos_metrics``, summed per minute by a Spark job into a store (DuckDB or Druid)
that answers traffic, tenant usage and top-partition queries, and gives the ring its weights.

Rooms: ``job`` (the Spark aggregation), ``store`` with ``duckdb_store``, ``druid_store`` and ``stores`` (the
stores behind one interface), ``quota_model`` (the quota decision, pure). May import ``talos`` (and reads
records with ``connectors.spark`` inside the job); never ``server``, which imports it.
"""

from __future__ import annotations

from metering.store import MinuteUsage, Store, Window
from metering.stores import open_store

__all__ = ["MinuteUsage", "Store", "Window", "open_store"]
