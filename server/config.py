"""Server configuration: defaults, then an optional TOML file, then ``TALOS_*`` environment, then flags."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import socket
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from server.kafka_listeners import KafkaListenerSpec, parse_listeners

__all__ = ["ServerConfig", "load_config"]

SERVER_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    storage: str = "./talos-data"  # a directory, file:///path or hdfs://host:port/path
    group_commit: bool = True  # off: one flush per request (for comparison)
    max_message_bytes: int = 1024 * 1024
    max_request_bytes: int = 8 * 1024 * 1024
    tail_cache_bytes: int = 256 * 1024 * 1024  # recent batches kept in memory, shared by all partitions
    segment_bytes: int = 128 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000  # a partition's active segment is sealed at this age, even if idle
    # Compaction (docs/compaction.md): one background thread per server, its key index this large (24 bytes a
    # key: 32 MiB holds 1.3 million keys per pass), its reads and writes at most this fast (0: unlimited).
    compaction_index_bytes: int = 32 * 1024 * 1024
    compaction_io_bytes_per_s: int = 64 * 1024 * 1024
    default_partitions: int = 1
    max_wait_ms: int = 30_000  # upper bound of a long poll
    # The Kafka listener (docs/kafka.md): off unless a port is set. Clients reach this server at
    # kafka_advertised (HOST:PORT; default the listening host and port).
    kafka_port: int = 0
    kafka_advertised: str = ""
    # Several Kafka listeners instead (server/kafka_listeners.py): NAME://HOST:PORT,... with NAME PLAINTEXT or SSL
    # (SASL_PLAINTEXT, SASL_SSL), each advertised at its own address (kafka_advertised_listeners, by name).
    kafka_listeners: str = ""
    kafka_advertised_listeners: str = ""
    io_threads: int = 8  # partition writes (append + flush): a partition's work stays on one thread
    read_threads: int = 4  # partition reads from storage (the tail cache serves recent data without them)
    flush_timeout_s: float = 20.0  # a flush stuck longer (storage hung) abandons the log; the partition reloads
    # SIGTERM or SIGINT, in any state (starting, serving, shutting down): the server stops accepting, drains open
    # requests, flushes and seals its partitions and deregisters within this many seconds; what still runs then
    # (storage or ZooKeeper hung) is abandoned and the process exits with code 124 (server/__main__.py).
    shutdown_timeout_s: float = 15.0
    producer_state_window_bytes: int = 16 * 1024 * 1024  # log tail read on load to rebuild producer sequences
    # Consumer groups.
    group_offsets_partitions: int = 8  # partitions of __consumer_offsets (fixed once created)
    group_snapshot_interval_s: float = 600.0  # a coordinator rewrites each group's state this often
    transaction_max_timeout_ms: int = 15 * 60 * 1000  # the longest transaction timeout a producer may ask for
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000  # an id idle this long is forgotten
    group_min_session_s: float = 0.5
    group_max_session_s: float = 300.0
    maintenance_interval_s: float = 30.0  # retention, snapshots, expired group members: checked this often
    # Metering: usage records to __talos_metrics every interval (0: off).
    metering_interval_s: float = 10.0
    metering_partitions: int = 4  # partitions of __talos_metrics (fixed once created)
    # Ring weights from the metering store: a DuckDB file, or druid:http://host:port ("" = unweighted ring).
    metering_store: str = ""
    reweigh_every_s: float = 3600.0  # how often the ring keeper looks at the last day's traffic
    # Message trace (docs/trace.md): events to __talos_trace every interval; its index in a local directory
    # ("" = <storage>/_trace_index/<server id> on local storage, else the system's temporary directory).
    trace_flush_interval_s: float = 1.0
    trace_partitions: int = 4  # partitions of __talos_trace (fixed once created)
    trace_max_buffered: int = 100_000  # events waiting to be written; more are dropped (and counted)
    trace_index_dir: str = ""
    # Tenants and tokens: "auto" = on in cluster mode, off standalone; "on"; "off" (anyone is the admin).
    auth: str = "auto"
    admin_token: str = ""  # the bearer token of the admin (required when auth is on); better set by environment
    security_refresh_s: float = 2.0  # how often each server re-reads tenants, tokens, grants and quotas
    portal_secret: str = ""  # signs portal sessions; default: derived from admin_token (or random per process)
    # /metrics with auth on: series by tenant, topic and partition for the admin token only ("admin"; anyone
    # else gets totals), or for anyone ("public": e.g. a Prometheus that cannot send a token).
    metrics_labels: str = "admin"
    # Client connections (server/http/connections.py): a slow or stalled client is timed out, not waited for.
    header_timeout_s: float = 10.0  # a request head must arrive within this (else 408 and close)
    body_idle_timeout_s: float = 30.0  # a request body with no bytes for this long gets 408
    body_timeout_s: float = 120.0  # a request body must be complete within this
    keep_alive_timeout_s: float = 20.0  # an idle keep-alive connection is closed (above the SDK's 15 s)
    max_connections: int = 0  # open client connections; 0: from the file-descriptor limit (at most 10,000)
    max_requests_per_connection: int = 10_000  # then "connection: close" (0: unlimited)
    max_header_bytes: int = 32 * 1024  # a larger request head gets 431
    log_level: str = "info"
    access_log: bool = False
    # Python's young-generation GC runs after this many allocations (Python's default: 700, a collection every
    # few requests under load: about a tenth of the event loop's time, and its pauses in the produce p99;
    # docs/performance.md, "Latency tail: garbage collection"). 0 leaves Python's setting.
    gc_threshold: int = 20_000
    # TLS on every listener (docs/security.md, "TLS"): HTTPS on the HTTP port (REST, the portal, wss:// push), TLS
    # on the Kafka listener, and to the other servers. Off unless a certificate is set; the files are PEM, reloaded
    # when they change (looked at every tls_reload_s). tls_ca_file verifies client certificates (tls_client_auth:
    # none, optional or required) and the other servers' certificates (default: the system's CAs).
    tls_cert_file: str = ""
    tls_key_file: str = ""  # default: the key is in tls_cert_file
    tls_ca_file: str = ""
    tls_client_auth: str = "none"
    tls_reload_s: float = 10.0
    # Cluster mode (all unused when zk is empty: one standalone node owning every partition).
    zk: str = ""  # HOST:PORT[,HOST:PORT...][/chroot]
    server_id: str = ""  # stable across restarts (delayed reassignment counts on it); default host-port
    advertised_url: str = ""  # how clients and other servers reach this one; default http(s)://host:port
    zk_session_timeout_s: float = 10.0
    join_delay_s: float = 5.0  # a new server joins the ring once registered this long
    reassign_delay_s: float = 30.0  # a vanished server's partitions move only after this long
    ring_check_s: float = 1.0  # how often each server looks at registrations and the ring
    # A server whose storage operations fail or stall this long steps down (leaves the ring) if another server
    # can write; it rejoins join_delay after its storage works again (docs/cluster.md). 0: never step down.
    storage_step_down_s: float = 5.0
    storage_probe_s: float = 1.0  # an idle server writes a small file this often to know its storage works
    forward_hops: int = 2  # a forwarded request is forwarded at most this many times
    leave_on_shutdown: bool = False  # on SIGTERM leave the ring (partitions move now) instead of a restart
    # Replaceable servers (a Kubernetes Deployment, whose pods get new names): register as a ring member
    # whose server is gone (still inside reassign_delay), so a replacement moves no partition; wait up to
    # adopt_wait_s for such a vacancy before joining under server_id as a new member.
    adopt_vacant_id: bool = False
    adopt_wait_s: float = 30.0

    @property
    def clustered(self) -> bool:
        return bool(self.zk)

    @property
    def auth_enabled(self) -> bool:
        if self.auth not in ("auto", "on", "off"):
            raise ValueError(f"auth: expected auto, on or off, got {self.auth!r}")
        return self.auth == "on" or (self.auth == "auto" and self.clustered)

    def validate_auth(self) -> None:
        """Auth on needs the admin token (how else would the first tenant be made?)."""
        if self.auth_enabled and not self.admin_token:
            raise ValueError("auth is on (always in cluster mode): set admin_token (TALOS_ADMIN_TOKEN), or auth=off")
        if self.metrics_labels not in ("admin", "public"):
            raise ValueError(f"metrics_labels: expected admin or public, got {self.metrics_labels!r}")

    @property
    def url(self) -> str:
        """The advertised URL: what routes and forwarding use to reach this server."""
        if self.advertised_url:
            return self.advertised_url.rstrip("/")
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def scheme(self) -> str:
        """``https`` when a TLS certificate is set, else ``http``."""
        return "https" if self.tls_cert_file else "http"

    @functools.cached_property
    def kafka_listener_specs(self) -> list[KafkaListenerSpec]:
        """The Kafka listeners to open (none when off); raises :class:`ValueError` for a wrong setting."""
        return parse_listeners(
            self.kafka_listeners,
            self.kafka_advertised_listeners,
            port=self.kafka_port,
            port_advertised=self.kafka_advertised,
            host=self.host,
            tls=bool(self.tls_cert_file),
        )

    @property
    def kafka_address(self) -> str:
        """HOST:PORT Kafka clients use to reach this server: its first listener's ("" when the listener is off)."""
        specs = self.kafka_listener_specs
        return specs[0].advertised if specs else ""

    def kafka_address_of(self, listener: str | None) -> str:
        """HOST:PORT clients of ``listener`` (its name) use; the first listener's for None or a name not opened."""
        for spec in self.kafka_listener_specs:
            if spec.name == listener:
                return spec.advertised
        return self.kafka_address

    @property
    def member_id(self) -> str:
        if self.server_id:
            return self.server_id
        return f"{socket.gethostname()}-{self.port}"

    def validate_cluster(self) -> None:
        """A cluster member needs ZooKeeper and storage every member shares; say which is missing."""
        if not self.zk:
            raise ValueError("a cluster member needs --zk HOST:PORT (or TALOS_ZK)")
        if not self.storage.startswith(("hdfs://", "file://")):
            raise ValueError("a cluster member needs shared storage: --storage hdfs://host:port/path or file:///path")
        if not SERVER_ID.match(self.member_id):
            raise ValueError(f"server id {self.member_id!r}: 1-64 of A-Z a-z 0-9 . _ -, not starting with . or -")
        if self.reassign_delay_s < self.zk_session_timeout_s / 2:
            raise ValueError("reassign_delay should not be much shorter than the ZooKeeper session timeout")

    def replace(self, **changes: Any) -> ServerConfig:
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


