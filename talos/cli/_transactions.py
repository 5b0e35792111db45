"""``talos transactions``: list transactional ids and describe one (state, producer, open transaction).

May import: click, the public SDK and ``talos.cli``'s shared modules.
"""

from __future__ import annotations

import time

import click

from talos.cli._common import URL, admin_call
from talos.cli._output import Column, echo_json, echo_table

__all__ = ["transactions"]

_COLUMNS = (
    Column("transactional_id", "TRANSACTIONAL ID", 32),
    Column("state", "STATE", 15),
    Column("producer_id", "PRODUCER", 20, ">"),
    Column("producer_epoch", "EPOCH", 6, ">"),
    Column("open_s", "OPEN FOR", 9, ">"),
    Column("partitions", "PARTITIONS", gap="  "),
)


def _row(transaction: dict[str, object], now_ms: int) -> dict[str, object]:
    start = transaction.get("start_ms")
    partitions = transaction.get("partitions") or []
    assert isinstance(partitions, list)
    return {
        **transaction,
        "open_s": f"{(now_ms - start) / 1000:.1f}s" if isinstance(start, int) and start >= 0 else "-",
        "partitions": ", ".join(f"{p['topic']}/{p['partition']}" for p in partitions) or "-",
    }


@click.group()
def transactions() -> None:
    """List transactional ids and describe one: its state, producer id and epoch, open transaction.

    A transactional producer (the SDK's Producer(transactional_id=...), a Kafka client's transactional.id)
    writes to several partitions, and commits consumed offsets, all or nothing. A transaction stuck open
    holds back read-committed readers of its partitions until it is aborted (by its timeout at the latest):
    `talos transactions list` shows for how long each has been open.
    """


@transactions.command("list")
@URL
@click.option("--json", "as_json", is_flag=True, help="The list as JSON.")
def transactions_list(url: str, as_json: bool) -> None:
    """List transactional ids (yours; the admin: everyone's) and their state."""
    listed = admin_call(url, lambda admin: admin.list_transactions())
    if as_json:
        echo_json(listed)
        return
    now = int(time.time() * 1000)
    echo_table(_COLUMNS, [_row(t, now) for t in listed], lambda value: "-" if value is None else str(value))


@transactions.command("describe")
@URL
@click.argument("transactional_id")
@click.option("--json", "as_json", is_flag=True, help="The description as JSON.")
def transactions_describe(url: str, transactional_id: str, as_json: bool) -> None:
    """Show TRANSACTIONAL_ID: state, producer id and epoch, timeout, and its open transaction's partitions."""
    described = admin_call(url, lambda admin: admin.describe_transaction(transactional_id))
    if as_json:
        echo_json(described)
        return
    row = _row(described, int(time.time() * 1000))
    click.echo(
        f"transactional id {described['transactional_id']}  state {described['state']}  "
        f"producer {described['producer_id']} epoch {described['producer_epoch']}  "
        f"timeout {described['timeout_ms']} ms  open for {row['open_s']}"
    )
    click.echo(f"  partitions {row['partitions']}")
