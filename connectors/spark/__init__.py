"""The PySpark data source ``talos``: ``spark.dataSource.register(TalosDataSource)``, then
``spark.readStream.format("talos")`` / ``spark.read.format("talos")`` / ``df.write.format("talos")``."""

from __future__ import annotations

from connectors.spark.source import SCHEMA, TalosDataSource

__all__ = ["SCHEMA", "TalosDataSource"]
