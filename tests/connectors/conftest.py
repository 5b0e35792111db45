"""Connector tests: a real Talos standalone server, the session's real HDFS and a real search server, and
``talos connect run`` as a real process that the tests kill -9 and restart."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from server.devservices import ManagedProcess, SearchServer, free_port, wait_until
from tests.helpers import running_standalone


@pytest.fixture(scope="module")
def talos_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_standalone(tmp_path_factory.mktemp("talos")) as server:
        yield server.url


@pytest.fixture(scope="session")
def search(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SearchServer]:
    """A real search server (osmem-server) for the session, stopped by PID."""
    server = SearchServer(tmp_path_factory.mktemp("search"))
    try:
        yield server.start()
    finally:
        server.stop()


_names = itertools.count()


@pytest.fixture
def name() -> str:
    """A fresh name per test (topics, connectors, paths, indices)."""
    return f"c{os.getpid()}x{next(_names)}"


def one_connector(name: str, kind: str, settings: dict[str, Any], *, tasks: int = 1) -> dict[str, Any]:
    """A runner configuration of one connector ``name`` whose topic is also ``name`` (status every second)."""
    connector: dict[str, Any] = {"name": name, "type": kind, "tasks": tasks, "config": settings}
    if kind.endswith("-sink"):
        connector["topics"] = [name]
    else:
        connector["topic"] = name
    return {"status_interval_s": 1, "connectors": [connector]}


def talos_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``talos ARGS`` in a subprocess, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "talos.cli", *args], capture_output=True, text=True, timeout=60, check=False
    )


class ConnectProcess:
    """``talos connect run CONFIG`` as a subprocess with a status port; stopped by PID."""

    def __init__(self, workdir: Path, url: str, config: dict[str, Any]) -> None:
        self.workdir = workdir
        self.url = url
        self.config_path = workdir / "connect.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.runs = 0
        self.process: ManagedProcess | None = None
        self.port = 0

    def start(self, *, wait: bool = True) -> ConnectProcess:
        """Start; with ``wait``, return once its status endpoint answers."""
        self.runs += 1
        self.port = free_port()
        argv = [sys.executable, "-m", "talos.cli", "connect", "run", str(self.config_path), "--url", self.url]
        argv += ["--status-port", str(self.port)]
        self.process = ManagedProcess("connect", argv, log_path=self.workdir / f"connect-{self.runs}.log")
        self.process.start()
        if wait:
            wait_until(self._up, timeout=30, what="talos connect run's status endpoint")
        return self

    def wait(self, timeout: float = 60.0) -> int:
        """Until it exits by itself; the exit code."""
        assert self.process is not None and self.process.process is not None
        code = self.process.process.wait(timeout)
        self.process = None
        return code

    def _up(self) -> bool:
        assert self.process is not None
        self.process.check_alive()
        self.status()
        return True

    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/status", timeout=5) as answer:
            return json.loads(answer.read())  # type: ignore[no-any-return]

    def tasks(self) -> list[dict[str, Any]]:
        return [task for connector in self.status()["connectors"] for task in connector["tasks"]]

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process = None

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM; the exit code."""
        assert self.process is not None and self.process.process is not None
        child = self.process.process
        child.send_signal(signal.SIGTERM)
        code = child.wait(timeout)
        self.process = None
        return code

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.workdir.glob("connect-*.log")))

    def close(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None


@pytest.fixture
def connect_runner(tmp_path: Path) -> Iterator[Any]:
    """A factory of :class:`ConnectProcess`; every one is stopped by PID at the end, also on failure."""
    made: list[ConnectProcess] = []

    def make(url: str, config: dict[str, Any]) -> ConnectProcess:
        workdir = tmp_path / f"runner{len(made)}"
        workdir.mkdir()
        runner = ConnectProcess(workdir, url, config)
        made.append(runner)
        return runner

    try:
        yield make
    finally:
        for runner in made:
            runner.close()


class Feeder:
    """Background work that keeps new input arriving while a crash loop runs (a thread, stopped by ``stop``)."""

    def __init__(self, step: Any, interval_s: float = 0.05) -> None:
        import threading

        self._step = step
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            while not self._stop.wait(self._interval_s):
                self._step()
        except BaseException as exc:
            self.error = exc

    def __enter__(self) -> Feeder:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise self.error


def crash_loop(runner: ConnectProcess, *, kills: int, progress: Any, seed: int, max_extra_s: float = 0.8) -> list[int]:
    """Start the runner, wait until it has made progress, let it run a random while more, kill -9 it;
    ``kills`` times. Every kill therefore lands while it is working. Returns the progress at each kill."""
    import random
    import time

    rng = random.Random(seed)
    at_kill = []
    for _ in range(kills):
        before = progress()
        runner.start()
        wait_until(lambda b=before: progress() > b, timeout=60, what="the connector to make progress", interval=0.05)
        time.sleep(rng.uniform(0.0, max_extra_s))
        runner.kill()
        at_kill.append(progress())
    return at_kill
