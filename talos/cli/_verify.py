"""``talos verify``: write to a cluster for a while (optionally under faults) and check nothing acknowledged is lost.

May import: click, the public SDK, ``talos._verify`` and ``server.devservices`` (inside the command, for
``--faults local``), and ``talos.cli``'s shared modules.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from talos import TalosError
from talos.cli._common import CLUSTER_DIR, URL, fail

__all__ = ["verify"]


@click.command()
@URL
@click.option("--seconds", type=click.FloatRange(1), default=60, show_default=True, help="How long to write.")
@click.option("--partitions", type=click.IntRange(1, 4096), default=6, show_default=True)
@click.option("--writers", type=click.IntRange(1, 64), default=4, show_default=True, help="Producers at once.")
@click.option(
    "--consumers",
    type=click.IntRange(0, 64),
    default=2,
    show_default=True,
    help="Members of one consumer group reading meanwhile (0: none); each acknowledged message must reach them.",
)
@click.option("--topic", help="Name of the topic to create (default verify-<milliseconds>); it must not exist.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@click.option(
    "--idempotent/--no-idempotent",
    default=True,
    show_default=True,
    help="Idempotent producers (exactly once); without, duplicates are allowed but not loss.",
)
@click.option(
    "--faults",
    type=click.Choice(["none", "local"]),
    default="none",
    show_default=True,
    help="local: kill -9, SIGSTOP, ZooKeeper and DataNode restarts on a cluster from `talos cluster up`.",
)
@CLUSTER_DIR
def verify(
    url: str,
    seconds: float,
    partitions: int,
    writers: int,
    consumers: int,
    topic: str | None,
    as_json: bool,
    idempotent: bool,
    faults: str,
    base_dir: Path,
) -> None:
    """Check what the cluster promises: no acknowledged message lost, exactly once, in order.

    Writers send unique values to a new topic for --seconds while a consumer group reads it; then every
    partition is read from the start and checked. Prints a summary (sent, acknowledged, lost, duplicated,
    unacknowledged-but-present, offset conflicts, what the group missed, and per partition how long it was
    unwritable) and exits 1 if anything acknowledged was lost, reordered, given two values at one offset,
    missed by the group, or (with idempotence) duplicated.
    """
    from talos._verify import run

    injector = None
    if faults == "local":
        from server.devservices import LocalFaults

        try:
            injector = LocalFaults(base_dir, say=lambda text: click.echo(text, err=True))
        except FileNotFoundError as exc:
            raise click.ClickException(str(exc)) from exc
    try:
        summary = run(
            url,
            seconds=seconds,
            partitions=partitions,
            writers=writers,
            consumers=consumers,
            idempotent=idempotent,
            topic=topic,
            faults=injector,
            say=lambda text: click.echo(text, err=True),
        )
    except TalosError as exc:
        fail(exc)
    ok = summary.ok(exactly_once=idempotent)
    if as_json:
        click.echo(json.dumps({**summary.as_json(), "ok": ok}))
    else:
        click.echo(summary.render())
        click.echo("OK" if ok else "FAILED")
    if not ok:
        sys.exit(1)
