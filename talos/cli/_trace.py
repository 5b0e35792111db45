"""``talos trace``: what happened to a message of a traced topic, or to the messages of a key; and the topic's
trace setting.

May import: click, the public SDK and ``talos.cli``'s shared modules.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Any

import click

from talos.cli._common import URL, admin_call
from talos.cli._output import echo_json

__all__ = ["format_timeline", "parse_since", "trace"]

_DURATION = re.compile(r"([0-9]+)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_CORE = ("event", "ts")


def parse_since(text: str, now_ms: int) -> int:
    """``1h``, ``30m``, ``2d``, ``45s`` ago, or ms since the epoch, as ms since the epoch."""
    if text.isdigit():
        return int(text)
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise click.BadParameter(f"{text!r}: expected a duration (30s, 15m, 1h, 2d) or ms since the epoch")
    return now_ms - int(match[1]) * _UNIT_S[match[2]] * 1000


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def format_timeline(timeline: dict[str, Any]) -> list[str]:
    """The lines ``talos trace`` prints for one message: a heading, then one line per event."""
    head = f"{timeline['topic']}/{timeline['partition']}@{timeline['offset']}"
    if "key" in timeline:
        head += f"  key={timeline['key']}"
    if "traceparent" in timeline:
        head += f"  traceparent={timeline['traceparent']}"
    lines = [head]
    for event in timeline.get("events", []):
        details = "  ".join(f"{k}={v}" for k, v in event.items() if k not in _CORE)
        lines.append(f"  {_when(int(event['ts']))}  {event['event']:<13}  {details}".rstrip())
    if not timeline.get("events"):
        lines.append("  (no events)" if timeline.get("sampled", True) else "  (not sampled)")
    return lines


@click.command()
@URL
@click.argument("topic")
@click.argument("partition", type=int, required=False)
@click.argument("offset", type=int, required=False)
@click.option("--key", help="The messages of this key (with --since/--until) instead of one message.")
@click.option("--since", default="24h", show_default=True, help="With --key: from (30m, 1h, 2d ago, or ms).")
@click.option("--until", default=None, help="With --key: until (a duration ago or ms; default now).")
@click.option("--limit", default=100, show_default=True, help="With --key: at most this many messages.")
@click.option("--sample", type=click.IntRange(0, 1_000_000), help="Set TOPIC's trace: 0 off, 1 all, N one in N.")
@click.option("--json", "as_json", is_flag=True, help="The answer as JSON.")
def trace(
    url: str,
    topic: str,
    partition: int | None,
    offset: int | None,
    key: str | None,
    since: str,
    until: str | None,
    limit: int,
    sample: int | None,
    as_json: bool,
) -> None:
    """Show what happened to message TOPIC PARTITION OFFSET (produced, delivered, committed, retried,
    dead-lettered), or to the messages of --key; or set TOPIC's trace with --sample."""
    if sample is not None:
        info = admin_call(url, lambda admin: admin.alter_topic(topic, trace_sample=sample))
        click.echo(f"{topic}: trace_sample={info.trace_sample}")
        return
    if key is not None:
        now = int(time.time() * 1000)
        since_ms = parse_since(since, now)
        until_ms = parse_since(until, now) if until is not None else now
        found = admin_call(
            url, lambda admin: admin.trace_key(topic, key, since_ms=since_ms, until_ms=until_ms, limit=limit)
        )
        if as_json:
            echo_json(found)
            return
        if not found:
            click.echo(f"no traced message of key {key!r} in {topic} in that time")
        for timeline in found:
            click.echo("\n".join(format_timeline(timeline)))
        return
    if partition is None or offset is None:
        raise click.UsageError("give PARTITION and OFFSET, or --key, or --sample")
    timeline = admin_call(url, lambda admin: admin.trace(topic, partition, offset))
    if as_json:
        echo_json(timeline)
        return
    click.echo("\n".join(format_timeline(timeline)))
