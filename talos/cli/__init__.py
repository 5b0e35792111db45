"""The ``talos`` command line: the root group ``main`` (the console script) and one module per command group.

The rooms: ``_topics`` (talos topics), ``_messages`` (produce, consume), ``_groups`` (consumer groups),
``_subscriptions`` (subscribe, push subscriptions), ``_transactions`` (transactional ids),
``_servers`` (standalone, server, cluster up/down, dev services), ``_security`` (tenants, tokens, acl, quotas),
``_connect``, ``_metering``, ``_verify``, ``_bench`` and ``_trace`` (message trace). ``_common`` (the shared
options, one Admin call, SDK errors as CLI errors), ``_output`` (tables and JSON) and ``_extras`` (which commands
need which extra of the install, and the one line saying how to get it) serve them all.

May import: click, the public SDK and the SDK's own modules. ``server`` (and its ``server.devservices``),
``connectors`` and ``metering`` are imported only inside the command functions that need them, after ``_extras``
found their packages, so ``import talos.cli`` loads none of them and a client-only install runs every other
command (tests/unit/test_cli_imports.py and tests/e2e/test_client_install.py check).
"""

from __future__ import annotations

import os

import click

from talos import __version__
from talos.cli._bench import bench
from talos.cli._connect import connect
from talos.cli._groups import groups
from talos.cli._messages import consume, produce
from talos.cli._metering import metering
from talos.cli._security import acl, quotas, tenants, tokens
from talos.cli._servers import cluster, dev, server, standalone
from talos.cli._subscriptions import subscribe, subscriptions
from talos.cli._topics import topics
from talos.cli._trace import trace
from talos.cli._transactions import transactions
from talos.cli._verify import verify

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="talos")
@click.option(
    "--token",
    default=None,
    help="Bearer token for servers with auth on [env TALOS_TOKEN; better than a flag, which ps shows].",
)
@click.option(
    "--ca-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="CA bundle (PEM) that signs the servers' certificates, for https:// URLs [env TALOS_CA_FILE; default: "
    "the system's CAs].",
)
@click.option(
    "--cert",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Client certificate (PEM) for servers that ask for one (mTLS) [env TALOS_CERT_FILE].",
)
@click.option(
    "--key",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Its private key (PEM) [env TALOS_KEY_FILE; default: in the --cert file].",
)
def main(token: str | None, ca_file: str | None, cert: str | None, key: str | None) -> None:
    """Talos: a message queue with compute separated from storage.

    Stateless servers place topic partitions on a traffic-weighted consistent-hash ring and keep the
    data on HDFS (or a local disk for one node). Run `talos COMMAND --help` for each command.
    """
    # Every client the commands make sends the token and uses the TLS files (talos._tls reads the environment).
    given = {"TALOS_TOKEN": token, "TALOS_CA_FILE": ca_file, "TALOS_CERT_FILE": cert, "TALOS_KEY_FILE": key}
    os.environ.update({name: value for name, value in given.items() if value})


# `talos --help` lists the commands sorted by name, so the order here is only the order of the rooms above.
for _command in (
    topics,
    produce,
    consume,
    subscribe,
    subscriptions,
    groups,
    transactions,
    standalone,
    server,
    cluster,
    dev,
    tenants,
    tokens,
    acl,
    quotas,
    connect,
    metering,
    verify,
    bench,
    trace,
):
    main.add_command(_command)
