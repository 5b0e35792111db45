"""``talos topics``: create, list, describe and delete topics.

May import: click, the public SDK and ``talos.cli``'s shared modules.
"""

from __future__ import annotations

import sys

import click

from talos.cli._common import URL, YES, admin_call

__all__ = ["topics"]


@click.group()
def topics() -> None:
    """Create, list, describe and delete topics."""


@topics.command("create")
@URL
@click.argument("name")
@click.option("--partitions", type=click.IntRange(1, 4096), default=1, show_default=True)
@click.option("--retention-ms", type=click.IntRange(0), default=None, help="Delete data older than this.")
@click.option("--retention-bytes", type=click.IntRange(0), default=None, help="Keep at most this much per partition.")
def topics_create(url: str, name: str, partitions: int, retention_ms: int | None, retention_bytes: int | None) -> None:
    """Create topic NAME."""
    topic = admin_call(
        url,
        lambda admin: admin.create_topic(
            name, partitions=partitions, retention_ms=retention_ms, retention_bytes=retention_bytes
        ),
    )
    click.echo(f"created {topic.name} with {topic.partitions} partition(s)")


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
        f"retention_bytes={topic.retention_bytes}, version={topic.version}"
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
