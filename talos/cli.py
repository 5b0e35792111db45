"""The ``talos`` command line."""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

import click

from talos import DEFAULT_URL, Admin, ConflictError, Consumer, Message, Producer, TalosError, __version__
from talos._cli_security import acl, quotas, tenants, tokens

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="talos")
@click.option(
    "--token",
    default=None,
    help="Bearer token for servers with auth on [env TALOS_TOKEN; better than a flag, which ps shows].",
)
def main(token: str | None) -> None:
    """Talos: a message queue with compute separated from storage.

    Stateless servers place topic partitions on a traffic-weighted consistent-hash ring and keep the
    data on HDFS (or a local disk for one node). Run `talos COMMAND --help` for each command.
    """
    if token:
        os.environ["TALOS_TOKEN"] = token  # every client the commands make sends it


# Limits on client connections (server/connections.py), passed to `python -m server standalone` as given.
_CONNECTION_LIMITS: tuple[tuple[str, type, str], ...] = (
    ("--header-timeout", float, "Seconds a request head may take, else 408 [default: 10; env TALOS_HEADER_TIMEOUT_S]."),
    ("--body-idle-timeout", float, "Seconds a request body may send nothing, else 408 [default: 30]."),
    ("--body-timeout", float, "Seconds a request body may take in all, else 408 [default: 120]."),
    ("--keep-alive-timeout", float, "Seconds an idle keep-alive connection stays open [default: 20]."),
    ("--max-connections", int, "Open client connections; more get 503 and are closed [default: from the fd limit]."),
    ("--max-requests-per-connection", int, "Requests per keep-alive connection [default: 10000; 0: no cap]."),
    ("--max-header-bytes", int, "Largest request head, else 431 [default: 32768]."),
)


def _connection_limit_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for flag, kind, text in reversed(_CONNECTION_LIMITS):
        command = click.option(flag, type=kind, default=None, help=text)(command)
    return command


@main.command()
@click.option("--host", default=None, help="Address to listen on [default: 127.0.0.1; env TALOS_HOST].")
@click.option("--port", type=int, default=None, help="Port [default: 8080; env TALOS_PORT].")
@click.option("--data-dir", default=None, help="Local data directory [default: ./talos-data; env TALOS_STORAGE].")
@click.option(
    "--storage", default=None, help="Storage URL instead of --data-dir: file:///path or hdfs://host:port/path."
)
@click.option(
    "--config", "config_file", default=None, help="TOML configuration file ([server] table); env TALOS_CONFIG."
)
@click.option(
    "--group-commit",
    type=click.Choice(["on", "off"]),
    default=None,
    help="One flush for all queued requests of a partition (on), or one per request [default: on].",
)
@click.option("--log-format", type=click.Choice(["json", "text"]), default="json", show_default=True)
@click.option(
    "--auth",
    type=click.Choice(["auto", "on", "off"]),
    default=None,
    help="Require bearer tokens [default: off standalone]; the admin token comes from TALOS_ADMIN_TOKEN.",
)
@click.option(
    "--metrics-labels",
    type=click.Choice(["admin", "public"]),
    default=None,
    help="With auth on, who sees /metrics by tenant and topic: the admin token (others get totals) or anyone "
    "[default: admin; env TALOS_METRICS_LABELS].",
)
@_connection_limit_options
def standalone(
    host: str | None,
    port: int | None,
    data_dir: str | None,
    storage: str | None,
    config_file: str | None,
    group_commit: str | None,
    log_format: str,
    auth: str | None,
    metrics_labels: str | None,
    **limits: float | None,
) -> None:
    """Run one Talos node: local storage, no ZooKeeper, no Java.

    Serves the REST API v1 with OpenAPI docs at /docs, plus /healthz, /readyz and /metrics.
    Every setting can also come from the environment (TALOS_PORT, TALOS_GROUP_COMMIT=0, ...) or a TOML file.
    """
    argv = [sys.executable, "-m", "server", "standalone", "--log-format", log_format]
    for flag, value in (
        ("--host", host),
        ("--port", port),
        ("--data-dir", data_dir),
        ("--storage", storage),
        ("--config", config_file),
        ("--group-commit", group_commit),
        ("--auth", auth),
        ("--metrics-labels", metrics_labels),
        *((flag, limits[flag[2:].replace("-", "_")]) for flag, _, _ in _CONNECTION_LIMITS),
    ):
        if value is not None:
            argv += [flag, str(value)]
    # The SDK does not import the server: hand the process over to it.
    os.execv(sys.executable, argv)


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True}, add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def server(args: tuple[str, ...]) -> None:
    """Run a cluster member (ZooKeeper + shared storage); `talos server --help` lists its options.

    Example: talos server --zk 127.0.0.1:2181 --storage hdfs://127.0.0.1:9000/talos --port 8081
    """
    os.execv(sys.executable, [sys.executable, "-m", "server", "server", *args])


