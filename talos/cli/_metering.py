"""``talos metering run|query``: the metering job over ``__talos_metrics`` and queries of its store.

May import: click, the public SDK, ``metering`` (inside the commands only, once ``_extras`` found what the
command needs of the metering extra) and ``talos.cli``'s shared modules.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click

from talos import Admin
from talos.cli._common import URL
from talos.cli._extras import require
from talos.cli._output import Column, echo_json, echo_table

__all__ = ["metering"]


@click.group()
def metering() -> None:
    """Usage metering: the servers' __talos_metrics, summed per minute into DuckDB (default) or Druid.

    Needs the metering extra: pip install 'talos-mq[metering]' (PySpark; Java 17+ for Spark).
    """


def _store_options(function: Callable[..., Any]) -> Callable[..., Any]:
    function = click.option(
        "--store",
        "store_path",
        default=None,
        help="DuckDB file [default: talos-metering/usage.duckdb].",
    )(function)
    return click.option("--druid", default=None, help="Use Druid at this URL (router or broker) instead of DuckDB.")(
        function
    )


def _open_store(store_path: str | None, druid: str | None) -> Any:
    from metering import open_store

    return open_store(duckdb_path=store_path, druid_url=druid)


@metering.command("run")
@URL
@_store_options
@click.option("--checkpoint", default="talos-metering/checkpoint", show_default=True, help="Spark checkpoint dir.")
@click.option("--interval", type=click.FloatRange(0.1), default=10.0, show_default=True, help="Seconds per batch.")
@click.option("--once", is_flag=True, help="Count what is in __talos_metrics now, then stop.")
@click.option("--max-records", type=click.IntRange(1), default=None, help="At most this many records per batch.")
@click.option(
    "--master",
    envvar="TALOS_SPARK_MASTER",
    default="local[2]",
    show_default=True,
    help="Spark master; 'submit': the one spark-submit set (a SparkApplication's driver). Env TALOS_SPARK_MASTER.",
)
def metering_run(
    url: str,
    store_path: str | None,
    druid: str | None,
    checkpoint: str,
    interval: float,
    once: bool,
    max_records: int | None,
    master: str,
) -> None:
    """Run the metering job (Spark Structured Streaming over __talos_metrics) until Ctrl-C."""
    require("metering run", "metering")
    store = _open_store(store_path, druid)
    from metering.job import spark_session, start

    with Admin(url) as admin:
        while not any(t.name == "__talos_metrics" for t in admin.list_topics()):
            click.echo("waiting for the servers' first metrics (__talos_metrics)...", err=True)
            time.sleep(2)
    spark = spark_session(None if master == "submit" else master)
    query = start(
        spark, url=url, store=store, checkpoint=checkpoint, trigger_s=interval, once=once, max_records=max_records
    )
    try:
        while query.isActive:
            query.awaitTermination(timeout=max(interval, 1.0))
            progress = query.lastProgress
            if progress:
                click.echo(
                    f"batch {progress['batchId']}: {progress['numInputRows']} records "
                    f"({progress.get('processedRowsPerSecond', 0):.0f}/s)",
                    err=True,
                )
        if query.exception() is not None:
            raise click.ClickException(str(query.exception()))
    except KeyboardInterrupt:
        query.stop()
    finally:
        spark.stop()


def _window(since: str, until: str | None) -> Any:
    from metering import Window

    now_ms = int(time.time() * 1000)
    units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    if since[-1:] not in units or not since[:-1].isdigit():
        raise click.UsageError("--since takes a duration like 30m, 6h or 7d")
    end = int(until) if until else now_ms + 60_000
    return Window(now_ms - int(since[:-1]) * units[since[-1]], end)


@metering.command("query")
@click.argument("what", type=click.Choice(["traffic", "tenants", "top"]))
@_store_options
@click.option("--since", default="1h", show_default=True, help="How far back: 30m, 6h, 7d.")
@click.option("--until", default=None, help="End of the window, ms since the epoch [default: now].")
@click.option("--topic", default=None, help="traffic: only this topic.")
@click.option("--limit", type=click.IntRange(1), default=10, show_default=True, help="top: how many partitions.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines instead of a table.")
def metering_query(
    what: str,
    store_path: str | None,
    druid: str | None,
    since: str,
    until: str | None,
    topic: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Traffic per topic/partition, usage per tenant, or the top partitions, over a window."""
    require("metering query", "metering", ("pydruid",) if druid else ("duckdb",))  # only its store's client
    store = _open_store(store_path, druid)
    window = _window(since, until)
    if what == "traffic":
        rows = store.traffic(window, topic=topic)
    elif what == "tenants":
        rows = store.tenants(window)
    else:
        rows = store.top_partitions(window, limit)
    if as_json:
        for row in rows:
            echo_json(row, indent=None)
        return
    if not rows:
        click.echo("no usage in that window", err=True)
        return
    echo_table([Column(name, name, 14, ">", gap="  ") for name in rows[0]], rows, _usage_cell)


def _usage_cell(value: object) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)
