"""Linux network namespaces joined by a bridge, and the faults a network can have, for real processes.

``Network`` makes one namespace per group of nodes (each node is one private address, 10.213.X.Y/24), a
veth pair from each namespace to a bridge in the root namespace, and gives the root namespace the address
of the node ``clients`` on that bridge (so the test process and ``talos verify`` are the clients). Faults
are context managers that add nftables tables to the namespaces involved and delete them on exit:
``cut`` (both ways), ``cut_one_way``, ``lossy`` (random loss on every link), ``delay`` (every new
connection through a delaying userspace proxy in its source namespace: ``tc netem`` is not in these
kernels) and ``flap`` (cut and heal in turn). ``close`` removes every namespace, link and table this
run made, which all carry the run's prefix (:attr:`Network.prefix`), so a leak check can look for it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import secrets
import selectors
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from server.devservices import free_port

__all__ = ["PREFIX", "Network", "NetworkError", "leftovers", "missing_tools"]

PREFIX = "tnf"  # every namespace, link and table of every run starts with it
CLIENTS = "clients"  # the node that is the root namespace's address on the bridge
MARK = 0x7A1  # the delaying proxies' own connections carry it, so the redirect leaves them alone
REPO = Path(__file__).resolve().parents[2]


class NetworkError(RuntimeError):
    pass


def missing_tools() -> str | None:
    """Why this machine cannot run the harness (not root, no ``ip`` or ``nft``), or None."""
    if os.geteuid() != 0:
        return "network namespaces and nftables need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install iproute2 nftables)"
    return None


def sh(*argv: str, netns: str | None = None, stdin: str | None = None) -> str:
    command = ["ip", "netns", "exec", netns, *argv] if netns else list(argv)
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise NetworkError(f"{' '.join(command)}: {done.stderr.strip()}\n{stdin or ''}")
    return done.stdout


def leftovers(prefix: str) -> list[str]:
    """Namespaces, links and root-namespace tables whose names start with ``prefix``."""
    found = [f"netns {line.split()[0]}" for line in sh("ip", "netns", "list").splitlines() if line.startswith(prefix)]
    for line in sh("ip", "-o", "link", "show").splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(prefix):
            found.append(f"link {name}")
    for line in sh("nft", "list", "tables").splitlines():
        if line.split()[-1].startswith(prefix):
            found.append(line)
    return found


@dataclass(frozen=True)
class Node:
    name: str
    address: str
    netns: str | None  # None: the root namespace


class Network:
    """``groups``: namespace name → the nodes in it, e.g. ``{"s1": ["s1"], "services": ["zookeeper", "hdfs"]}``."""

    def __init__(self, groups: Mapping[str, Sequence[str]]) -> None:
        self.run_id = secrets.token_hex(3)
        self.prefix = f"{PREFIX}{self.run_id}"
        self.subnet_id = _free_subnet()
        self.subnet = f"10.213.{self.subnet_id}.0/24"
        self.bridge = f"{self.prefix}br"
        self.namespaces = {group: f"{PREFIX}-{self.run_id}-{group}" for group in groups}
        self.nodes = {CLIENTS: Node(CLIENTS, self._address(1), None)}
        host = 10
        for group, names in groups.items():
            for name in names:
                self.nodes[name] = Node(name, self._address(host), self.namespaces[group])
                host += 1
        self._tables = itertools.count()
        self._proxies: list[subprocess.Popen[str]] = []

    def _address(self, host: int) -> str:
        return f"10.213.{self.subnet_id}.{host}"

    def address(self, node: str) -> str:
        return self.nodes[node].address

    def netns(self, node: str) -> str | None:
        return self.nodes[node].netns

    def all_netns(self) -> list[str | None]:
        return [None, *self.namespaces.values()]

    # ---------------------------------------------------------------- building and tearing down

    def create(self) -> Network:
        try:
            sh("ip", "link", "add", self.bridge, "type", "bridge")
            sh("ip", "addr", "add", f"{self.address(CLIENTS)}/24", "dev", self.bridge)
            sh("ip", "link", "set", self.bridge, "up")
            for index, netns in enumerate(self.namespaces.values()):
                outside, inside = f"{self.prefix}v{index}", f"{self.prefix}p{index}"
                sh("ip", "netns", "add", netns)
                sh("ip", "link", "add", outside, "type", "veth", "peer", "name", inside, "netns", netns)
                sh("ip", "link", "set", outside, "master", self.bridge, "up")
                sh("ip", "link", "set", "lo", "up", netns=netns)
                for node in self.nodes.values():
                    if node.netns == netns:
                        sh("ip", "addr", "add", f"{node.address}/24", "dev", inside, netns=netns)
                sh("ip", "link", "set", inside, "up", netns=netns)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Remove all this run made; safe to call twice, and after a half-made ``create``."""
        self._stop_proxies()
        for netns in self.namespaces.values():
            with contextlib.suppress(NetworkError):
                sh("ip", "netns", "delete", netns)  # takes its tables and its end of the veth pair along
        for line in sh("nft", "list", "tables").splitlines():
            family, name = line.split()[1:3]
            if name.startswith(self.prefix):
                with contextlib.suppress(NetworkError):
                    sh("nft", "delete", "table", family, name)
        for line in sh("ip", "-o", "link", "show").splitlines():
            name = line.split(":")[1].strip().split("@")[0]
            if name.startswith(self.prefix):
                with contextlib.suppress(NetworkError):
                    sh("ip", "link", "delete", name)

    def __enter__(self) -> Network:
        return self.create()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def exec_argv(self, node: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run in ``node``'s namespace."""
        netns = self.netns(node)
        return ["ip", "netns", "exec", netns, *argv] if netns else list(argv)

    # ---------------------------------------------------------------- faults

    @contextlib.contextmanager
    def _rules(self, scripts: Sequence[tuple[str | None, str]]) -> Iterator[None]:
        """nftables tables (``(netns, body)``: the chains of one ``inet`` table), deleted on exit."""
        made: list[tuple[str | None, str]] = []
        try:
            for netns, body in scripts:
                name = f"{self.prefix}f{next(self._tables)}"
                sh("nft", "-f", "-", netns=netns, stdin=f"table inet {name} {{\n{body}\n}}\n")
                made.append((netns, name))
            yield
        finally:
            for netns, name in made:
                with contextlib.suppress(NetworkError):
                    sh("nft", "delete", "table", "inet", name, netns=netns)

    def _addresses(self, nodes: str | Sequence[str]) -> str:
        names = [nodes] if isinstance(nodes, str) else list(nodes)
        return "{ " + ", ".join(self.address(n) for n in names) + " }"

    @contextlib.contextmanager
    def cut(self, a: str, b: str | Sequence[str]) -> Iterator[None]:
        """No packet between ``a`` and any of ``b``, either way."""
        mine, theirs = self.address(a), self._addresses(b)
        body = (
            f"chain out {{\ntype filter hook output priority 0; policy accept;\n"
            f"ip saddr {mine} ip daddr {theirs} drop\n}}\n"
            f"chain in {{\ntype filter hook input priority 0; policy accept;\n"
            f"ip saddr {theirs} ip daddr {mine} drop\n}}"
        )
        with self._rules([(self.netns(a), body)]):
            yield

    @contextlib.contextmanager
    def cut_one_way(self, a: str, b: str | Sequence[str]) -> Iterator[None]:
        """Packets from ``a`` to ``b`` are dropped; from ``b`` to ``a`` they pass."""
        body = (
            f"chain out {{\ntype filter hook output priority 0; policy accept;\n"
            f"ip saddr {self.address(a)} ip daddr {self._addresses(b)} drop\n}}"
        )
        with self._rules([(self.netns(a), body)]):
            yield

    @contextlib.contextmanager
    def lossy(self, percent: int) -> Iterator[None]:
        """Every packet a namespace sends to another is dropped with probability ``percent`` %."""
        body = (
            f"chain out {{\ntype filter hook output priority 0; policy accept;\n"
            f"ip daddr {self.subnet} fib daddr type != local numgen random mod 100 < {percent} drop\n}}"
        )
        with self._rules([(netns, body) for netns in self.all_netns()]):
            yield

    @contextlib.contextmanager
    def delay(self, ms: float, jitter_ms: float = 0.0) -> Iterator[None]:
        """Every connection between namespaces goes through a proxy in its source namespace that delays each
        direction by ``ms ± jitter_ms``. Connections open before are reset (once they send), so that they
        reconnect through the proxies: a link's delay applies to all its traffic, not only new connections."""
        ports = {netns: free_port() if netns is None else 15999 for netns in self.all_netns()}
        scripts = [
            (
                netns,
                f"chain steer {{\ntype nat hook output priority -100; policy accept;\n"
                f"meta mark != {MARK} ip daddr {self.subnet} fib daddr type != local "
                f"meta l4proto tcp redirect to :{port}\n}}\n"
                # Connections this namespace opened before the proxy: reset, so they come back through it.
                f"chain older {{\ntype filter hook output priority 0; policy accept;\n"
                f"meta mark != {MARK} ip daddr {self.subnet} fib daddr type != local ct direction original "
                f"meta l4proto tcp reject with tcp reset\n}}",
            )
            for netns, port in ports.items()
        ]
        try:
            for netns, port in ports.items():
                self._start_proxy(netns, port, ms, jitter_ms)
            with self._rules(scripts):
                yield
        finally:
            self._stop_proxies()  # what still ran through them ends; it reconnects directly

    @contextlib.contextmanager
    def flap(self, a: str, b: str | Sequence[str], period_s: float) -> Iterator[list[float]]:
        """Cut ``a`` from ``b`` for ``period_s``, heal for ``period_s``, and so on until exit. Yields the list
        of times (``time.monotonic``) each cut began, filled as it runs."""
        stop = threading.Event()
        cuts: list[float] = []

        def flapping() -> None:
            while not stop.is_set():
                with self.cut(a, b):
                    cuts.append(time.monotonic())
                    stop.wait(period_s)
                stop.wait(period_s)

        thread = threading.Thread(target=flapping, name="netfaults-flap", daemon=True)
        thread.start()
        try:
            yield cuts
        finally:
            stop.set()
            thread.join(60)

    # ---------------------------------------------------------------- the delaying proxies

    def _start_proxy(self, netns: str | None, port: int, ms: float, jitter_ms: float) -> None:
        argv = [sys.executable, "-m", "tests.netfaults.proxy", "--port", str(port), "--mark", str(MARK)]
        argv += ["--delay-ms", str(ms), "--jitter-ms", str(jitter_ms)]
        command = ["ip", "netns", "exec", netns, *argv] if netns else argv
        process = subprocess.Popen(
            command, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        self._proxies.append(process)
        assert process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            if not selector.select(20) or process.stdout.readline().strip() != "listening":
                raise NetworkError(f"the delaying proxy in {netns or 'the root namespace'} did not start")

    def _stop_proxies(self) -> None:
        proxies, self._proxies = self._proxies, []
        for process in proxies:
            if process.poll() is None:
                process.terminate()
        for process in proxies:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _free_subnet() -> int:
    """A third octet X such that nothing on this machine uses 10.213.X.0/24 yet."""
    used = sh("ip", "-4", "-o", "addr", "show") + sh("ip", "-4", "route", "show")
    free = [x for x in range(256) if f"10.213.{x}." not in used]
    if not free:
        raise NetworkError("every 10.213.X.0/24 is in use")
    return random.choice(free)
