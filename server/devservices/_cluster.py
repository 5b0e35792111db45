"""A local Talos cluster: ZooKeeper, HDFS and N ``talos server`` processes on loopback ports.

``ClusterServer`` is one member as a managed subprocess (tests kill, pause and restart it).
``LocalCluster`` starts the lot and writes ``cluster.json`` in its directory, so that ``talos cluster down``
(another process) can find every PID again and stop exactly those processes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from server.devservices._certificates import TlsFiles
from server.devservices._hdfs import HdfsCluster
from server.devservices._process import (
    ManagedProcess,
    ServiceError,
    free_port_range,
    in_netns,
    shutdown_wait_s,
    wait_http_ready,
    wait_until,
)
from server.devservices._zookeeper import ZooKeeperServer

__all__ = [
    "ClusterServer",
    "ClusterSettings",
    "LocalCluster",
    "recorded_alive",
    "recorded_cluster",
    "relaunch",
    "stop_recorded_cluster",
]

STATE_FILE = "cluster.json"
TOKEN_FILE = "admin-token"  # a cluster's servers require tokens; this one is the admin's


@dataclass(frozen=True)
class ClusterSettings:
    zk_session_timeout_s: float = 10.0
    join_delay_s: float = 1.0  # a laptop cluster: members join fast
    reassign_delay_s: float = 30.0
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    admin_token: str = ""  # TALOS_ADMIN_TOKEN of the servers (auth is on in cluster mode)
    tls: TlsFiles | None = None  # the servers serve https (and TLS on their Kafka listeners) with these files

    def server_env(self) -> dict[str, str]:
        return {**self.env, "TALOS_ADMIN_TOKEN": self.admin_token} if self.admin_token else dict(self.env)


def _get_json(
    url: str, timeout: float = 2.0, token: str = "", context: ssl.SSLContext | None = None
) -> dict[str, object]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout, context=context) as answer:
        data = json.load(answer)
    return data if isinstance(data, dict) else {}


class ClusterServer:
    """One ``talos server``: ``start`` returns once ``/readyz`` answers (registered in ZooKeeper).

    ``host``: the address it listens on and advertises; ``netns``: a network namespace to run it in."""

    def __init__(
        self,
        server_id: str,
        port: int,
        *,
        zk: str,
        storage: str,
        log_dir: Path,
        settings: ClusterSettings,
        host: str = "127.0.0.1",
        netns: str | None = None,
        kafka_port: int | None = None,
    ) -> None:
        self.server_id = server_id
        self.kafka_port = kafka_port  # its Kafka listener (None: off)
        self.host = host
        self.netns = netns
        self.port = port
        self.zk = zk
        self.storage = storage
        self.log_dir = log_dir
        self.settings = settings
        self.process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.settings.tls is not None else 'http'}://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        if self.process is None:
            raise ServiceError(f"server {self.server_id} is not running")
        return self.process.pid

    def argv(self) -> list[str]:
        s = self.settings
        listen = ["--host", self.host] if self.host != "127.0.0.1" else []
        return in_netns(
            self.netns,
            [
                sys.executable,
                "-m",
                "server",
                "server",
                "--server-id",
                self.server_id,
                "--port",
                str(self.port),
                "--zk",
                self.zk,
                "--storage",
                self.storage,
                "--advertised-url",
                self.url,
                "--zk-session-timeout",
                str(s.zk_session_timeout_s),
                "--join-delay",
                str(s.join_delay_s),
                "--reassign-delay",
                str(s.reassign_delay_s),
                "--log-format",
                "text",
                *listen,
                *self._kafka_args(),
                *(s.tls.server_args() if s.tls is not None else ()),
                *s.extra_args,
            ],
        )

    @property
    def kafka_address(self) -> str | None:
        return None if self.kafka_port is None else f"{self.host}:{self.kafka_port}"

    def _kafka_args(self) -> list[str]:
        if self.kafka_port is None:
            return []
        return ["--kafka-port", str(self.kafka_port), "--kafka-advertised", f"{self.host}:{self.kafka_port}"]

    def start(self, timeout: float = 60.0, *, wait: bool = True) -> ClusterServer:
        self.process = ManagedProcess(
            f"talos-{self.server_id}",
            self.argv(),
            log_path=self.log_dir / f"server-{self.server_id}.log",
            env={**os.environ, **self.settings.server_env()},
        )
        self.process.start()
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        if self.process is None:
            raise ServiceError(f"server {self.server_id} is not started")
        what = f"talos server {self.server_id} on {self.url}"
        context = self.settings.tls.client_context() if self.settings.tls is not None else None
        wait_http_ready(self.process, f"{self.url}/readyz", timeout=timeout, what=what, context=context)

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.process is not None:
            self.process.kill()

    def terminate(self) -> None:
        """SIGTERM without waiting: the graceful shutdown starts (see :meth:`stop`)."""
        if self.process is not None:
            self.process.terminate()

    def stop(self) -> None:
        """SIGTERM (graceful: flush, seal, deregister), SIGKILL if still running after its shutdown deadline and a
        slack."""
        if self.process is not None:
            self.process.stop(timeout=shutdown_wait_s(self.process.env))

    def pause(self) -> None:
        if self.process is not None:
            self.process.signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None:
            self.process.signal(signal.SIGCONT)


class LocalCluster:
    def __init__(
        self,
        base_dir: Path,
        *,
        servers: int = 3,
        base_port: int | None = None,
        settings: ClusterSettings | None = None,
        storage: str = "hdfs",  # or "file": a directory under base_dir, shared by the servers
        kafka_base_port: int | None = None,  # Kafka listeners on consecutive ports from here (0: free ones; None: off)
    ) -> None:
        base_dir = base_dir.resolve()  # `cluster down` recognises its processes by these paths
        self.base_dir = base_dir
        settings = settings or ClusterSettings()
        if not settings.admin_token:
            settings = dataclasses.replace(settings, admin_token=_admin_token(base_dir))
        self.settings = settings
        base_port = base_port or free_port_range(servers)
        ports = [base_port + i for i in range(servers)]
        kafka_ports: list[int | None] = [None] * servers
        if kafka_base_port is not None:
            while not kafka_base_port or set(range(kafka_base_port, kafka_base_port + servers)) & set(ports):
                kafka_base_port = free_port_range(servers)
            kafka_ports = [kafka_base_port + i for i in range(servers)]
            ports += [p for p in kafka_ports if p is not None]
        # ZooKeeper and HDFS take free ports of their own: none may be one the servers are about to use.
        while True:
            self.zookeeper = ZooKeeperServer(base_dir / "zookeeper")
            self.hdfs: HdfsCluster | None = HdfsCluster(base_dir / "hdfs") if storage == "hdfs" else None
            taken = {self.zookeeper.port}
            if self.hdfs is not None:
                h = self.hdfs
                taken |= {h.rpc_port, h.http_port, h.datanode_port, h.datanode_http_port}
            if not taken & set(ports) and len(taken) == (5 if self.hdfs is not None else 1):
                break
        self.servers = [
            ClusterServer(
                f"s{i + 1}",
                port,
                zk="",
                storage="",
                log_dir=base_dir / "logs",
                settings=self.settings,
                kafka_port=kafka_ports[i],
            )
            for i, port in enumerate(ports[:servers])
        ]

    @property
    def storage(self) -> str:
        if self.hdfs is not None:
            return f"{self.hdfs.url}/talos"
        return f"file://{(self.base_dir / 'storage').resolve()}"

    def start(self, timeout: float = 120.0, *, progress: bool = False) -> LocalCluster:
        def say(text: str) -> None:
            if progress:
                print(text, file=sys.stderr, flush=True)

        self.base_dir.mkdir(parents=True, exist_ok=True)
        try:
            say("starting ZooKeeper ...")
            self.zookeeper.start()
            if self.hdfs is not None:
                say("starting HDFS (NameNode + DataNode) ...")
                self.hdfs.start()
            self._write_state()
            for server in self.servers:
                server.zk, server.storage = self.zookeeper.address, self.storage
                say(f"starting server {server.server_id} on {server.url} ...")
                server.start(timeout, wait=False)
            self._write_state()
            for server in self.servers:
                server.wait_ready(timeout)
            say("waiting for every server to join the ring ...")
            self.wait_ring(len(self.servers), timeout=timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def ring(self, via: ClusterServer | None = None) -> dict[str, int]:
        server = via or next(s for s in self.servers if s.alive())
        tls = self.settings.tls
        context = tls.client_context() if tls is not None else None
        ring = _get_json(f"{server.url}/v1/cluster", token=self.settings.admin_token, context=context).get("ring", {})
        members = ring.get("members", {}) if isinstance(ring, dict) else {}
        return {str(k): int(v) for k, v in members.items()}

    def wait_ring(self, members: int, *, timeout: float = 60.0) -> None:
        wait_until(lambda: len(self.ring()) == members, timeout=timeout, what=f"a ring of {members} servers")

    def _write_state(self) -> None:
        hdfs = self.hdfs
        state = {
            "zookeeper": {"address": self.zookeeper.address, "pid": _pid(self.zookeeper.process)},
            "hdfs": None
            if hdfs is None
            else {
                "url": hdfs.url,
                "webhdfs": hdfs.webhdfs_url,
                "namenode_pid": _pid(hdfs.namenode),
                "datanode_pid": _pid(hdfs.datanode),
            },
            "storage": self.storage,
            "tls_ca": None if self.settings.tls is None else str(self.settings.tls.ca_file),
            "servers": [
                {
                    "id": s.server_id,
                    "url": s.url,
                    "pid": _pid(s.process),
                    "log": str(s.log_dir),
                    "kafka": s.kafka_address,
                }
                for s in self.servers
            ],
            "settings": {
                "zk_session_timeout_s": self.settings.zk_session_timeout_s,
                "reassign_delay_s": self.settings.reassign_delay_s,
                "join_delay_s": self.settings.join_delay_s,
            },
            # How to start each process again (fault injection restarts them: `talos verify --faults local`).
            "processes": {
                name: {"pid": _pid(process), "argv": process.argv, "log": str(process.log_path), "env": env}
                for name, process, env in self._processes()
                if process is not None
            },
        }
        path = self.base_dir / STATE_FILE
        path.write_text(json.dumps(state, indent=2))
        path.chmod(0o600)  # the servers' environment holds the admin token

    def _processes(self) -> list[tuple[str, ManagedProcess | None, dict[str, str]]]:
        out: list[tuple[str, ManagedProcess | None, dict[str, str]]] = [("zookeeper", self.zookeeper.process, {})]
        if self.hdfs is not None:
            out += [("namenode", self.hdfs.namenode, {}), ("datanode", self.hdfs.datanode, {})]
        out += [(f"server:{s.server_id}", s.process, self.settings.server_env()) for s in self.servers]
        return out

    def describe(self) -> list[str]:
        lines = [f"server {s.server_id} {s.url} pid={s.pid}" for s in self.servers]
        lines += [f"kafka {s.server_id} {s.kafka_address}" for s in self.servers if s.kafka_address]
        lines.append(f"zookeeper {self.zookeeper.address}")
        if self.hdfs is not None:
            lines.append(f"hdfs {self.hdfs.url} webhdfs={self.hdfs.webhdfs_url}")
        lines.append(f"storage {self.storage}")
        lines.append(f"admin-token {self.base_dir / TOKEN_FILE}")
        if self.settings.tls is not None:
            lines.append(f"ca {self.settings.tls.ca_file}")
        return lines

    def stop(self) -> None:
        for server in self.servers:  # their graceful shutdowns run at once, then each is waited for
            server.terminate()
        for server in self.servers:
            server.stop()
        if self.hdfs is not None:
            self.hdfs.stop()
        self.zookeeper.stop()
        (self.base_dir / STATE_FILE).unlink(missing_ok=True)


def _admin_token(base_dir: Path) -> str:
    """The cluster's admin token: the one kept in ``base_dir`` (a restarted cluster keeps it), else new."""
    path = base_dir / TOKEN_FILE
    if path.exists():
        return path.read_text().strip()
    base_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    path.touch(mode=0o600)
    path.write_text(token + "\n")
    return token