URL = click.option(
    "--url", envvar="TALOS_URL", default=DEFAULT_URL, show_default=True, help="Server URL (env TALOS_URL)."
)


def _fail(error: Exception) -> NoReturn:
    raise click.ClickException(str(error)) from error


@main.group()
def topics() -> None:
    """Create, list, describe and delete topics."""


@topics.command("create")
@URL
@click.argument("name")
@click.option("--partitions", type=click.IntRange(1, 4096), default=1, show_default=True)
@click.option("--retention-ms", type=click.IntRange(0), default=None, help="Delete data older than this.")
@click.option("--retention-bytes", type=click.IntRange(0), default=None, help="Keep at most this much per partition.")
def topics_create(url: str, name: str, partitions: int, retention_ms: int | None, retention_bytes: int | None) -> None:
    """Create topic NAME."""
    try:
        with Admin(url) as admin:
            topic = admin.create_topic(
                name, partitions=partitions, retention_ms=retention_ms, retention_bytes=retention_bytes
            )
    except TalosError as exc:
        _fail(exc)
    click.echo(f"created {topic.name} with {topic.partitions} partition(s)")


@topics.command("list")
@URL
def topics_list(url: str) -> None:
    """List topics."""
    try:
        with Admin(url) as admin:
            found = admin.list_topics()
    except TalosError as exc:
        _fail(exc)
    for topic in found:
        click.echo(f"{topic.name}\tpartitions={topic.partitions}")


@topics.command("describe")
@URL
@click.argument("name")
def topics_describe(url: str, name: str) -> None:
    """Show topic NAME with each partition's earliest and latest offset."""
    try:
        with Admin(url) as admin:
            topic = admin.describe_topic(name)
    except TalosError as exc:
        _fail(exc)
    click.echo(
        f"{topic.name}: {topic.partitions} partition(s), retention_ms={topic.retention_ms}, "
        f"retention_bytes={topic.retention_bytes}, version={topic.version}"
    )
    for info in topic.partition_offsets:
        owner = f"\towner={info.owner}" if info.owner else ""
        click.echo(f"  partition {info.partition}\tearliest={info.earliest}\tlatest={info.latest}{owner}")


@topics.command("delete")
@URL
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask.")
def topics_delete(url: str, name: str, yes: bool) -> None:
    """Delete topic NAME and all its data."""
    if not yes and sys.stdin.isatty():
        click.confirm(f"delete {name} and all its data?", abort=True)
    try:
        with Admin(url) as admin:
            admin.delete_topic(name)
    except TalosError as exc:
        _fail(exc)
    click.echo(f"deleted {name}")


