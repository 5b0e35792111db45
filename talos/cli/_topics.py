"""``talos topics``: create, list, describe, alter and delete topics, and delete a topic's oldest records.

Settings are given as Kafka names them (``--config cleanup.policy=compact``), each the SDK's keyword of the same
name in snake case (``cleanup_policy``), its type read from the SDK's signature.

May import: click, the public SDK and ``talos.cli``'s shared modules.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

import click

from talos import Admin
from talos.cli._common import URL, YES, admin_call

__all__ = ["topics"]


@click.group()
def topics() -> None:
    """Create, list, describe and delete topics."""


def _settings_of(method: Callable[..., object], configs: tuple[str, ...]) -> dict[str, Any]:
    """``--config`` values (Kafka's ``name=value``) as ``method``'s keywords: ``retention.ms`` is ``retention_ms``,
    typed as the SDK's signature types it."""
    parameters = inspect.signature(method).parameters
    out: dict[str, Any] = {}
    for config in configs:
        name, sep, value = config.partition("=")
        keyword = name.strip().removeprefix("confluent.").replace(".", "_")  # Confluent's schema validation
        parameter = parameters.get(keyword)
        if not sep or parameter is None or keyword in ("self", "name", "partitions"):
            known = ", ".join(p.replace("_", ".") for p in parameters if p not in ("self", "name", "partitions"))
            raise click.BadParameter(f"{config!r}: expected NAME=VALUE with NAME one of {known}", param_hint="--config")
        kind = str(parameter.annotation)
        if "bool" in kind:
            if value.strip().lower() not in ("true", "false"):
                raise click.BadParameter(f"{config!r}: {name} is true or false", param_hint="--config")
            out[keyword] = value.strip().lower() == "true"
            continue
        try:
            out[keyword] = float(value) if "float" in kind else int(value) if "int" in kind else value.strip()
        except ValueError:
            raise click.BadParameter(f"{config!r}: {name} takes a number", param_hint="--config") from None
    return out


CONFIG = click.option(
    "--config",
    "configs",
    multiple=True,
    metavar="NAME=VALUE",
    help="A setting as Kafka names it (cleanup.policy=compact, retention.ms=86400000, "
    "confluent.value.schema.validation=true; -1: unlimited). Repeatable.",
)


@topics.command("create")
@URL
@click.argument("name")
@click.option("--partitions", type=click.IntRange(1, 4096), default=1, show_default=True)
@click.option("--retention-ms", type=click.IntRange(0), default=None, help="Delete data older than this.")
@click.option("--retention-bytes", type=click.IntRange(0), default=None, help="Keep at most this much per partition.")
@CONFIG
def topics_create(
    url: str,
    name: str,
    partitions: int,
    retention_ms: int | None,
    retention_bytes: int | None,
    configs: tuple[str, ...],
) -> None:
    """Create topic NAME."""
    settings: dict[str, Any] = {"retention_ms": retention_ms, "retention_bytes": retention_bytes}
    settings.update(_settings_of(Admin.create_topic, configs))
    topic = admin_call(url, lambda admin: admin.create_topic(name, partitions=partitions, **settings))
    click.echo(f"created {topic.name} with {topic.partitions} partition(s)")


@topics.command("alter")
@URL
@click.argument("name")
@click.option("--partitions", type=click.IntRange(1, 4096), default=None, help="More partitions (never fewer).")
@CONFIG
def topics_alter(url: str, name: str, partitions: int | None, configs: tuple[str, ...]) -> None:
    """Add partitions to topic NAME or change its settings (the others stay as they are)."""
    changes = _settings_of(Admin.alter_topic, configs)
    if partitions is None and not changes:
        raise click.UsageError("nothing to change: give --partitions or --config")
    topic = admin_call(url, lambda admin: admin.alter_topic(name, partitions=partitions, **changes))
    click.echo(f"altered {topic.name}: {topic.partitions} partition(s), version {topic.version}")


@topics.command("list")
@URL
def topics_list(url: str) -> None:
    """List topics."""
    for topic in admin_call(url, lambda admin: admin.list_topics()):
        click.echo(f"{topic.name}\tpartitions={topic.partitions}")


@topics.command("describe")
@URL
@click.argument("name")
def topics_describe(url: str, name: str) -> None:
    """Show topic NAME with each partition's earliest and latest offset."""
    topic = admin_call(url, lambda admin: admin.describe_topic(name))
    click.echo(
        f"{topic.name}: {topic.partitions} partition(s), retention_ms={topic.retention_ms}, "
        f"retention_bytes={topic.retention_bytes}, cleanup_policy={topic.cleanup_policy}, version={topic.version}"
    )
    for info in topic.partition_offsets:
        owner = f"\towner={info.owner}" if info.owner else ""
        click.echo(f"  partition {info.partition}\tearliest={info.earliest}\tlatest={info.latest}{owner}")


@topics.command("delete")
@URL
@click.argument("name")
@YES
def topics_delete(url: str, name: str, yes: bool) -> None:
    """Delete topic NAME and all its data."""
    if not yes and sys.stdin.isatty():
        click.confirm(f"delete {name} and all its data?", abort=True)
    admin_call(url, lambda admin: admin.delete_topic(name))
    click.echo(f"deleted {name}")


def _below(spec: str) -> tuple[int, int]:
    partition, sep, offset = spec.partition("=")
    try:
        if not sep:
            raise ValueError
        return int(partition), int(offset)
    except ValueError:
        raise click.BadParameter(f"{spec!r}: expected PARTITION=OFFSET (OFFSET -1: every record)") from None


@topics.command("compact")
@URL
@click.argument("name")
@click.option("--partition", "partitions", type=click.IntRange(0), multiple=True, help="Only these (default: all).")
def topics_compact(url: str, name: str, partitions: tuple[int, ...]) -> None:
    """Compact the partitions of compacted topic NAME now, whatever their dirty ratio, one at a time."""

    def run(admin: Admin) -> list[tuple[int, dict[str, Any]]]:
        wanted = partitions or tuple(range(admin.describe_topic(name).partitions))
        done = []
        for partition in wanted:
            click.echo(f"partition {partition} ...", err=True)
            done.append((partition, admin.compact(name, partition)))
        return done

    for partition, report in admin_call(url, run):
        if not report.get("compacted"):
            click.echo(f"partition {partition}\tnothing to compact")
            continue
        click.echo(
            f"partition {partition}\tcleaned to {report['cleaned_to']}: {report['records_removed']} of "
            f"{report['records_read']} records removed, {report['bytes_read']} bytes read, "
            f"{report['bytes_written']} written"
        )


@topics.command("delete-records")
@URL
@click.argument("name")
@click.argument("below", nargs=-1, required=True, metavar="PARTITION=OFFSET...")
@YES
def topics_delete_records(url: str, name: str, below: tuple[str, ...], yes: bool) -> None:
    """Delete the records of topic NAME below OFFSET of each PARTITION (-1: all of them so far)."""
    offsets = dict(_below(spec) for spec in below)
    if not yes and sys.stdin.isatty():
        click.confirm(f"delete the records of {name} below {below}?", abort=True)
    starts = admin_call(url, lambda admin: admin.delete_records(name, offsets))
    for partition, start in sorted(starts.items()):
        click.echo(f"partition {partition}\tearliest={start}")