def _pid(process: ManagedProcess | None) -> int | None:
    return process.pid if process is not None and process.alive() else None


def _running(pid: int, marker: str) -> bool:
    """Is ``pid`` alive and still the process we started (its command line names ``marker``)?"""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return marker in cmdline


def _terminate(processes: list[tuple[int, str]], timeout: float = 15.0) -> list[int]:
    """SIGTERM every ``(pid, marker)`` still running, at once; SIGKILL what is left after ``timeout``. Returns the
    PIDs that were running."""
    running = [(pid, marker) for pid, marker in processes if _running(pid, marker)]
    for pid, _marker in running:
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    left = running
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [(pid, marker) for pid, marker in left if _running(pid, marker)]
    for pid, _marker in left:
        os.kill(pid, signal.SIGKILL)
    return [pid for pid, _marker in running]


def recorded_cluster(base_dir: Path) -> dict[str, object] | None:
    """The state ``talos cluster up`` left in ``base_dir``, if any."""
    path = base_dir / STATE_FILE
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return data if isinstance(data, dict) else None


def recorded_alive(state: dict[str, object]) -> list[str]:
    """Servers of a recorded cluster that are still running (their ids)."""
    servers = state.get("servers", [])
    assert isinstance(servers, list)
    return [s["id"] for s in servers if s.get("pid") and _running(int(s["pid"]), f"--server-id {s['id']}")]


