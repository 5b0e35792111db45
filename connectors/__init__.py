"""Connectors, clients of the public SDK only: the source/sink runner (``talos connect run``) with HDFS and
Elasticsearch sources and sinks, and the PySpark data source ``talos`` (``connectors.spark``).

Layout: ``config`` (the YAML file, validated), ``runner`` and ``task`` (threads, restarts, status),
``sink`` (group members that write then commit), ``source`` (exactly-once writes with checkpoints kept
by the servers), ``checkpoints``, and one package per target system (``hdfs``, ``elasticsearch``).

May import ``talos`` only; never ``server`` (tests/unit/test_import_direction.py).
"""

from __future__ import annotations

from connectors.config import ConfigError, RunnerConfig, load_config, parse_config

__all__ = ["ConfigError", "RunnerConfig", "load_config", "parse_config"]
