"""``python -m server standalone|server``: what ``talos standalone`` and ``talos server`` run."""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import uvicorn

from server.app import Shutdown, create_asgi
from server.config import load_config
from server.coordination import kazoo_logs
from server.http.connections import connection_limits, protocol_class, raise_fd_limit
from server.tls import ServerTLS

log = logging.getLogger("talos.server")


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
    parser.add_argument(
        "--kafka-listeners",
        help="several Kafka listeners instead of --kafka-port: NAME://HOST:PORT,... with NAME PLAINTEXT or SSL "
        "(env TALOS_KAFKA_LISTENERS; docs/kafka.md)",
    )
    parser.add_argument(
        "--kafka-advertised-listeners",
        help="NAME://HOST:PORT,... what clients of each listener connect to (default: its listening address)",
    )
    parser.add_argument("--group-commit", choices=["on", "off"], help="one flush per partition for all queued requests")
    parser.add_argument(
        "--shutdown-timeout",
        type=_seconds,
        help="seconds from SIGTERM (or SIGINT) to exit, in any state: drain, flush and seal, deregister; what "
        "still runs then is given up and the exit code is 124 (default 15; env TALOS_SHUTDOWN_TIMEOUT_S)",
    )
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
    tls = parser.add_argument_group("TLS on every listener (env TALOS_TLS_<NAME>; docs/security.md)")
    tls.add_argument(
        "--tls-cert", help="certificate chain (PEM): serve HTTPS, wss:// and TLS on the Kafka port (reloaded on change)"
    )
    tls.add_argument("--tls-key", help="its private key (PEM; default: in the --tls-cert file)")
    tls.add_argument("--tls-ca", help="CA bundle (PEM) for client certificates and for the other servers' certificates")
    tls.add_argument(
        "--tls-client-auth",
        choices=["none", "optional", "required"],
        help="ask clients for a certificate signed by --tls-ca (default none)",
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
# partitions: a pod's terminationGracePeriodSeconds must cover both (tests/unit/test_k8s_manifests.py). At most
# two thirds of shutdown_timeout_s, so that the partitions keep a third of it.
GRACEFUL_SHUTDOWN_S = 10

# The exit code when the shutdown deadline cut something short (as timeout(1)): the log's last line says what
# was still running. A shutdown that finished ends the process by the signal itself, as uvicorn does.
SHUTDOWN_INCOMPLETE_EXIT = 124


def drain_seconds(shutdown_timeout_s: float) -> float:
    """How long open requests and long polls may take after the signal."""
    return min(float(GRACEFUL_SHUTDOWN_S), shutdown_timeout_s * 2 / 3)


_ROOT = Path(__file__).resolve().parent.parent
_OURS = tuple(str(_ROOT / package) + os.sep for package in ("server", "fencing", "hashring", "talos"))
_NOT_WORK = (str(_ROOT / "server" / "__main__.py"),)


def busy_threads() -> list[tuple[str, str]]:
    """Threads inside Talos code (a storage or ZooKeeper call, a wait for the server id) and the main thread (the
    event loop), each as where it is in one line and its stack; threads parked waiting for work (pool workers, the
    ring keeper between rounds) are left out."""
    frames = sys._current_frames()
    out = []
    for thread in threading.enumerate():
        frame = frames.get(thread.ident or -1)
        if thread is threading.current_thread() or frame is None:
            continue
        stack = traceback.extract_stack(frame)
        ours = [i for i, f in enumerate(stack) if f.filename.startswith(_OURS) and f.filename not in _NOT_WORK]
        main = thread is threading.main_thread()
        if not ours and not main:
            continue
        after = stack[ours[-1] + 1 :] if ours else stack[-1:]
        if ours and not main:
            inner = stack[ours[-1]]
            waiting = all(os.path.basename(f.filename) in ("threading.py", "queue.py") for f in after)
            if (after and waiting) or (not after and inner.name == "run" and inner.filename.endswith("executor.py")):
                continue  # a loop of ours waiting on its own event or queue: idle
        where = " < ".join(
            f"{stack[i].name} ({os.path.relpath(stack[i].filename, _ROOT)}:{stack[i].lineno})"
            for i in reversed(ours[-3:])
        )
        below = f"{after[-1].name} ({os.path.basename(after[-1].filename)}:{after[-1].lineno})" if after else ""
        where = f"{where} in {below}" if where and below else where or below
        out.append((f"{thread.name}: {where}", f"{thread.name}:\n{''.join(traceback.format_list(stack[-12:]))}"))
    return out


# The signals that stop a server. Blocked in every thread (main() blocks them before any thread starts, and threads
# inherit the mask): the watchdog's thread takes them with sigtimedwait, so that they are seen even while the main
# thread is stuck in a native call (a storage client) and could run no Python signal handler.
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


class Watchdog:
    """Takes SIGTERM and SIGINT on a thread of its own: the first starts the shutdown's clock and tells uvicorn to
    stop, later ones are logged and change nothing. At the deadline it ends the process whatever it is doing (a
    start-up blocked in a thread, storage or ZooKeeper hung, the event loop stuck, a pool thread Python would join
    at exit forever), with a log line that says what was still running."""

    def __init__(self, shutdown: Shutdown) -> None:
        self.shutdown = shutdown
        self.signals: list[str] = []
        self.on_signal: Callable[[int], None] = lambda _sig: None  # uvicorn's, once it runs
        self._ending = threading.Lock()
        self._thread = threading.Thread(target=self._watch, name="talos-shutdown-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _watch(self) -> None:
        while True:
            deadline = self.shutdown.deadline
            if deadline is None:
                sig: int | None = signal.sigwait(STOP_SIGNALS)
            else:
                info = signal.sigtimedwait(STOP_SIGNALS, max(0.0, deadline - time.monotonic()))
                sig = info.si_signo if info is not None else None
            if sig is not None:
                name = signal.Signals(sig).name
                phase = self.shutdown.phase
                first = self.shutdown.begin(name)
                self.signals.append(name)
                self._report(name, phase, first=first)
                with contextlib.suppress(Exception):
                    self.on_signal(sig)
            deadline = self.shutdown.deadline
            if deadline is not None and time.monotonic() >= deadline:
                self.end("the shutdown deadline passed")

    def _report(self, name: str, phase: str, *, first: bool) -> None:
        s = self.shutdown
        if first:
            what = {"starting": "cancelling the start-up", "stopped": "ending"}.get(
                phase,
                f"stop accepting, drain open requests (at most {drain_seconds(s.timeout_s):.1f} s), "
                "flush and seal partitions, deregister",
            )
            log.info("%s while %s: shutting down within %g s: %s", name, phase, s.timeout_s, what)
        else:
            log.warning(
                "%s again while %s: the shutdown goes on, by the same deadline (%.1f s left)",
                name,
                s.phase,
                s.remaining(),
            )

    def end(self, why: str) -> NoReturn:
        """Log what is still running and exit with SHUTDOWN_INCOMPLETE_EXIT, now (no thread is joined)."""
        with self._ending:  # once: the watchdog and main() may both get here
            s = self.shutdown
            where = s.phase + (f" ({s.step})" if s.step else "")
            running: list[tuple[str, str]] = []
            with contextlib.suppress(Exception):
                running = busy_threads()
            log.error(
                "%s, %.1f s after %s, while %s; given up: %s; still running: %s; exiting with code %d",
                why,
                s.timeout_s - s.remaining() if s.deadline is not None else 0.0,
                s.signal or "the signal",
                where,
                "; ".join(s.abandoned) or "nothing",
                "; ".join(line for line, _stack in running) or "no thread",
                SHUTDOWN_INCOMPLETE_EXIT,
            )
            if running:  # for the post-mortem
                log.error("stacks of the threads still running:\n%s", "\n".join(stack for _line, stack in running))
            for handler in logging.getLogger().handlers:
                with contextlib.suppress(Exception):
                    handler.flush()
            os._exit(SHUTDOWN_INCOMPLETE_EXIT)


class _Server(uvicorn.Server):
    """uvicorn, told of SIGTERM and SIGINT by the watchdog's thread (``handle_exit``: should_exit, or force_exit
    for a second SIGINT) instead of handlers of its own."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # No handlers: the signals are blocked and taken by the watchdog. main() decides how the process ends
        # (uvicorn would re-raise the signal even after a shutdown cut short).
        yield


class _ExpectedStartupFailure(logging.Filter):
    """Drops uvicorn's "startup failed" errors (and the traceback) of a start-up stopped by a signal on purpose."""

    def __init__(self, shutdown: Shutdown) -> None:
        super().__init__()
        self.shutdown = shutdown

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self.shutdown.start_aborted and record.levelno >= logging.ERROR)


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
    member.add_argument(
        "--advertised-url", help="URL other servers and clients use (default http://HOST:PORT, https with TLS)"
    )
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
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # before any thread: the watchdog takes them
    # ``kill -USR1 <pid>``: every thread's stack to stderr, for a server that seems stuck (Java's jstack).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
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
        "kafka_listeners": args.kafka_listeners,
        "kafka_advertised_listeners": args.kafka_advertised_listeners,
        "tls_cert_file": args.tls_cert,
        "tls_key_file": args.tls_key,
        "tls_ca_file": args.tls_ca,
        "tls_client_auth": args.tls_client_auth,
    }
    flags.update(
        header_timeout_s=args.header_timeout,
        body_idle_timeout_s=args.body_idle_timeout,
        body_timeout_s=args.body_timeout,
        keep_alive_timeout_s=args.keep_alive_timeout,
        max_connections=args.max_connections,
        max_requests_per_connection=args.max_requests_per_connection,
        max_header_bytes=args.max_header_bytes,
        shutdown_timeout_s=args.shutdown_timeout,
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
        if config.shutdown_timeout_s <= 0:
            raise ValueError("shutdown_timeout_s must be > 0")
        # Before anything opens a file: the cap on connections keeps the server clear of EMFILE.
        limits = connection_limits(config, raise_fd_limit())
        tls = ServerTLS.of(config)  # files that do not load stop the start here, saying which
        config.kafka_listener_specs  # noqa: B018 - parsed (and checked) now, not when the listener opens
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    handler = logging.StreamHandler(sys.stderr)
    if args.log_format == "json":
        handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=config.log_level.upper(), handlers=[handler], force=True)
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    kazoo_logs.install()
    what = f"server {config.member_id} (ZooKeeper {config.zk})" if config.clustered else "standalone"
    print(
        f"talos {what} on {config.scheme}://{config.host}:{config.port} (storage {config.storage}; docs at /docs)",
        file=sys.stderr,
        flush=True,
    )
    shutdown = Shutdown(config.shutdown_timeout_s)
    app = create_asgi(config, shutdown, tls)
    logging.getLogger("uvicorn.error").addFilter(_ExpectedStartupFailure(shutdown))
    server_config = uvicorn.Config(
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
        timeout_graceful_shutdown=drain_seconds(config.shutdown_timeout_s),  # type: ignore[arg-type]
        # Push subscriptions' frames are small JSON: compressing each one cost more of the event loop than the
        # socket write it saves (docs/subscriptions.md).
        ws_per_message_deflate=False,
        # uvicorn's own context is replaced below; these make it say https in its log.
        ssl_certfile=config.tls_cert_file or None,
        ssl_keyfile=config.tls_key_file or None,
    )
    if tls is not None:
        server_config.load()  # uvicorn loads once: its context is replaced by one that follows the files' changes
        server_config.ssl = tls.listening_context()
    server = _Server(server_config)
    watchdog = Watchdog(shutdown)
    watchdog.on_signal = lambda sig: server.handle_exit(sig, None)
    watchdog.start()
    try:
        server.run()
    except SystemExit:  # uvicorn's "startup failed" (3): a signal's doing, or a real failure
        if not shutdown.begun:
            raise
    if not shutdown.begun:  # uvicorn ended by itself
        if not server.started:
            sys.exit(3)
        return
    if shutdown.abandoned:
        watchdog.end("the shutdown was cut short")
    log.info("stopped %.1f s after %s", shutdown.timeout_s - shutdown.remaining(), shutdown.signal)
    # End as uvicorn does after a signal: by the signal itself (a supervisor sees "terminated by SIGTERM"). No
    # thread is joined: the pools' threads finished, or a step that waited for them was given up above.
    first = signal.Signals[watchdog.signals[0]] if watchdog.signals else signal.SIGTERM
    signal.signal(first, signal.SIG_DFL)
    signal.raise_signal(first)  # pending on this thread until unblocked
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {first})


if __name__ == "__main__":
    main()