@main.command()
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
def produce(
    url: str,
    topic: str,
    source: BinaryIO,
    key_sep: str | None,
    partition: int | None,
    acks: str,
    idempotent: bool,
    producer_id: int | None,
) -> None:
    """Send each line of stdin (or --file) as one message to TOPIC."""
    size = _file_size(source)
    sent = 0
    futures = []
    separator = key_sep.encode() if key_sep else None
    try:
        with (
            Producer(url, acks=acks, idempotent=idempotent, producer_id=producer_id) as producer,
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
        _fail(exc)
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


@main.command()
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
        _fail(exc)
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


@main.group()
def groups() -> None:
    """List and describe consumer groups; move their committed offsets."""


@groups.command("list")
@URL
def groups_list(url: str) -> None:
    """List consumer groups."""
    try:
        with Admin(url) as admin:
            names = admin.list_groups()
    except TalosError as exc:
        _fail(exc)
    for name in names:
        click.echo(name)


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


@groups.command("describe")
@URL
@click.argument("group")
@click.option("--json", "as_json", is_flag=True, help="The full description as JSON.")
def groups_describe(url: str, group: str, as_json: bool) -> None:
    """Show GROUP: its members, and per partition the holder, committed offset, high watermark and lag."""
    try:
        with Admin(url) as admin:
            described = admin.describe_group(group)
    except TalosError as exc:
        _fail(exc)
    if as_json:
        click.echo(json.dumps(described, indent=2))
        return
    click.echo(
        f"group {described['group']}  mode {described['mode'] or '-'}  state {described['state']}  "
        f"generation {described['generation']}  coordinator {described['coordinator']}"
    )
    for member in described["members"]:
        held = ", ".join(f"{a['topic']}/{a['partition']}" for a in member["assignment"]) or "-"
        click.echo(f"  member {member['member_id']}  instance {member['instance']}  holds {held}")
    click.echo(f"{'TOPIC':<30} {'PARTITION':>9} {'COMMITTED':>10} {'HIGH':>10} {'LAG':>8}  MEMBER")
    for row in described["partitions"]:
        click.echo(
            f"{row['topic']:<30} {row['partition']:>9} {_cell(row['committed']):>10} "
            f"{_cell(row['high_watermark']):>10} {_cell(row['lag']):>8}  {_cell(row['member'])}"
        )


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
    try:
        with Admin(url) as admin:
            moved = admin.reset_offsets(
                group, topic, to=str(chosen[0]), partition=partition, offset=to_offset, timestamp=to_timestamp
            )
    except TalosError as exc:
        _fail(exc)
    for row in moved:
        click.echo(f"{row['topic']}/{row['partition']} -> {row['offset']}")


@main.group()
def bench() -> None:
    """Measure produce and consume throughput against a running server."""


@bench.command("produce")
@URL
@click.option("--topic", default="bench", show_default=True, help="Created if missing.")
@click.option("--partitions", default=1, show_default=True)
@click.option("--messages", default=200_000, show_default=True)
@click.option("--size", default=1024, show_default=True, help="Value bytes per message.")
@click.option("--linger-ms", default=5.0, show_default=True)
@click.option("--acks", type=click.Choice(["durable", "accepted"]), default="durable", show_default=True)
def bench_produce(url: str, topic: str, partitions: int, messages: int, size: int, linger_ms: float, acks: str) -> None:
    """Produce MESSAGES of SIZE bytes with the SDK; print msgs/s, MB/s and ack latency percentiles."""
    _ensure_topic(url, topic, partitions)
    payload = os.urandom(size)
    latencies: list[float] = []
    started = time.perf_counter()
    try:
        with Producer(url, linger_ms=linger_ms, acks=acks) as producer:
            for _ in range(messages):
                now = time.perf_counter()
                producer.send(topic, payload).add_done_callback(_latency_recorder(latencies, now))
            producer.flush()
    except TalosError as exc:
        _fail(exc)
    elapsed = time.perf_counter() - started
    _report("produce", messages, messages * size, elapsed, latencies)


@bench.command("consume")
@URL
@click.option("--topic", default="bench", show_default=True)
@click.option("--messages", default=200_000, show_default=True, help="Stop after this many.")
def bench_consume(url: str, topic: str, messages: int) -> None:
    """Consume from the beginning of TOPIC; print msgs/s and MB/s."""
    received = 0
    volume = 0
    started = time.perf_counter()
    try:
        with Consumer(url, topics=[topic], start="earliest", wait_ms=200) as consumer:
            while received < messages:
                batch = consumer.poll(2.0)
                if not batch:
                    break
                received += len(batch)
                volume += sum(len(m.value or b"") for m in batch)
    except TalosError as exc:
        _fail(exc)
    _report("consume", received, volume, time.perf_counter() - started, [])


def _latency_recorder(into: list[float], started: float) -> Callable[[object], None]:
    def record(_future: object) -> None:
        into.append(time.perf_counter() - started)

    return record


def _ensure_topic(url: str, topic: str, partitions: int) -> None:
    with Admin(url) as admin:
        try:
            admin.create_topic(topic, partitions=partitions)
        except ConflictError:
            pass
        except TalosError as exc:
            _fail(exc)


def _report(what: str, count: int, volume: int, elapsed: float, latencies: list[float]) -> None:
    click.echo(
        f"{what}: {count} messages in {elapsed:.2f}s = {count / elapsed:,.0f} msgs/s, "
        f"{volume / elapsed / 1e6:,.1f} MB/s"
    )
    if latencies:
        ordered = sorted(latencies)
        pick = [ordered[min(int(len(ordered) * q), len(ordered) - 1)] * 1000 for q in (0.5, 0.95, 0.99)]
        click.echo(f"ack latency: p50 {pick[0]:.1f} ms, p95 {pick[1]:.1f} ms, p99 {pick[2]:.1f} ms")


CLUSTER_DIR = click.option(
    "--dir",
    "base_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("talos-cluster"),
    show_default=True,
    help="Data, logs and cluster.json (what `down` stops).",
)


@main.command()
@URL
@click.option("--seconds", type=click.FloatRange(1), default=60, show_default=True, help="How long to write.")
@click.option("--partitions", type=click.IntRange(1, 4096), default=6, show_default=True)
@click.option("--writers", type=click.IntRange(1, 64), default=4, show_default=True, help="Producers at once.")
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
    url: str, seconds: float, partitions: int, writers: int, idempotent: bool, faults: str, base_dir: Path
) -> None:
    """Check what the cluster promises: no acknowledged message lost, exactly once, in order.

    Writers send unique values to a new topic for --seconds; then every partition is read from the
    start and checked. Prints a summary (sent, acknowledged, lost, duplicated, unacknowledged-but-present)
    and exits 1 if anything acknowledged was lost, reordered, or (with idempotence) duplicated.
    """
    from talos._verify import run

    injector = None
    if faults == "local":
        from talos._faults import LocalFaults

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
            idempotent=idempotent,
            faults=injector,
            say=lambda text: click.echo(text, err=True),
        )
    except TalosError as exc:
        _fail(exc)
    click.echo(summary.render())
    ok = summary.ok(exactly_once=idempotent)
    click.echo("OK" if ok else "FAILED")
    if not ok:
        sys.exit(1)


