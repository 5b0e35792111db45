"""``talos verify``: write to a cluster for a while (optionally under faults) and check nothing acknowledged is lost.

May import: click, the public SDK, ``talos._verify``, ``talos._verify_transactions`` and ``server.devservices``
(inside the command, for ``--faults local``), and ``talos.cli``'s shared modules.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from talos import TalosError
from talos.cli._common import CLUSTER_DIR, URL, fail

if TYPE_CHECKING:
    from talos._verify_transactions import TransactionSummary

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
@click.option(
    "--transactions",
    is_flag=True,
    help="Also check transactions, on their own topic <topic>-txn, for the same time and under the same faults: "
    "transactional writers commit or abort (1 in 5) transactions of 1-5 values over 1-3 partitions while "
    "read-committed readers read; reports aborted reads, lost committed writes, torn transactions, duplicates, "
    "offsets with two values and reads past the last stable offset, and exits 1 on any.",
)
@click.option(
    "--transaction-writers",
    type=click.IntRange(1, 64),
    default=3,
    show_default=True,
    help="Transactional producers at once (with --transactions), each with its own transactional id.",
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
    transactions: bool,
    transaction_writers: int,
    base_dir: Path,
) -> None:
    """Check what the cluster promises: no acknowledged message lost, exactly once, in order.

    Writers send unique values to a new topic for --seconds while a consumer group reads it; then every
    partition is read from the start and checked. Prints a summary (sent, acknowledged, lost, duplicated,
    unacknowledged-but-present, offset conflicts, what the group missed, and per partition how long it was
    unwritable) and exits 1 if anything acknowledged was lost, reordered, given two values at one offset,
    missed by the group, or (with idempotence) duplicated.

    With --transactions, transactional writers work meanwhile on a topic of their own (<topic>-txn), and
    read-committed readers read it; afterwards it is read in full at both isolations. The report adds:
    aborted reads (an aborted transaction's value seen read-committed), lost committed writes, torn
    transactions (part of one visible without the rest, indefinite ones too: a commit that failed must
    still be all or nothing), duplicates, offset conflicts (an offset seen with two values), and reads past
    the last stable offset (a transaction seen before its commit was asked for, or one never committed); any
    of them exits 1.
    """
    from talos._verify import run

    injector = None
    if faults == "local":
        from server.devservices import LocalFaults

        try:
            injector = LocalFaults(base_dir, say=lambda text: click.echo(text, err=True))
        except FileNotFoundError as exc:
            raise click.ClickException(str(exc)) from exc

    def say(text: str) -> None:
        click.echo(text, err=True)

    topic = topic or f"verify-{int(time.time() * 1000)}"
    checker = _TransactionCheck(url, seconds, f"{topic}-txn", partitions, transaction_writers, say)
    if transactions:
        checker.start()
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
            say=say,
        )
        txn = checker.result() if transactions else None
    except TalosError as exc:
        fail(exc)
    ok = summary.ok(exactly_once=idempotent) and (txn is None or txn.ok())
    if as_json:
        extra: dict[str, Any] = {} if txn is None else {"transactions": txn.as_json()}
        click.echo(json.dumps({**summary.as_json(), **extra, "ok": ok}))
    else:
        click.echo(summary.render())
        if txn is not None:
            click.echo(f"-- transactions ({checker.topic})")
            click.echo(txn.render())
        click.echo("OK" if ok else "FAILED")
    if not ok:
        sys.exit(1)


class _TransactionCheck:
    """``talos._verify_transactions.run`` in a thread beside the plain checker (and its faults)."""

    def __init__(
        self, url: str, seconds: float, topic: str, partitions: int, writers: int, say: Callable[[str], None]
    ) -> None:
        self.url, self.seconds, self.topic, self.partitions, self.writers = url, seconds, topic, partitions, writers
        self.say = say
        self._summary: TransactionSummary | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="verify-transactions", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        from talos._verify_transactions import run

        try:
            self._summary = run(
                self.url,
                seconds=self.seconds,
                topic=self.topic,
                partitions=self.partitions,
                writers=self.writers,
                say=self.say,
            )
        except BaseException as exc:
            self._error = exc

    def result(self) -> TransactionSummary:
        """The summary, once the transaction checker is done; its error (a TalosError) raised here."""
        self._thread.join()
        if self._error is not None:
            if isinstance(self._error, TalosError):
                raise self._error
            raise TalosError(f"the transaction checker failed: {self._error!r}") from self._error
        assert self._summary is not None
        return self._summary