def _coerce(name: str, kind: type, raw: object) -> object:
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ValueError(f"{name}: expected a boolean, got {raw!r}")
    if kind is float:
        try:
            return float(str(raw))
        except ValueError:
            raise ValueError(f"{name}: expected a number, got {raw!r}") from None
    if kind is int:
        try:
            return int(str(raw).replace("_", ""))
        except ValueError:
            raise ValueError(f"{name}: expected an integer, got {raw!r}") from None
    return str(raw)


def load_config(file: str | Path | None = None, environ: dict[str, str] | None = None, **flags: Any) -> ServerConfig:
    """Merge the sources; unknown keys in the file are an error (a typo should not pass silently)."""
    env = os.environ if environ is None else environ
    kinds = {f.name: {"bool": bool, "int": int, "float": float, "str": str}[str(f.type)] for f in fields(ServerConfig)}
    values: dict[str, object] = {}
    path = file or env.get("TALOS_CONFIG")
    if path:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
        data = data.get("server", data)
        unknown = sorted(set(data) - set(kinds))
        if unknown:
            raise ValueError(f"{path}: unknown settings {unknown}; known: {sorted(kinds)}")
        values.update({k: _coerce(k, kinds[k], v) for k, v in data.items()})
    for name, kind in kinds.items():
        raw = env.get(f"TALOS_{name.upper()}")
        if raw is not None:
            values[name] = _coerce(f"TALOS_{name.upper()}", kind, raw)
    values.update({k: v for k, v in flags.items() if v is not None})
    return ServerConfig(**values)  # type: ignore[arg-type]
