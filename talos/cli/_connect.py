"""``talos connect run|validate|status``: the connectors of a YAML file (HDFS and Elasticsearch sinks and sources).

May import: click, the public SDK, ``connectors`` (inside the commands only, once ``_extras`` found the connect
extra) and ``talos.cli``'s shared modules.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import click

from talos import DEFAULT_URL, TalosError
from talos.cli._common import fail
from talos.cli._extras import require
from talos.cli._output import echo_json

__all__ = ["connect"]


@click.group()
def connect() -> None:
    """Connectors: carry topics to HDFS and Elasticsearch, and files and indices into topics.

    A YAML file lists the connectors (see docs/connectors.md):

    \b
      connectors:
        - name: orders-to-hdfs
          type: hdfs-sink            # hdfs-sink | hdfs-source | elasticsearch-sink | elasticsearch-source
          topics: [orders]           # sources write one `topic:` instead
          tasks: 2
          config: {namenode: "http://127.0.0.1:9870", path: /warehouse, format: parquet}

    Needs the connect extra: pip install 'talos-mq[connect]'.
    """


def _connect_config(path: str) -> Any:
    from connectors.config import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def _connect_url(url: str | None, config: Any) -> str:
    return url or config.url or os.environ.get("TALOS_URL") or DEFAULT_URL


CONNECT_URL = click.option(
    "--url", default=None, help="Talos server URL [default: the file's `url`, env TALOS_URL, then " + DEFAULT_URL + "]."
)


@connect.command("run")
@click.argument("config_file", metavar="CONFIG.yaml", type=click.Path(dir_okay=False))
@CONNECT_URL
@click.option("--status-port", type=click.IntRange(0, 65535), default=None, help="Serve GET /status (JSON) here.")
@click.option(
    "--status-host",
    default="127.0.0.1",
    show_default=True,
    help="Address of the status server (0.0.0.0 for Kubernetes probes).",
)
@click.option("--status-file", default=None, help="Write the status (JSON) to this file every second.")
@click.option(
    "--task",
    "tasks",
    multiple=True,
    metavar="NAME/INDEX",
    help="Run only this task of the file's connectors (repeatable) [default: every task].",
)
@click.option(
    "--die-with-parent",
    type=int,
    default=None,
    metavar="PID",
    help="Exit at once when process PID (the server that started this runner) is gone.",
)
@click.option("--log-level", default="info", show_default=True, type=click.Choice(["debug", "info", "warning"]))
def connect_run(
    config_file: str,
    url: str | None,
    status_port: int | None,
    status_host: str,
    status_file: str | None,
    tasks: tuple[str, ...],
    die_with_parent: int | None,
    log_level: str,
) -> None:
    """Run the connectors of CONFIG.yaml until SIGTERM or Ctrl-C.

    Prints a status line per task every `status_interval_s` (10 s). Sinks commit their offsets in their
    consumer group (connect-<name>); sources checkpoint in the internal topic __connect_offsets, so a
    restarted runner resumes where it stopped. A failing task is restarted with backoff. The servers run
    the connectors made through their REST API (/connectors) this way, one task per runner.
    """
    require("connect run", "connect")
    import logging

    from connectors.runner import Runner

    if die_with_parent is not None:
        _die_with(die_with_parent)
    config = _connect_config(config_file)
    only = {_task(spec) for spec in tasks} or None
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    for noisy in ("urllib3", "opensearch", "hdfs"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    runner = Runner(
        config,
        url=_connect_url(url, config),
        status_port=status_port,
        status_host=status_host,
        status_file=status_file,
        only=only,
        out=sys.stderr,
    )

    def stop(*_: object) -> None:
        runner.stop.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        sys.exit(runner.run())
    except OSError as exc:  # the status port
        raise click.ClickException(f"cannot serve the status on port {status_port}: {exc.strerror or exc}") from None


def _task(spec: str) -> tuple[str, int]:
    name, _, index = spec.rpartition("/")
    if not name or not index.isdigit():
        raise click.BadParameter(f"expected NAME/INDEX, not {spec!r}", param_hint="--task")
    return name, int(index)


def _die_with(parent: int) -> None:
    """SIGKILL this process when its parent ends, as a crash of the server would end it (Linux), and exit now if
    the parent is already gone."""
    import ctypes

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        raise SystemExit(f"talos connect: the parent process {parent} is gone")


@connect.command("validate")
@click.argument("config_file", metavar="CONFIG.yaml", type=click.Path(dir_okay=False))
def connect_validate(config_file: str) -> None:
    """Check CONFIG.yaml without running it: exit 1 and list every problem, or summarise it."""
    require("connect validate", "connect")
    config = _connect_config(config_file)
    for connector in config.connectors:
        where = ", ".join(connector.topics or []) if connector.is_sink else connector.topic
        arrow = "<-" if connector.is_sink else "->"
        click.echo(f"{connector.name}: {connector.type}, {connector.tasks} task(s), {arrow} {where}")
    click.echo(f"{config_file}: valid")


@connect.command("status")
@click.argument("config_file", metavar="CONFIG.yaml", type=click.Path(dir_okay=False))
@CONNECT_URL
@click.option("--json", "as_json", is_flag=True, help="As JSON.")
def connect_status(config_file: str, url: str | None, as_json: bool) -> None:
    """What Talos holds for each connector, whether a runner is up or not: a sink's group members and lag
    per partition, a source's checkpoint per task."""
    require("connect status", "connect")
    from connectors.status import connector_status

    config = _connect_config(config_file)
    target = _connect_url(url, config)
    try:
        report = [connector_status(target, connector) for connector in config.connectors]
    except (TalosError, TimeoutError) as exc:
        fail(exc)
    if as_json:
        echo_json(report)
        return
    for entry in report:
        click.echo(f"{entry['name']} ({entry['type']}): {entry['summary']}")
        for line in entry["lines"]:
            click.echo(f"  {line}")
