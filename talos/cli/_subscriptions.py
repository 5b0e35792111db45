"""``talos subscribe`` (a push subscription's messages, each acknowledged once printed) and ``talos
subscriptions`` (make, list, describe, delete).

May import: click, the public SDK and ``talos.cli``'s shared modules.
"""

from __future__ import annotations

import base64
import json
import sys

import click

from talos import Subscriber, TalosError
from talos.cli._common import URL, YES, admin_call, fail
from talos.cli._output import echo_json

__all__ = ["subscribe", "subscriptions"]

_START = click.Choice(["earliest", "latest"])


def _text(data: bytes | None) -> str:
    if data is None:
        return ""
    try:
        return data.decode()
    except UnicodeDecodeError:
        return base64.b64encode(data).decode()


@click.command()
@URL
@click.argument("subscription")
@click.option("--topic", default=None, help="Make the subscription of this topic if it does not exist.")
@click.option("--ack-timeout", type=click.FloatRange(0.1), default=None, help="Seconds (new subscription) [30].")
@click.option("--max-deliveries", type=click.IntRange(0), default=None, help="Then dead-lettered; 0: never [5].")
@click.option("--key-ordered", is_flag=True, default=None, help="A key's next message waits for the earlier one.")
@click.option("--start", type=_START, default=None, help="Where a new subscription starts [latest].")
@click.option("--window", type=click.IntRange(1, 10_000), default=100, show_default=True, help="Unsettled at most.")
@click.option("--max", "max_messages", type=click.IntRange(1), default=None, help="Stop after this many messages.")
@click.option("--timeout", type=click.FloatRange(0), default=None, help="Stop after this long without a message.")
@click.option("--nack", is_flag=True, help="Give every message back instead of acknowledging it (to look at them).")
@click.option("--print-key", is_flag=True, help="Print KEY<TAB>VALUE.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per message, with its delivery count.")
def subscribe(
    url: str,
    subscription: str,
    topic: str | None,
    ack_timeout: float | None,
    max_deliveries: int | None,
    key_ordered: bool | None,
    start: str | None,
    window: int,
    max_messages: int | None,
    timeout: float | None,
    nack: bool,
    print_key: bool,
    as_json: bool,
) -> None:
    """Print the messages a push SUBSCRIPTION delivers, acknowledging each once it is printed.

    Subscribers of one subscription share its messages one by one; run this several times to share the
    work. Ctrl-C stops (what was printed is acknowledged first)."""
    received = 0
    try:
        with Subscriber(
            url,
            subscription,
            topic=topic,
            window=window,
            ack_timeout=ack_timeout,
            max_deliveries=max_deliveries,
            key_ordered=key_ordered,
            start=start,
        ) as subscriber:
            while max_messages is None or received < max_messages:
                message = subscriber.receive(timeout=timeout)
                if message is None:
                    break
                if as_json:
                    doc = {
                        "topic": message.topic,
                        "partition": message.partition,
                        "offset": message.offset,
                        "timestamp": message.timestamp,
                        "delivery": message.delivery,
                        "key": _text(message.key),
                        "value": _text(message.value),
                        "headers": {k: _text(v) for k, v in message.headers},
                    }
                    click.echo(json.dumps(doc))
                elif print_key:
                    click.echo(f"{_text(message.key)}\t{_text(message.value)}")
                else:
                    click.echo(_text(message.value))
                sys.stdout.flush()
                if nack:
                    message.nack()
                else:
                    message.ack()
                received += 1
    except KeyboardInterrupt:
        pass
    except TalosError as exc:
        fail(exc)
    click.echo(f"{received} messages", err=True)


@click.group()
def subscriptions() -> None:
    """Push subscriptions: a topic's messages pushed to subscribers, each acknowledged on its own."""


@subscriptions.command("create")
@URL
@click.argument("name")
@click.argument("topic")
@click.option("--ack-timeout", type=click.FloatRange(0.1), default=30.0, show_default=True, help="Seconds.")
@click.option("--max-deliveries", type=click.IntRange(0), default=5, show_default=True, help="0: never dead-letter.")
@click.option("--key-ordered", is_flag=True, help="A key's next message waits until the earlier one is settled.")
@click.option("--max-in-flight", type=click.IntRange(1), default=1000, show_default=True, help="Per partition.")
@click.option("--start", type=_START, default="latest", show_default=True)
def create(
    url: str,
    name: str,
    topic: str,
    ack_timeout: float,
    max_deliveries: int,
    key_ordered: bool,
    max_in_flight: int,
    start: str,
) -> None:
    """Make subscription NAME of TOPIC."""
    made = admin_call(
        url,
        lambda admin: admin.create_subscription(
            name,
            topic,
            ack_timeout_ms=int(ack_timeout * 1000),
            max_deliveries=max_deliveries,
            key_ordered=key_ordered,
            max_in_flight=max_in_flight,
            start=start,
        ),
    )
    click.echo(f"made subscription {made['name']} of {made['topic']} (dead letters: {made['dead_letter_topic']})")


@subscriptions.command("list")
@URL
def list_(url: str) -> None:
    """The subscriptions you may use."""
    for name in admin_call(url, lambda admin: admin.list_subscriptions()):
        click.echo(name)


@subscriptions.command("describe")
@URL
@click.argument("name")
def describe(url: str, name: str) -> None:
    """Settings, subscribers, and per partition what is settled and in flight (JSON)."""
    echo_json(admin_call(url, lambda admin: admin.describe_subscription(name)))


@subscriptions.command("delete")
@URL
@click.argument("name")
@YES
def delete(url: str, name: str, yes: bool) -> None:
    """Delete subscription NAME with its state and dead letters."""
    if not yes:
        click.confirm(f"delete subscription {name} and its dead letters?", abort=True)
    admin_call(url, lambda admin: admin.delete_subscription(name))
    click.echo(f"deleted subscription {name}")
