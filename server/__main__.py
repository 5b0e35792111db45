"""``python -m server standalone|server``: what ``talos standalone`` and ``talos server`` run."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import Any

import uvicorn

from server.config import load_config
from server.http.app import create_asgi
from server.http.connections import connection_limits, protocol_class, raise_fd_limit


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message (structured logs)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1; env TALOS_HOST)")
    parser.add_argument("--port", type=int, help="port (default 8080; env TALOS_PORT)")
    parser.add_argument("--config", help="TOML file ([server] table); env TALOS_CONFIG")
    parser.add_argument(
        "--kafka-port",
        type=int,
        help="serve the Kafka protocol on this port too (default off; env TALOS_KAFKA_PORT; docs/kafka.md)",
    )
    parser.add_argument(
        "--kafka-advertised",
        help="HOST:PORT Kafka clients use to reach this server (default HOST:KAFKA_PORT; env TALOS_KAFKA_ADVERTISED)",
    )
    parser.add_argument("--group-commit", choices=["on", "off"], help="one flush per partition for all queued requests")
    parser.add_argument("--log-format", choices=["json", "text"], default="json")
    parser.add_argument(
        "--auth",
        choices=["auto", "on", "off"],
        help="bearer tokens required (auto: on in cluster mode, off standalone; env TALOS_AUTH). "
        "The admin token comes from TALOS_ADMIN_TOKEN or the config file, never a flag (flags show in ps)",
    )
    parser.add_argument(
        "--metrics-labels",
        choices=["admin", "public"],
        help="with auth on, who sees /metrics series by tenant, topic and partition: only the admin token "
        "(default; others get totals) or anyone (env TALOS_METRICS_LABELS)",
    )
    limits = parser.add_argument_group("client connections (env TALOS_<NAME>, e.g. TALOS_HEADER_TIMEOUT_S)")
    for flag, kind, text in CONNECTION_FLAGS:
        limits.add_argument(flag, type=_seconds if kind is float else _count, help=text)


def _seconds(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


# Flags of both commands for the limits on client connections (server/http/connections.py);
# talos/cli/_servers.py passes the same names through from `talos standalone`.
CONNECTION_FLAGS: tuple[tuple[str, type, str], ...] = (
    ("--header-timeout", float, "seconds a request head may take to arrive, else 408 (10)"),
    ("--body-idle-timeout", float, "seconds a request body may send nothing, else 408 (30)"),
    ("--body-timeout", float, "seconds a request body may take in all, else 408 (120)"),
    ("--keep-alive-timeout", float, "seconds an idle keep-alive connection stays open (20)"),
    ("--max-connections", int, "open client connections; more are answered 503 and closed (0: from the fd limit)"),
    ("--max-requests-per-connection", int, "requests per keep-alive connection, then it closes (10000; 0: no cap)"),
    ("--max-header-bytes", int, "largest request head, else 431 (32768)"),
)


# Seconds uvicorn gives open requests and long polls after SIGTERM, before the server flushes and seals its
# partitions: a pod's terminationGracePeriodSeconds must cover both (tests/unit/test_k8s_manifests.py).
GRACEFUL_SHUTDOWN_S = 10


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``talos server`` and ``talos standalone``."""
    parser = argparse.ArgumentParser(prog="python -m server", description="Run a Talos server.")
    commands = parser.add_subparsers(dest="command", required=True)
    standalone = commands.add_parser("standalone", help="one node on local storage (or --storage hdfs://...)")
    _common(standalone)
    standalone.add_argument("--data-dir", help="local data directory (default ./talos-data)")
    standalone.add_argument("--storage", help="file:///path or hdfs://host:port/path (instead of --data-dir)")
    member = commands.add_parser(
        "server",
        prog="talos server",
        help="a cluster member: ZooKeeper for ownership, shared storage for data",
        description=(
            "A cluster member. Servers share one storage (HDFS, or a directory every server can reach) and "
            "agree through ZooKeeper on who owns each partition: the versioned ring in /talos/ring. Any server "
            "answers any request (forwarding to the owner); the SDK sends straight to owners. Every option "
            "can also be set as TALOS_<NAME> in the environment or in the TOML file."
        ),
    )
    _common(member)
    member.add_argument("--zk", help="ZooKeeper: HOST:PORT[,HOST:PORT...][/chroot] (env TALOS_ZK)")
    member.add_argument("--storage", help="hdfs://host:port/path or file:///shared/path (env TALOS_STORAGE)")
    member.add_argument("--advertised-url", help="URL other servers and clients use (default http://HOST:PORT)")
    member.add_argument("--server-id", help="stable id, kept across restarts (default HOSTNAME-PORT)")
    member.add_argument("--zk-session-timeout", type=_seconds, help="seconds (default 10)")
    member.add_argument("--join-delay", type=_seconds, help="seconds a new server waits to join the ring (5)")
    member.add_argument(
        "--reassign-delay", type=_seconds, help="seconds before a vanished server's partitions move (30)"
    )
    member.add_argument(
        "--leave-on-shutdown",
        action="store_true",
        default=None,
        help="on SIGTERM leave the ring so partitions move at once (default: stay, as for a rolling restart)",
    )
    member.add_argument(
        "--adopt-vacant-id",
        action="store_true",
        default=None,
        help="register as a ring member whose server is gone (a replaced pod), so nothing moves; "
        "env TALOS_ADOPT_VACANT_ID",
    )
    member.add_argument(
        "--adopt-wait", type=_seconds, help="seconds to wait for a vacant ring member before joining as new (30)"
    )
    member.add_argument(
        "--metering-store",
        help="weight the ring by metered traffic: a DuckDB file, or druid:http://host:port (env TALOS_METERING_STORE)",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)

    group_commit = None if args.group_commit is None else args.group_commit == "on"
    flags: dict[str, Any] = {
        "host": args.host,
        "port": args.port,
        "group_commit": group_commit,
        "auth": args.auth,
        "metrics_labels": args.metrics_labels,
        "kafka_port": args.kafka_port,
        "kafka_advertised": args.kafka_advertised,
    }
    flags.update(
        header_timeout_s=args.header_timeout,
        body_idle_timeout_s=args.body_idle_timeout,
        body_timeout_s=args.body_timeout,
        keep_alive_timeout_s=args.keep_alive_timeout,
        max_connections=args.max_connections,
        max_requests_per_connection=args.max_requests_per_connection,
        max_header_bytes=args.max_header_bytes,
    )
    if args.command == "standalone":
        flags["storage"] = args.storage or args.data_dir
    else:
        flags.update(
            storage=args.storage,
            zk=args.zk,
            advertised_url=args.advertised_url,
            server_id=args.server_id,
            zk_session_timeout_s=args.zk_session_timeout,
            join_delay_s=args.join_delay,
            reassign_delay_s=args.reassign_delay,
            leave_on_shutdown=args.leave_on_shutdown,
            adopt_vacant_id=args.adopt_vacant_id,
            adopt_wait_s=args.adopt_wait,
            metering_store=args.metering_store,
        )
    try:
        config = load_config(args.config, **flags)
        if args.command == "server":
            config.validate_cluster()
        elif config.clustered:
            raise ValueError("standalone does not use ZooKeeper: unset TALOS_ZK or run `talos server`")
        config.validate_auth()
        # Before anything opens a file: the cap on connections keeps the server clear of EMFILE.
        limits = connection_limits(config, raise_fd_limit())
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    handler = logging.StreamHandler(sys.stderr)
    if args.log_format == "json":
        handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=config.log_level.upper(), handlers=[handler], force=True)
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    what = f"server {config.member_id} (ZooKeeper {config.zk})" if config.clustered else "standalone"
    print(
        f"talos {what} on http://{config.host}:{config.port} (storage {config.storage}; docs at /docs)",
        file=sys.stderr,
        flush=True,
    )
    app = create_asgi(config)
    uvicorn.run(
        app,
        host=config.host,
        port=config.port,
        loop="uvloop",
        http=protocol_class(limits, app),
        timeout_keep_alive=config.keep_alive_timeout_s,  # type: ignore[arg-type]
        log_config=None,
        access_log=config.access_log,
        # X-Forwarded-For only matters for the client address in the access log; off, it costs nothing
        proxy_headers=config.access_log,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        # Push subscriptions' frames are small JSON: compressing each one cost more of the event loop than the
        # socket write it saves (docs/subscriptions.md).
        ws_per_message_deflate=False,
    )


if __name__ == "__main__":
    main()