def stop_recorded_cluster(base_dir: Path) -> list[str]:
    """Stop what ``cluster.json`` in ``base_dir`` lists, servers first; returns what was stopped."""
    state = recorded_cluster(base_dir)
    if state is None:
        return []
    stopped = []
    servers = state.get("servers", [])
    assert isinstance(servers, list)
    # Servers first, all at once (their graceful shutdown still needs ZooKeeper and HDFS), then the services.
    recorded = [(int(s["pid"]), f"--server-id {s['id']}", f"server {s['id']}") for s in servers if s.get("pid")]
    processes = state.get("processes", {})
    envs = [entry.get("env") or {} for entry in processes.values()] if isinstance(processes, dict) else []
    wait_s = max([shutdown_wait_s({**os.environ, **env}) for env in envs] or [shutdown_wait_s()])
    ended = _terminate([(pid, marker) for pid, marker, _name in recorded], timeout=wait_s)
    stopped += [name for pid, _marker, name in recorded if pid in ended]
    services: list[tuple[int, str, str]] = []
    hdfs = state.get("hdfs")
    if isinstance(hdfs, dict):
        for role in ("datanode", "namenode"):
            pid = hdfs.get(f"{role}_pid")
            if pid:
                services.append((int(pid), str(base_dir.resolve() / "hdfs"), role))
    zookeeper = state.get("zookeeper")
    zk_pid = zookeeper.get("pid") if isinstance(zookeeper, dict) else None
    if zk_pid:
        services.append((int(zk_pid), str(base_dir.resolve() / "zookeeper"), "zookeeper"))
    ended = _terminate([(pid, marker) for pid, marker, _name in services])
    stopped += [name for pid, _marker, name in services if pid in ended]
    (base_dir / STATE_FILE).unlink(missing_ok=True)
    return stopped


def relaunch(base_dir: Path, name: str) -> int:
    """Start the recorded process ``name`` (``zookeeper``, ``datanode``, ``server:s1`` …) again, detached,
    with its recorded command line; records and returns the new PID."""
    path = base_dir / STATE_FILE
    state = json.loads(path.read_text())
    entry = state["processes"][name]
    with open(entry["log"], "ab") as log:
        process = subprocess.Popen(
            entry["argv"],
            env={**os.environ, **entry.get("env", {})},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    entry["pid"] = process.pid
    if name.startswith("server:"):
        for server in state["servers"]:
            if f"server:{server['id']}" == name:
                server["pid"] = process.pid
    elif name in ("namenode", "datanode") and state.get("hdfs"):
        state["hdfs"][f"{name}_pid"] = process.pid
    elif name == "zookeeper":
        state["zookeeper"]["pid"] = process.pid
    path.write_text(json.dumps(state, indent=2))
    return process.pid
