"""``talos connect run|validate|status``: the connectors of a YAML file (HDFS and Elasticsearch sinks and sources);
``talos connect submit|list|describe|pause|resume|restart|delete``: the connectors the cluster runs.

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
from talos.cli._common import URL, YES, admin_call, fail
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

    `talos connect run` runs the file's connectors here; `talos connect submit` hands them to the cluster, whose
    servers run their tasks (see `list`, `describe`, `pause`, `resume`, `restart`, `delete`; the same as the REST
    API /connectors, shaped like Kafka Connect's).

    Needs the connect extra for run, validate, status and submit: pip install 'talos-mq[connect]'.
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


# ---------------------------------------------------------------- connectors the cluster runs


def flat_config(connector: Any) -> dict[str, object]:
    """A file's connector as the cluster's API takes it (Kafka Connect's flat shape)."""
    out: dict[str, object] = {"connector.class": connector.type, "tasks.max": str(connector.tasks)}
    if connector.is_sink:
        out["topics"] = ",".join(connector.topics)
    else:
        out["topic"] = connector.topic
    return {**out, **connector.config}


@connect.command("submit")
@click.argument("config_file", metavar="CONFIG.yaml", type=click.Path(dir_okay=False))
@URL
def connect_submit(config_file: str, url: str) -> None:
    """Hand CONFIG.yaml's connectors to the cluster: each is made, or given its new configuration (its tasks then
    restart), and runs on the servers until deleted. The file is checked first, as `validate` does."""
    require("connect submit", "connect")
    config = _connect_config(config_file)
    for connector in config.connectors:

        def put(admin: Any, connector: Any = connector) -> dict[str, Any]:
            return dict(admin.put_connector(connector.name, flat_config(connector)))

        info = admin_call(url, put)
        click.echo(f"{info['name']}: {info['type']}, {len(info['tasks'])} task(s) submitted")


@connect.command("list")
@URL
@click.option("--json", "as_json", is_flag=True, help="As JSON (each connector's status).")
def connect_list(url: str, as_json: bool) -> None:
    """The connectors the cluster runs that you see, with their state and tasks running."""

    def statuses(admin: Any) -> list[dict[str, Any]]:
        return [admin.connector_status(name) for name in admin.list_connectors()]

    found = admin_call(url, statuses)
    if as_json:
        echo_json(found)
        return
    if not found:
        click.echo("no connectors")
    for status in found:
        running = sum(1 for task in status["tasks"] if task["state"] == "RUNNING")
        line = f"{status['name']:<30} {status['type']:<7} {status['connector']['state']:<10}"
        click.echo(f"{line} {running}/{len(status['tasks'])} task(s) running")


@connect.command("describe")
@click.argument("name")
@URL
@click.option("--json", "as_json", is_flag=True, help="As JSON: the configuration and the status.")
def connect_describe(name: str, url: str, as_json: bool) -> None:
    """A connector the cluster runs: its configuration, and each task's state and server."""
    info = admin_call(url, lambda admin: admin.describe_connector(name))
    status = admin_call(url, lambda admin: admin.connector_status(name))
    if as_json:
        echo_json({"info": info, "status": status})
        return
    click.echo(f"{name}: {info['type']} ({info['config'].get('connector.class')}), {status['connector']['state']}")
    for task in status["tasks"]:
        line = f"  task {task['id']}: {task['state']:<10} on {task.get('worker_id') or '-'}"
        extras = [f"{key}={task[key]}" for key in ("records", "restarts") if key in task]
        click.echo("  ".join([line, *extras]) + (f"  error: {task['trace']}" if task.get("trace") else ""))
    for key, value in sorted(info["config"].items()):
        shown = "********" if "password" in key.lower() else value
        click.echo(f"  {key} = {shown}")


@connect.command("pause")
@click.argument("name")
@URL
def connect_pause(name: str, url: str) -> None:
    """Stop a connector's tasks until `resume` (sinks first write and commit what they hold)."""
    admin_call(url, lambda admin: admin.pause_connector(name))
    click.echo(f"{name}: paused")


@connect.command("resume")
@click.argument("name")
@URL
def connect_resume(name: str, url: str) -> None:
    """Start a paused connector's tasks again."""
    admin_call(url, lambda admin: admin.resume_connector(name))
    click.echo(f"{name}: resumed")


@connect.command("restart")
@click.argument("name")
@URL
@click.option("--task", "task", type=click.IntRange(min=0), default=None, help="Only this task.")
def connect_restart(name: str, url: str, task: int | None) -> None:
    """Start a connector's tasks (or one) again, where each runs."""
    admin_call(url, lambda admin: admin.restart_connector(name, task=task))
    click.echo(f"{name}: restart requested" + ("" if task is None else f" (task {task})"))


@connect.command("delete")
@click.argument("name")
@URL
@YES
def connect_delete(name: str, url: str, yes: bool) -> None:
    """Stop a connector's tasks and forget it (its offsets stay: made again, it resumes)."""
    if not yes:
        click.confirm(f"Delete connector {name}?", abort=True)
    admin_call(url, lambda admin: admin.delete_connector(name))
    click.echo(f"{name}: deleted")
