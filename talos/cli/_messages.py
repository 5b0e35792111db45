"""``talos produce`` and ``talos consume``: lines of a file or stdin into a topic, a topic's messages out.

May import: click, the public SDK and ``talos.cli``'s shared modules.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, BinaryIO

import click

from talos import Consumer, Message, Producer, TalosError
from talos.cli._common import COMPRESSION, URL, fail

__all__ = ["consume", "produce"]


@click.command()
@URL
@click.argument("topic")
@click.option("--file", "source", type=click.File("rb"), default="-", help="Read lines from this file [stdin].")
@click.option("--key-sep", default=None, help="Split each line at the first SEP into key and value.")
@click.option("--partition", type=int, default=None, help="Send everything to this partition.")
@click.option("--acks", type=click.Choice(["durable", "accepted"]), default="durable", show_default=True)
@click.option("--idempotent", is_flag=True, help="Exactly once: resends are recognised and stored once.")
@click.option(
    "--producer-id",
    type=click.IntRange(0),
    default=None,
    help="Continue as this idempotent producer (a new epoch: an older instance with this id is fenced).",
)
@COMPRESSION
def produce(
    url: str,
    topic: str,
    source: BinaryIO,
    key_sep: str | None,
    partition: int | None,
    acks: str,
    idempotent: bool,
    producer_id: int | None,
    compression: str,
) -> None:
    """Send each line of stdin (or --file) as one message to TOPIC."""
    size = _file_size(source)
    sent = 0
    futures = []
    separator = key_sep.encode() if key_sep else None
    try:
        with (
            Producer(
                url, acks=acks, idempotent=idempotent, producer_id=producer_id, compression=compression
            ) as producer,
            click.progressbar(
                length=size or 0, label=f"producing to {topic}", file=sys.stderr, hidden=not size
            ) as progress,
        ):
            for line in source:
                progress.update(len(line))
                value = line.rstrip(b"\r\n")
                key = None
                if separator is not None and separator in value:
                    key, value = value.split(separator, 1)
                futures.append(producer.send(topic, value, key=key, partition=partition))
                sent += 1
                if len(futures) >= 10_000:  # keep memory bounded; surface failures early
                    for future in futures:
                        if future.done():
                            future.result()
                    futures = [f for f in futures if not f.done()]
            producer.flush()
            for future in futures:
                future.result()
    except TalosError as exc:
        fail(exc)
    click.echo(f"produced {sent} message(s) to {topic}", err=True)


def _file_size(source: BinaryIO) -> int | None:
    try:
        return (
            os.fstat(source.fileno()).st_size
            if source is not sys.stdin.buffer and os.path.isfile(source.name)
            else None
        )
    except (OSError, AttributeError, ValueError):
        return None


@click.command()
@URL
@click.argument("topic")
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset (default: only new messages).")
@click.option("--partition", type=int, default=None, help="Only this partition.")
@click.option("--offset", type=click.IntRange(0), default=None, help="Start here (needs --partition).")
@click.option("--max", "max_messages", type=click.IntRange(1), default=None, help="Stop after this many messages.")
@click.option("--follow", is_flag=True, help="Keep waiting for new messages (default: stop when caught up).")
@click.option("--print-key", is_flag=True, help="Print KEY<tab>VALUE.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per message, with offsets and headers.")
@click.option(
    "--group",
    default=None,
    help="Consume as a member of this consumer group: partitions shared with its other members, "
    "starting at the group's committed offsets, committing what was printed.",
)
def consume(
    url: str,
    topic: str,
    from_beginning: bool,
    partition: int | None,
    offset: int | None,
    max_messages: int | None,
    follow: bool,
    print_key: bool,
    as_json: bool,
    group: str | None,
) -> None:
    """Print messages of TOPIC, one per line."""
    if offset is not None and partition is None:
        raise click.UsageError("--offset needs --partition")
    if group is not None and (partition is not None or offset is not None):
        raise click.UsageError("--group takes the partitions the group assigns: no --partition or --offset")
    start = "earliest" if from_beginning or offset is not None else "latest"
    seen = 0
    try:
        selection: dict[str, Any] = (
            {"partitions": [(topic, partition)]} if partition is not None else {"topics": [topic]}
        )
        if group is not None:
            selection["group"] = group
        with Consumer(url, start=start, **selection) as consumer:
            if offset is not None:
                assert partition is not None
                consumer.seek(topic, partition, offset)
            while max_messages is None or seen < max_messages:
                batch = consumer.poll(1.0, max_messages=(max_messages - seen) if max_messages else 500)
                if not batch and not follow:
                    break
                for message in batch:
                    click.echo(_render(message, print_key, as_json))
                    seen += 1
    except TalosError as exc:
        fail(exc)
    except KeyboardInterrupt:
        pass
    click.echo(f"consumed {seen} message(s)", err=True)


def _render(message: Message, print_key: bool, as_json: bool) -> str:
    def text(data: bytes | None) -> str | None:
        return None if data is None else data.decode(errors="backslashreplace")

    if as_json:
        return json.dumps(
            {
                "topic": message.topic,
                "partition": message.partition,
                "offset": message.offset,
                "timestamp": message.timestamp,
                "key": text(message.key),
                "value": text(message.value),
                "headers": {k: text(v) for k, v in message.headers},
            }
        )
    value = text(message.value) or ""
    return f"{text(message.key) or ''}\t{value}" if print_key else value
