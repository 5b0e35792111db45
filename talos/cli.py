"""The ``talos`` command line."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
from pathlib import Path

import click

from talos import __version__

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="talos")
def main() -> None:
    """Talos: a message queue with compute separated from storage.

    Stateless servers place topic partitions on a traffic-weighted consistent-hash ring and keep the
    data on HDFS (or a local disk for one node). Run `talos COMMAND --help` for each command.
    """


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
def standalone(
    host: str | None,
    port: int | None,
    data_dir: str | None,
    storage: str | None,
    config_file: str | None,
    group_commit: str | None,
    log_format: str,
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
    ):
        if value is not None:
            argv += [flag, str(value)]
    # The SDK does not import the server: hand the process over to it.
    os.execv(sys.executable, argv)


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
    "--dir",
    "base_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where their data and logs go (default: a new temporary directory).",
)
@click.option("--hdfs-port", type=int, default=None, help="NameNode RPC port (default: a free one).")
@click.option("--zookeeper-port", type=int, default=None, help="ZooKeeper client port (default: a free one).")
def dev_services(
    hdfs: bool, zookeeper: bool, base_dir: Path | None, hdfs_port: int | None, zookeeper_port: int | None
) -> None:
    """Run a real HDFS and ZooKeeper on loopback ports until Ctrl-C.

    Prints their addresses once they are ready; stops them (by PID) on Ctrl-C or SIGTERM.
    """
    from talos.devservices import HdfsCluster, ServiceError, ZooKeeperServer

    base = base_dir or Path(tempfile.mkdtemp(prefix="talos-dev-"))
    base.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    started: list[HdfsCluster | ZooKeeperServer] = []
    try:
        if zookeeper:
            zk = ZooKeeperServer(base / "zookeeper", port=zookeeper_port)
            click.echo("starting ZooKeeper ...", err=True)
            zk.start()
            started.append(zk)
            click.echo(f"zookeeper {zk.address} pid={zk.process.pid if zk.process else '?'}")
        if hdfs:
            cluster = HdfsCluster(base / "hdfs", rpc_port=hdfs_port)
            click.echo("starting HDFS ...", err=True)
            cluster.start()
            started.append(cluster)
            pids = " ".join(f"{p.name}_pid={p.pid}" for p in (cluster.namenode, cluster.datanode) if p is not None)
            click.echo(f"hdfs {cluster.url} webhdfs={cluster.webhdfs_url} {pids}")
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


if __name__ == "__main__":
    main()
