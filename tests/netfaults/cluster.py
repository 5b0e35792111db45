"""A 3-server Talos cluster on a :class:`Network`: each server in its own namespace, ZooKeeper in another,
HDFS in a third (so that either can be cut alone; and the NameNode records a DataNode by the source address
of its connection, which must be the DataNode's own), the clients in the root namespace.
Every process is stopped by PID in ``stop``, also after a failed ``start``."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from server.devservices import ClusterServer, HdfsCluster, ZooKeeperServer, free_port, wait_until
from tests.cluster.conftest import FAST
from tests.netfaults.network import Network

SERVERS = ("s1", "s2", "s3")
GROUPS = {**{s: [s] for s in SERVERS}, "zookeeper": ["zookeeper"], "hdfs": ["hdfs"]}
PORT = 8080  # every server has a namespace, so the same port each

TOKEN = f"netfaults-admin-{secrets.token_hex(16)}"
# The other cluster tests' short timers (a ZooKeeper session of 3 s, reassignment 4 s after it ends).
SETTINGS = dataclasses.replace(FAST, admin_token=TOKEN)


class NetCluster:
    def __init__(self, base_dir: Path, net: Network) -> None:
        self.net = net
        self.base_dir = base_dir
        self.zookeeper = ZooKeeperServer(
            base_dir / "zookeeper", host=net.address("zookeeper"), netns=net.netns("zookeeper"), port=free_port()
        )
        self.hdfs = HdfsCluster(base_dir / "hdfs", host=net.address("hdfs"), netns=net.netns("hdfs"))
        self.servers = {
            name: ClusterServer(
                name,
                PORT,
                zk=self.zookeeper.address,
                storage=f"{self.hdfs.url}/talos",
                log_dir=base_dir / "logs",
                settings=SETTINGS,
                host=net.address(name),
                netns=net.netns(name),
            )
            for name in SERVERS
        }
        self._datanode_log_read = 0  # how far heal_block_recovery has looked in the DataNode's log
        self.datanode_restarts = 0

    def start(self) -> NetCluster:
        try:
            self.zookeeper.start()
            self.hdfs.start()
            for server in self.servers.values():
                server.start(wait=False)
            self.wait_healthy(timeout=120)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for server in self.servers.values():
            server.terminate()
        for server in self.servers.values():
            server.stop()
        self.hdfs.stop()
        self.zookeeper.stop()

    def get(self, server: str, path: str, *, timeout: float = 5.0) -> dict[str, object]:
        request = urllib.request.Request(
            f"{self.servers[server].url}{path}", headers={"authorization": f"Bearer {TOKEN}"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            data = json.load(answer)
        return data if isinstance(data, dict) else {}

    def ring(self, via: str) -> set[str]:
        ring = self.get(via, "/v1/cluster").get("ring", {})
        members = ring.get("members", {}) if isinstance(ring, dict) else {}
        return {str(m) for m in members}

    def stacks_and_logs(self, lines: int = 120) -> str:
        """For a run that failed: the end of every server's log (requests and stack dumps left out), then what
        each thread of each live server is doing (``kill -USR1``: its stacks go to its log), one line a thread."""
        paths = {name: server.log_dir / f"server-{name}.log" for name, server in self.servers.items()}
        sizes = {name: path.stat().st_size if path.exists() else 0 for name, path in paths.items()}
        for server in self.servers.values():
            if server.alive():
                with contextlib.suppress(OSError):
                    os.kill(server.pid, signal.SIGUSR1)
        time.sleep(1)
        out = []
        for name, path in paths.items():
            if not path.exists():
                out.append(f"===== {name}: no log")
                continue
            text = path.read_bytes()
            before = text[: sizes[name]].decode(errors="replace").splitlines()
            kept = [line for line in before if "talos.access" not in line and not _stack_line(line)][-lines:]
            out.append(f"===== {name} (alive: {self.servers[name].alive()}): the end of {path}\n" + "\n".join(kept))
            dump = text[sizes[name] :].decode(errors="replace")
            out.append(f"----- {name}: threads (innermost frame)\n" + _threads(dump))
        return "\n".join(out)

    def owners(self, topic: str, via: str = "s1") -> dict[int, str]:
        """Partition → the server that owns it, as ``via`` sees it now."""
        entries = self.get(via, f"/v1/routes?topic={topic}").get("topics", {})
        table = entries.get(topic, []) if isinstance(entries, dict) else []
        return {int(e["partition"]): str(e["owner"]) for e in table}

    def heal_block_recovery(self) -> bool:
        """Restart the DataNode if HDFS 2.7.3's known fault struck since the last look (docs/storage.md: a lease
        recovery that stopped a writer inside a sync leaves a block whose every later recovery fails, "File length
        mismatched" in the DataNode's log, until the DataNode restarts: the operator's remedy). True if it did. A
        fault outside Talos, which would otherwise leave its partition unloadable for every later run."""
        log = self.hdfs.base_dir / "datanode.log"  # appended to across restarts
        with log.open("rb") as reader:
            reader.seek(self._datanode_log_read)
            stuck = b"File length mismatched" in reader.read()
            self._datanode_log_read = reader.tell()
        if not stuck:
            return False
        print("the DataNode's block recovery is stuck (HDFS 2.7.3, 'File length mismatched'): restarting it")
        self.hdfs.stop_datanode()
        self.hdfs.start_datanode()
        self.hdfs.wait_ready()
        self.datanode_restarts += 1
        return True

    def wait_healthy(self, *, timeout: float) -> None:
        """Every server running, ready, and in every server's ring (after a fault: the cluster healed), on an HDFS
        whose DataNode is not stuck in HDFS 2.7.3's known fault (:meth:`heal_block_recovery`)."""
        self.heal_block_recovery()
        for server in self.servers.values():
            if not server.alive():  # a crash under a fault is a finding; the next fault needs all three
                server.start(wait=False)
        for server in self.servers.values():
            server.wait_ready(timeout)
        wait_until(
            lambda: all(self.ring(s) == set(SERVERS) for s in SERVERS),
            timeout=timeout,
            what="all three servers in every ring",
            interval=0.25,
        )


