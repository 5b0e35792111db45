"""A real ``talos standalone`` process per test module (or per test, for crash tests), stopped by PID."""

from __future__ import annotations

import itertools
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from talos.devservices import ManagedProcess, free_port, wait_until

_names = itertools.count()


class StandaloneServer:
    def __init__(
        self, data_dir: Path, *, port: int | None = None, args: tuple[str, ...] = (), env: dict[str, str] | None = None
    ) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.args = args
        self.env = env
        self.process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> StandaloneServer:
        import os

        argv = [
            sys.executable,
            "-m",
            "talos.cli",
            "standalone",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--log-format",
            "text",
            *self.args,
        ]
        self.process = ManagedProcess(
            "talos",
            argv,
            log_path=self.data_dir.parent / f"server-{self.port}.log",
            env={**os.environ, **(self.env or {})},
        )
        self.process.start()

        def ready() -> bool:
            assert self.process is not None
            self.process.check_alive()
            with urllib.request.urlopen(f"{self.url}/readyz", timeout=2) as answer:
                return bool(answer.status == 200)

        wait_until(ready, timeout=60, what=f"talos standalone on {self.url}")
        return self

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneServer]:
    instance = StandaloneServer(tmp_path_factory.mktemp("standalone") / "data")
    try:
        yield instance.start()
    finally:
        instance.stop()


@pytest.fixture
def topic_name() -> str:
    """A fresh topic name per test (the module's server is shared)."""
    return f"t{next(_names)}"
