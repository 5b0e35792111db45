"""``talos groups``: list and describe consumer groups, move their committed offsets.

May import: click, the public SDK and ``talos.cli``'s shared modules.
"""

from __future__ import annotations

import click

from talos.cli._common import URL, admin_call
from talos.cli._output import Column, echo_json, echo_table

__all__ = ["groups"]

# `talos groups describe`: one line per partition of the group.
_PARTITION_COLUMNS = (
    Column("topic", "TOPIC", 30),
    Column("partition", "PARTITION", 9, ">"),
    Column("committed", "COMMITTED", 10, ">"),
    Column("high_watermark", "HIGH", 10, ">"),
    Column("lag", "LAG", 8, ">"),
    Column("member", "MEMBER", gap="  "),
)


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


@click.group()
def groups() -> None:
    """List and describe consumer groups; move their committed offsets."""


@groups.command("list")
@URL
def groups_list(url: str) -> None:
    """List consumer groups."""
    for name in admin_call(url, lambda admin: admin.list_groups()):
        click.echo(name)


@groups.command("describe")
@URL
@click.argument("group")
@click.option("--json", "as_json", is_flag=True, help="The full description as JSON.")
def groups_describe(url: str, group: str, as_json: bool) -> None:
    """Show GROUP: its members, and per partition the holder, committed offset, high watermark and lag."""
    described = admin_call(url, lambda admin: admin.describe_group(group))
    if as_json:
        echo_json(described)
        return
    click.echo(
        f"group {described['group']}  mode {described['mode'] or '-'}  state {described['state']}  "
        f"generation {described['generation']}  coordinator {described['coordinator']}"
    )
    for member in described["members"]:
        held = ", ".join(f"{a['topic']}/{a['partition']}" for a in member["assignment"]) or "-"
        click.echo(f"  member {member['member_id']}  instance {member['instance']}  holds {held}")
    echo_table(_PARTITION_COLUMNS, described["partitions"], _cell)


@groups.command("reset-offsets")
@URL
@click.argument("group")
@click.option("--topic", required=True, help="The topic whose committed offsets move.")
@click.option("--partition", type=click.IntRange(0), default=None, help="Only this partition [default: all].")
@click.option("--to-earliest", "to", flag_value="earliest", help="Move to each partition's earliest offset.")
@click.option("--to-latest", "to", flag_value="latest", help="Move to the end (skip everything there now).")
@click.option("--to-offset", type=click.IntRange(0), default=None, help="Move to this offset (clamped to the range).")
@click.option(
    "--to-timestamp", type=click.IntRange(0), default=None, help="Move to the first offset at/after this time (ms)."
)
def groups_reset_offsets(
    url: str,
    group: str,
    topic: str,
    partition: int | None,
    to: str | None,
    to_offset: int | None,
    to_timestamp: int | None,
) -> None:
    """Move GROUP's committed offsets of a topic. The group must have no active members."""
    chosen = [c for c in (to, to_offset is not None and "offset", to_timestamp is not None and "timestamp") if c]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, --to-timestamp")
    moved = admin_call(
        url,
        lambda admin: admin.reset_offsets(
            group, topic, to=str(chosen[0]), partition=partition, offset=to_offset, timestamp=to_timestamp
        ),
    )
    for row in moved:
        click.echo(f"{row['topic']}/{row['partition']} -> {row['offset']}")
