"""``talos standalone``, ``talos server``, ``talos cluster up|down`` and ``talos dev``: running Talos and its services.

The server commands hand the process over to ``python -m server`` (os.execv) once they have checked that the
server extra is installed (``_extras``: else one line on how to install it); the development cluster and services
come from ``server.devservices`` (standard library only), imported inside the commands.

May import: click, the public SDK, ``server.devservices`` (inside the commands) and ``talos.cli``'s shared modules;
no other module of ``server``.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from talos.cli._common import CLUSTER_DIR
from talos.cli._extras import require

__all__ = ["cluster", "dev", "server", "standalone"]

# Limits on client connections (server/http/connections.py), passed to `python -m server standalone` as given.
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


@click.command()
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
@click.option(
    "--kafka-port",
    type=int,
    default=None,
    help="Serve the Kafka protocol on this port too [default: off; env TALOS_KAFKA_PORT; docs/kafka.md].",
)
@click.option(
    "--kafka-listeners",
    default=None,
    help="Several Kafka listeners instead: NAME://HOST:PORT,... with NAME PLAINTEXT or SSL "
    "[env TALOS_KAFKA_LISTENERS; docs/kafka.md].",
)
@click.option(
    "--shutdown-timeout",
    type=float,
    default=None,
    help="Seconds from SIGTERM (or Ctrl-C) to exit, whatever hangs: drain, flush and seal; then exit code 124 "
    "[default: 15; env TALOS_SHUTDOWN_TIMEOUT_S].",
)
@click.option(
    "--tls-cert",
    default=None,
    help="Certificate chain (PEM): serve HTTPS, wss:// and TLS on the Kafka port; reloaded when the file changes "
    "[env TALOS_TLS_CERT_FILE; docs/security.md].",
)
@click.option("--tls-key", default=None, help="Its private key (PEM) [default: in the --tls-cert file].")
@click.option("--tls-ca", default=None, help="CA bundle (PEM) that signs client certificates (with --tls-client-auth).")
@click.option(
    "--tls-client-auth",
    type=click.Choice(["none", "optional", "required"]),
    default=None,
    help="Ask clients for a certificate signed by --tls-ca [default: none].",
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
    kafka_port: int | None,
    kafka_listeners: str | None,
    shutdown_timeout: float | None,
    tls_cert: str | None,
    tls_key: str | None,
    tls_ca: str | None,
    tls_client_auth: str | None,
    **limits: float | None,
) -> None:
    """Run one Talos node: local storage, no ZooKeeper, no Java.

    Serves the REST API v1 with OpenAPI docs at /docs, plus /healthz, /readyz and /metrics.
    Every setting can also come from the environment (TALOS_PORT, TALOS_GROUP_COMMIT=0, ...) or a TOML file.
    Needs the server extra: pip install 'talos-mq[server]'.
    """
    require("standalone", "server")
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
        ("--kafka-port", kafka_port),
        ("--kafka-listeners", kafka_listeners),
        ("--shutdown-timeout", shutdown_timeout),
        ("--tls-cert", tls_cert),
        ("--tls-key", tls_key),
        ("--tls-ca", tls_ca),
        ("--tls-client-auth", tls_client_auth),
        *((flag, limits[flag[2:].replace("-", "_")]) for flag, _, _ in _CONNECTION_LIMITS),
    ):
        if value is not None:
            argv += [flag, str(value)]
    # The SDK does not import the server: hand the process over to it.
    os.execv(sys.executable, argv)


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True}, add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def server(args: tuple[str, ...]) -> None:
    """Run a cluster member (ZooKeeper + shared storage); `talos server --help` lists its options.

    Example: talos server --zk 127.0.0.1:2181 --storage hdfs://127.0.0.1:9000/talos --port 8081
    (needs the server extra: pip install 'talos-mq[server]')
    """
    require("server", "server")
    os.execv(sys.executable, [sys.executable, "-m", "server", "server", *args])


@click.group()
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
@click.option(
    "--kafka-base-port",
    type=click.IntRange(0, 65535 - 16),
    default=9092,
    show_default=True,
    help="Kafka listeners on consecutive ports from here (0: free ports).",
)
@click.option(
    "--tls",
    is_flag=True,
    help="Serve HTTPS, wss:// and Kafka over TLS (SASL_SSL) everywhere, servers to each other too, with a CA made "
    "for this cluster in DIR/tls (clients: TALOS_CA_FILE=DIR/tls/ca.pem).",
)
def cluster_up(
    servers: int,
    base_port: int,
    base_dir: Path,
    zk_session_timeout: float,
    reassign_delay: float,
    join_delay: float,
    storage: str,
    kafka_base_port: int,
    tls: bool,
) -> None:
    """Start ZooKeeper, HDFS and N servers; return once all are ready, leaving them running.

    Prints one `server <id> <url> pid=<pid>` line per server, one `kafka <id> <host:port>` line per server's
    Kafka listener, then the ZooKeeper and HDFS addresses (and, with --tls, `ca <path>`: the CA to trust).
    Running it again while the cluster is up prints the same lines and starts nothing.
    Needs the server extra: pip install 'talos-mq[server]'.
    """
    require("cluster up", "server")
    from server.devservices import (
        ClusterSettings,
        LocalCluster,
        ServiceError,
        make_local_certificates,
        recorded_alive,
        recorded_cluster,
    )

    state = recorded_cluster(base_dir)
    if state is not None:
        if recorded_alive(state):
            servers_info = state.get("servers", [])
            assert isinstance(servers_info, list)
            for info in servers_info:
                click.echo(f"server {info['id']} {info['url']} pid={info['pid']}")
            for info in servers_info:
                if info.get("kafka"):
                    click.echo(f"kafka {info['id']} {info['kafka']}")
            zk_info, hdfs_info = state.get("zookeeper"), state.get("hdfs")
            if isinstance(zk_info, dict):
                click.echo(f"zookeeper {zk_info['address']}")
            if isinstance(hdfs_info, dict):
                click.echo(f"hdfs {hdfs_info['url']} webhdfs={hdfs_info['webhdfs']}")
            click.echo(f"storage {state.get('storage')}")
            click.echo(f"admin-token {base_dir.resolve() / 'admin-token'}")
            if state.get("tls_ca"):
                click.echo(f"ca {state['tls_ca']}")
            click.echo(f"already up (state in {base_dir / 'cluster.json'})", err=True)
            return
        from server.devservices import stop_recorded_cluster

        stop_recorded_cluster(base_dir)  # leftovers of a cluster that died: clean them first
    settings = ClusterSettings(
        zk_session_timeout_s=zk_session_timeout,
        join_delay_s=join_delay,
        reassign_delay_s=reassign_delay,
        tls=make_local_certificates(base_dir.resolve() / "tls") if tls else None,
    )
    local = LocalCluster(
        base_dir,
        servers=servers,
        base_port=base_port,
        settings=settings,
        storage=storage,
        kafka_base_port=kafka_base_port,
    )
    try:
        local.start(progress=True)
    except ServiceError as exc:
        raise click.ClickException(f"{exc} (logs in {base_dir})") from exc
    for line in local.describe():
        click.echo(line)
    click.echo(f"up; logs in {base_dir}; `talos cluster down --dir {base_dir}` stops it", err=True)
    click.echo(f"auth is on: export TALOS_TOKEN=$(cat {base_dir / 'admin-token'}) to act as the admin", err=True)
    if tls:
        ca = base_dir / "tls" / "ca.pem"
        click.echo(f"TLS is on: export TALOS_CA_FILE={ca} (curl --cacert {ca}; Kafka: ssl.ca.location)", err=True)


@cluster.command("down")
@CLUSTER_DIR
def cluster_down(base_dir: Path) -> None:
    """Stop the cluster `up` started in --dir (servers gracefully first); nothing to do is fine."""
    from server.devservices import stop_recorded_cluster

    stopped = stop_recorded_cluster(base_dir)
    click.echo(f"stopped: {', '.join(stopped)}" if stopped else f"no cluster running in {base_dir}")


@click.group()
def dev() -> None:
    """Development services: a real ZooKeeper and HDFS on this machine."""


@dev.command("hadoop")
def dev_hadoop() -> None:
    """Fetch and cache the HDFS 2.7.3 server jars (one time, ~220 MB download).

    They come from the PyPI source archive pyspark==2.4.8 and are cached in ~/.cache/talos
    (or $TALOS_CACHE_DIR). `talos dev services` and the tests do this on first use.
    """
    from server.devservices import ensure_hadoop

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
    from server.devservices import HdfsCluster, SearchServer, ServiceError, ZooKeeperServer

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
