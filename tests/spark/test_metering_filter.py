"""The metering job counts only what a server wrote to ``__talos_metrics`` (issue 20, point 11): a record
without the server's mark (``talos-server``, naming the server the document names) is not usage, so a
forgery written there before tenants were kept out cannot bill a tenant."""

from __future__ import annotations

from typing import Any

import orjson

from connectors.spark.source import SCHEMA
from metering.job import SERVER_HEADER, server_usage


def usage(server: str, tenant: str, bytes_in: int) -> bytes:
    document = {"server": server, "window_start_ms": 0, "window_end_ms": 10_000, "tenant": tenant}
    return orjson.dumps({**document, "topic": "orders", "partition": 0, "bytes_in": bytes_in})


def test_only_records_marked_by_the_server_they_name_are_usage(spark: Any) -> None:
    rows = [
        ("__talos_metrics", 0, 0, None, b"s1", usage("s1", "acme", 10), {SERVER_HEADER: b"s1"}),
        ("__talos_metrics", 0, 1, None, b"s1", usage("s1", "globex", 10**12), {}),  # no mark
        ("__talos_metrics", 0, 2, None, b"s1", usage("s1", "globex", 10**12), None),  # no headers at all
        ("__talos_metrics", 0, 3, None, b"s2", usage("s2", "globex", 10**12), {SERVER_HEADER: b"s1"}),  # not its own
        ("__talos_metrics", 0, 4, None, b"s2", usage("s2", "acme", 5), {SERVER_HEADER: b"s2"}),
    ]
    batch = spark.createDataFrame(rows, SCHEMA)
    kept = sorted((r["server"], r["tenant"], r["bytes_in"]) for r in server_usage(batch).collect())
    assert kept == [("s1", "acme", 10), ("s2", "acme", 5)]