@main.group()
def cluster() -> None:
    """A local development cluster: ZooKeeper + HDFS + N servers, in the background."""


@cluster.command("up")
@click.option("--servers", type=click.IntRange(1, 16), default=3, show_default=True)
@click.option("--base-port", type=click.IntRange(1, 65535 - 16), default=8081, show_default=True)
@CLUSTER_DIR
@click.option("--zk-session-timeout", type=float, default=10.0, show_default=True, help="Seconds.")
@click.option("--reassign-delay", type=float, default=30.0, show_default=True, help="Seconds.")
@click.option("--join-delay", type=float, default=1.0, show_default=True, help="Seconds.")
@click.option("--storage", type=click.Choice(["hdfs", "file"]), default="hdfs", show_default=True)
def cluster_up(
    servers: int,
    base_port: int,
    base_dir: Path,
    zk_session_timeout: float,
    reassign_delay: float,
    join_delay: float,
    storage: str,
) -> None:
    """Start ZooKeeper, HDFS and N servers; return once all are ready, leaving them running.

    Prints one `server <id> <url> pid=<pid>` line per server, then the ZooKeeper and HDFS addresses.
    Running it again while the cluster is up prints the same lines and starts nothing.
    """
    from talos.devservices import ClusterSettings, LocalCluster, ServiceError, recorded_alive, recorded_cluster

    state = recorded_cluster(base_dir)
    if state is not None:
        if recorded_alive(state):
            servers_info = state.get("servers", [])
            assert isinstance(servers_info, list)
            for info in servers_info:
                click.echo(f"server {info['id']} {info['url']} pid={info['pid']}")
            zk_info, hdfs_info = state.get("zookeeper"), state.get("hdfs")
            if isinstance(zk_info, dict):
                click.echo(f"zookeeper {zk_info['address']}")
            if isinstance(hdfs_info, dict):
                click.echo(f"hdfs {hdfs_info['url']} webhdfs={hdfs_info['webhdfs']}")
            click.echo(f"storage {state.get('storage')}")
            click.echo(f"admin-token {base_dir.resolve() / 'admin-token'}")
            click.echo(f"already up (state in {base_dir / 'cluster.json'})", err=True)
            return
        from talos.devservices import stop_recorded_cluster

        stop_recorded_cluster(base_dir)  # leftovers of a cluster that died: clean them first
    settings = ClusterSettings(
        zk_session_timeout_s=zk_session_timeout, join_delay_s=join_delay, reassign_delay_s=reassign_delay
    )
    local = LocalCluster(base_dir, servers=servers, base_port=base_port, settings=settings, storage=storage)
    try:
        local.start(progress=True)
    except ServiceError as exc:
        raise click.ClickException(f"{exc} (logs in {base_dir})") from exc
    for line in local.describe():
        click.echo(line)
    click.echo(f"up; logs in {base_dir}; `talos cluster down --dir {base_dir}` stops it", err=True)
    click.echo(f"auth is on: export TALOS_TOKEN=$(cat {base_dir / 'admin-token'}) to act as the admin", err=True)