@dataclasses.dataclass
class Silence:
    """A time ``server`` gave no answer to ``/healthz`` within the watch's timeout: from the start of the first ask
    it did not answer in time to the next answer in time (or the end of the watch: ``ended`` None until then)."""

    server: str
    began: float  # time.monotonic()
    ended: float | None = None
    asks: int = 0  # asks not answered in time
    error: str = ""  # the last of them

    def seconds(self, now: float) -> float:
        return (self.ended if self.ended is not None else now) - self.began


class HealthWatch:
    """Asks every live server's ``/healthz`` about once a second (``NetCluster.get``, ``timeout_s``) from the
    clients' namespace (this process), one thread per server so that a silent one does not hold up the others'
    asks, and records each :class:`Silence`. A server under :meth:`excuse` (cut from the clients on purpose) is not
    asked, and an ask that overlapped an excuse does not count. Use it as a context manager."""

    def __init__(self, cluster: NetCluster, *, timeout_s: float = 2.0, interval_s: float = 1.0) -> None:
        self.cluster = cluster
        self.timeout_s = timeout_s
        self.interval_s = interval_s
        self.silences: list[Silence] = []
        self.asks = dict.fromkeys(cluster.servers, 0)  # answered in time
        self.began = 0.0
        self._open: dict[str, Silence] = {}
        self._excused: dict[str, int] = {}  # server → excuses in force
        self._excuses: dict[str, int] = {}  # server → excuses begun (an ask that saw it change overlapped one)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> HealthWatch:
        self.began = time.monotonic()
        for server in self.cluster.servers:
            thread = threading.Thread(target=self._watch, args=(server,), name=f"healthz-{server}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(self.timeout_s + 10)
        with self._lock:
            now = time.monotonic()
            for silence in self._open.values():
                silence.ended = now
            self._open.clear()

    @contextlib.contextmanager
    def excuse(self, server: str) -> Iterator[None]:
        """While in the block, ``server`` is cut from the clients on purpose: its silence is not recorded (and a
        silence of it that was open ends when the excuse begins)."""
        with self._lock:
            self._excused[server] = self._excused.get(server, 0) + 1
            self._excuses[server] = self._excuses.get(server, 0) + 1
            self._close(server, time.monotonic())
        try:
            yield
        finally:
            with self._lock:
                self._excused[server] -= 1

    def _close(self, server: str, at: float) -> None:
        silence = self._open.pop(server, None)
        if silence is not None:
            silence.ended = at

    def _excused_now(self, server: str) -> bool:
        return self._excused.get(server, 0) > 0

    def _watch(self, server: str) -> None:
        process = self.cluster.servers[server]
        while not self._stop.is_set():
            asked = time.monotonic()
            with self._lock:
                skip = self._excused_now(server)
                excuses = self._excuses.get(server, 0)
            if not skip and process.alive():  # a crashed server is a finding of the run, not a silence here
                error = ""
                try:
                    answer = self.cluster.get(server, "/healthz", timeout=self.timeout_s)
                    if answer.get("status") != "ok":
                        error = f"answered {answer}"
                except Exception as exc:  # timeouts, refused or reset connections, HTTP errors
                    error = repr(exc)
                answered = time.monotonic()
                if not error and answered - asked > self.timeout_s:
                    error = f"answered after {answered - asked:.1f} s"
                with self._lock:
                    if not self._excused_now(server) and self._excuses.get(server, 0) == excuses:
                        self._record(server, asked, answered, error)
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - asked)))

    def _record(self, server: str, asked: float, answered: float, error: str) -> None:
        silence = self._open.get(server)
        if error:
            if silence is None:
                silence = self._open[server] = Silence(server, asked)
                self.silences.append(silence)
            silence.asks += 1
            silence.error = error
            if "answered after" in error:  # late, but it answered: the silence ends with that answer
                self._close(server, answered)
        else:
            self.asks[server] += 1
            self._close(server, answered)

    def longest_s(self) -> dict[str, float]:
        """Per server, its longest silence so far (0.0: always answered in time)."""
        now = time.monotonic()
        with self._lock:
            longest = dict.fromkeys(self.cluster.servers, 0.0)
            for silence in self.silences:
                longest[silence.server] = max(longest[silence.server], round(silence.seconds(now), 1))
            return longest

    def report(self, since: float) -> list[dict[str, object]]:
        """The silences, each as JSON (times in seconds after ``since``, a ``time.monotonic()``)."""
        now = time.monotonic()
        with self._lock:
            return [
                {
                    "server": s.server,
                    "began_s": round(s.began - since, 1),
                    "seconds": round(s.seconds(now), 1),
                    "asks": s.asks,
                    "error": s.error[:300],
                    "open": s.ended is None,
                }
                for s in self.silences
            ]


def _stack_line(line: str) -> bool:
    return line.startswith(("  File ", "Thread 0x", "Current thread 0x")) or line.strip() == ""


def _threads(dump: str) -> str:
    """Each thread of a faulthandler dump, by its innermost frame (idle pool threads show as their wait)."""
    lines, out = dump.splitlines(), []
    for index, line in enumerate(lines):
        if line.startswith(("Thread 0x", "Current thread 0x")) and index + 1 < len(lines):
            out.append(f"{line.split(' (')[0]}: {lines[index + 1].strip()}")
    return "\n".join(out)
