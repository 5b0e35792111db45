"""The metering job: a Structured Streaming query over ``__talos_metrics`` (through the ``talos`` source)
that sums usage per minute and writes it to a :class:`Store`.

Each micro-batch first drops the records the store has already counted (by its stored positions), then
aggregates, then stores the rows and the new positions together: exactly once, whatever Spark re-runs.
"""

from __future__ import annotations

import functools
import operator
import os
import sys
from typing import Any

from metering.store import COUNTERS, MinuteUsage, Store

__all__ = ["SERVER_HEADER", "USAGE_SCHEMA", "count_batch", "server_usage", "spark_session", "start"]

METRICS_TOPIC = "__talos_metrics"
# Set by a server's usage emitter on each record it writes, to its own id (the document's "server"). Only
# the servers write to __talos_metrics (tenants are refused); records without it are not usage.
SERVER_HEADER = "talos-server"
USAGE_SCHEMA = (
    "server string, window_start_ms long, window_end_ms long, tenant string, topic string, partition int, "
    "bytes_in long, messages_in long, bytes_out long, messages_out long, requests long, errors long, "
    "latency_ms_sum double, latency_ms_max double"
)


def spark_session(master: str | None = "local[2]") -> Any:
    """A Spark session whose Python workers run this interpreter (so they import talos), with the ``talos``
    data source registered. ``master=None`` keeps what spark-submit set (a driver on Kubernetes)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from connectors.spark import TalosDataSource

    builder = SparkSession.builder if master is None else SparkSession.builder.master(master)
    spark = (
        builder.appName("talos-metering")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(TalosDataSource)
    return spark


def count_batch(batch: Any, store: Store) -> int:
    """One micro-batch (``topic, partition, offset, ..., value`` rows of ``__talos_metrics``) into the store;
    returns how many metrics records were new."""
    from pyspark.sql import functions as f

    positions = store.positions()
    if positions:
        seen = functools.reduce(
            operator.or_, [(f.col("partition") == p) & (f.col("offset") < o) for p, o in positions.items()]
        )
        batch = batch.filter(~seen)
    ends = {
        int(r["partition"]): int(r["end"])
        for r in batch.groupBy("partition").agg((f.max("offset") + 1).alias("end")).collect()
    }
    if not ends:
        return 0
    usage = server_usage(batch)
    minute = (f.floor(f.col("window_start_ms") / 60000) * 60000).cast("long").alias("minute_ms")
    sums = [f.sum(c).alias(c) for c in COUNTERS] + [f.max("latency_ms_max").alias("latency_ms_max")]
    rows = usage.groupBy(minute, "tenant", "topic", "partition").agg(*sums).collect()
    store.ingest([MinuteUsage(**row.asDict()) for row in rows], ends)
    return sum(ends.values()) - sum(positions.get(p, 0) for p in ends)


def server_usage(batch: Any) -> Any:
    """The usage documents (``USAGE_SCHEMA`` columns) of the rows a server wrote: :data:`SERVER_HEADER`
    present and naming the server the document names. Anything else (a forgery written before tenants
    were kept out of the topic) would bill some tenant for traffic that never happened."""
    from pyspark.sql import functions as f

    documents = batch.select(
        f.col("headers").getItem(SERVER_HEADER).cast("string").alias("origin"),
        f.from_json(f.col("value").cast("string"), USAGE_SCHEMA).alias("u"),
    )
    return documents.filter(f.col("origin").isNotNull() & (f.col("origin") == f.col("u.server"))).select("u.*")


def start(
    spark: Any,
    *,
    url: str,
    store: Store,
    checkpoint: str,
    trigger_s: float = 10.0,
    once: bool = False,
    max_records: int | None = None,
) -> Any:
    """Start the query; ``once``: count what is there now and stop (``trigger(availableNow=True)``)."""
    reader = (
        spark.readStream.format("talos")
        .option("url", url)
        .option("topic", METRICS_TOPIC)
        .option("startingOffsets", "earliest")
    )
    if max_records:
        reader = reader.option("maxOffsetsPerTrigger", max_records)
    writer = (
        reader.load()
        .writeStream.foreachBatch(lambda batch, _batch_id: count_batch(batch, store))
        .option("checkpointLocation", checkpoint)
        .queryName("talos-metering")
    )
    writer = writer.trigger(availableNow=True) if once else writer.trigger(processingTime=f"{trigger_s} seconds")
    return writer.start()