@cluster.command("down")
@CLUSTER_DIR
def cluster_down(base_dir: Path) -> None:
    """Stop the cluster `up` started in --dir (servers gracefully first); nothing to do is fine."""
    from talos.devservices import stop_recorded_cluster

    stopped = stop_recorded_cluster(base_dir)
    click.echo(f"stopped: {', '.join(stopped)}" if stopped else f"no cluster running in {base_dir}")


@main.group()
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
@click.option("--log-level", default="info", show_default=True, type=click.Choice(["debug", "info", "warning"]))
def connect_run(config_file: str, url: str | None, status_port: int | None, status_host: str, log_level: str) -> None:
    """Run the connectors of CONFIG.yaml until SIGTERM or Ctrl-C.

    Prints a status line per task every `status_interval_s` (10 s). Sinks commit their offsets in their
    consumer group (connect-<name>); sources checkpoint in the internal topic __connect_offsets, so a
    restarted runner resumes where it stopped. A failing task is restarted with backoff.
    """
    import logging

    from connectors.runner import Runner

    config = _connect_config(config_file)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    for noisy in ("urllib3", "opensearch", "hdfs"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    runner = Runner(
        config, url=_connect_url(url, config), status_port=status_port, status_host=status_host, out=sys.stderr
    )

    def stop(*_: object) -> None:
        runner.stop.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        sys.exit(runner.run())
    except OSError as exc:  # the status port
        raise click.ClickException(f"cannot serve the status on port {status_port}: {exc.strerror or exc}") from None


@connect.command("validate")
@click.argument("config_file", metavar="CONFIG.yaml", type=click.Path(dir_okay=False))
def connect_validate(config_file: str) -> None:
    """Check CONFIG.yaml without running it: exit 1 and list every problem, or summarise it."""
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
    from connectors.status import connector_status

    config = _connect_config(config_file)
    target = _connect_url(url, config)
    try:
        report = [connector_status(target, connector) for connector in config.connectors]
    except (TalosError, TimeoutError) as exc:
        _fail(exc)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    for entry in report:
        click.echo(f"{entry['name']} ({entry['type']}): {entry['summary']}")
        for line in entry["lines"]:
            click.echo(f"  {line}")


@main.group()
def metering() -> None:
    """Usage metering: the servers' __talos_metrics, summed per minute into DuckDB (default) or Druid.

    Needs the metering extra: pip install 'talos-mq[metering]' (PySpark; Java 17+ for Spark).
    """


def _store_options(function: Callable[..., Any]) -> Callable[..., Any]:
    function = click.option(
        "--store",
        "store_path",
        default=None,
        help="DuckDB file [default: talos-metering/usage.duckdb].",
    )(function)
    return click.option("--druid", default=None, help="Use Druid at this URL (router or broker) instead of DuckDB.")(
        function
    )


def _open_store(store_path: str | None, druid: str | None) -> Any:
    try:
        from metering import open_store
    except ImportError as exc:
        raise click.ClickException(f"metering needs: pip install 'talos-mq[metering]' ({exc})") from None
    return open_store(duckdb_path=store_path, druid_url=druid)


@metering.command("run")
@URL
@_store_options
@click.option("--checkpoint", default="talos-metering/checkpoint", show_default=True, help="Spark checkpoint dir.")
@click.option("--interval", type=click.FloatRange(0.1), default=10.0, show_default=True, help="Seconds per batch.")
@click.option("--once", is_flag=True, help="Count what is in __talos_metrics now, then stop.")
@click.option("--max-records", type=click.IntRange(1), default=None, help="At most this many records per batch.")
@click.option(
    "--master",
    envvar="TALOS_SPARK_MASTER",
    default="local[2]",
    show_default=True,
    help="Spark master; 'submit': the one spark-submit set (a SparkApplication's driver). Env TALOS_SPARK_MASTER.",
)
def metering_run(
    url: str,
    store_path: str | None,
    druid: str | None,
    checkpoint: str,
    interval: float,
    once: bool,
    max_records: int | None,
    master: str,
) -> None:
    """Run the metering job (Spark Structured Streaming over __talos_metrics) until Ctrl-C."""
    store = _open_store(store_path, druid)
    from metering.job import spark_session, start

    with Admin(url) as admin:
        while not any(t.name == "__talos_metrics" for t in admin.list_topics()):
            click.echo("waiting for the servers' first metrics (__talos_metrics)...", err=True)
            time.sleep(2)
    spark = spark_session(None if master == "submit" else master)
    query = start(
        spark, url=url, store=store, checkpoint=checkpoint, trigger_s=interval, once=once, max_records=max_records
    )
    try:
        while query.isActive:
            query.awaitTermination(timeout=max(interval, 1.0))
            progress = query.lastProgress
            if progress:
                click.echo(
                    f"batch {progress['batchId']}: {progress['numInputRows']} records "
                    f"({progress.get('processedRowsPerSecond', 0):.0f}/s)",
                    err=True,
                )
        if query.exception() is not None:
            raise click.ClickException(str(query.exception()))
    except KeyboardInterrupt:
        query.stop()
    finally:
        spark.stop()


def _window(since: str, until: str | None) -> Any:
    from metering import Window

    now_ms = int(time.time() * 1000)
    units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    if since[-1:] not in units or not since[:-1].isdigit():
        raise click.UsageError("--since takes a duration like 30m, 6h or 7d")
    end = int(until) if until else now_ms + 60_000
    return Window(now_ms - int(since[:-1]) * units[since[-1]], end)


@metering.command("query")
@click.argument("what", type=click.Choice(["traffic", "tenants", "top"]))
@_store_options
@click.option("--since", default="1h", show_default=True, help="How far back: 30m, 6h, 7d.")
@click.option("--until", default=None, help="End of the window, ms since the epoch [default: now].")
@click.option("--topic", default=None, help="traffic: only this topic.")
@click.option("--limit", type=click.IntRange(1), default=10, show_default=True, help="top: how many partitions.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines instead of a table.")
def metering_query(
    what: str,
    store_path: str | None,
    druid: str | None,
    since: str,
    until: str | None,
    topic: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Traffic per topic/partition, usage per tenant, or the top partitions, over a window."""
    store = _open_store(store_path, druid)
    window = _window(since, until)
    if what == "traffic":
        rows = store.traffic(window, topic=topic)
    elif what == "tenants":
        rows = store.tenants(window)
    else:
        rows = store.top_partitions(window, limit)
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        return
    if not rows:
        click.echo("no usage in that window", err=True)
        return
    columns = list(rows[0])
    click.echo("  ".join(f"{c:>14}" for c in columns))
    for row in rows:
        click.echo("  ".join(f"{row[c]:>14.1f}" if isinstance(row[c], float) else f"{row[c]!s:>14}" for c in columns))


@main.group()
def dev() -> None:
    """Development services: a real ZooKeeper and HDFS on this machine."""


@dev.command("hadoop")
def dev_hadoop() -> None:
    """Fetch and cache the HDFS 2.7.3 server jars (one time, ~220 MB download).

    They come from the PyPI source archive pyspark==2.4.8 and are cached in ~/.cache/talos
    (or $TALOS_CACHE_DIR). `talos dev services` and the tests do this on first use.
    """
    from talos.devservices import ensure_hadoop

    click.echo(ensure_hadoop())


@dev.command("services")
@click.option("--hdfs/--no-hdfs", default=True, show_default=True, help="Start HDFS (NameNode + DataNode).")
@click.option("--zookeeper/--no-zookeeper", default=True, show_default=True, help="Start ZooKeeper.")
@click.option(
    "--search/--no-search",
    default=False,
    show_default=True,
    help="Start a search server with the Elasticsearch/OpenSearch REST API (osmem-server, from the dev extra).",
)
@click.option(
    "--dir",
    "base_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where their data and logs go (default: a new temporary directory).",
)
@click.option("--hdfs-port", type=int, default=None, help="NameNode RPC port (default: a free one).")
@click.option("--webhdfs-port", type=int, default=None, help="NameNode HTTP (WebHDFS) port (default: a free one).")
@click.option("--search-port", type=int, default=None, help="Search server port (default: a free one).")
@click.option("--zookeeper-port", type=int, default=None, help="ZooKeeper client port (default: a free one).")
def dev_services(
    hdfs: bool,
    zookeeper: bool,
    search: bool,
    base_dir: Path | None,
    hdfs_port: int | None,
    webhdfs_port: int | None,
    search_port: int | None,
    zookeeper_port: int | None,
) -> None:
    """Run a real HDFS and ZooKeeper (and with --search a search server) on loopback ports until Ctrl-C.

    Prints their addresses once they are ready; stops them (by PID) on Ctrl-C or SIGTERM.
    """
    from talos.devservices import HdfsCluster, SearchServer, ServiceError, ZooKeeperServer

    base = base_dir or Path(tempfile.mkdtemp(prefix="talos-dev-"))
    base.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    started: list[HdfsCluster | ZooKeeperServer | SearchServer] = []
    try:
        if zookeeper:
            zk = ZooKeeperServer(base / "zookeeper", port=zookeeper_port)
            click.echo("starting ZooKeeper ...", err=True)
            zk.start()
            started.append(zk)
            click.echo(f"zookeeper {zk.address} pid={zk.process.pid if zk.process else '?'}")
        if hdfs:
            cluster = HdfsCluster(base / "hdfs", rpc_port=hdfs_port, http_port=webhdfs_port)
            click.echo("starting HDFS ...", err=True)
            cluster.start()
            started.append(cluster)
            pids = " ".join(f"{p.name}_pid={p.pid}" for p in (cluster.namenode, cluster.datanode) if p is not None)
            click.echo(f"hdfs {cluster.url} webhdfs={cluster.webhdfs_url} {pids}")
        if search:
            server = SearchServer(base, port=search_port)
            click.echo("starting the search server ...", err=True)
            started.append(server.start())
            click.echo(f"search {server.url} pid={server.process.pid if server.process else '?'}")
        click.echo(f"data and logs in {base}; Ctrl-C stops", err=True)
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    except ServiceError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        for service in reversed(started):
            service.stop()
        click.echo("stopped", err=True)


main.add_command(tenants)
main.add_command(tokens)
main.add_command(acl)
main.add_command(quotas)

if __name__ == "__main__":
    main()
