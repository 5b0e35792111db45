"""A child process owned by PID: started in its own session, stopped by signal to that PID only."""

from __future__ import annotations

import os
import random
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = [
    "ManagedProcess",
    "ServiceError",
    "free_port",
    "free_port_range",
    "in_netns",
    "shutdown_wait_s",
    "wait_http_ready",
    "wait_until",
]

# A Talos server exits by its shutdown deadline after SIGTERM (shutdown_timeout_s, server/config.py), stuck or not;
# its stopper waits that long and this much more before SIGKILL.
SHUTDOWN_SLACK_S = 5.0


def shutdown_wait_s(env: Mapping[str, str] | None = None) -> float:
    """Seconds to wait after SIGTERM for a Talos server started with ``env`` before SIGKILL: its shutdown
    deadline (``TALOS_SHUTDOWN_TIMEOUT_S``, default 15 s) and a slack."""
    raw = (os.environ if env is None else env).get("TALOS_SHUTDOWN_TIMEOUT_S", "")
    try:
        deadline = float(raw) if raw.strip() else 15.0
    except ValueError:
        deadline = 15.0
    return deadline + SHUTDOWN_SLACK_S


class ServiceError(RuntimeError):
    """A development service could not be prepared, started or reached."""


def in_netns(netns: str | None, argv: Sequence[str]) -> list[str]:
    """``argv`` run inside the Linux network namespace ``netns`` (``ip netns exec`` keeps the PID), or as is."""
    return ["ip", "netns", "exec", netns, *argv] if netns else list(argv)


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_port_range(count: int, *, low: int = 20000, high: int = 30000) -> int:
    """The first of ``count`` consecutive ports that are free on 127.0.0.1 now, below the kernel's range of
    ephemeral ports (so the ports other services are handed by :func:`free_port` cannot collide)."""
    for base in range(low + random.randrange(0, high - low - count, count), high - count, count):
        sockets = []
        try:
            for port in range(base, base + count):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise ServiceError(f"no {count} consecutive free ports in {low}..{high}")


def wait_until(check: Callable[[], bool], *, timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise ServiceError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class ManagedProcess:
    """One service process; its output goes to ``log_path``."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.cwd = cwd
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self.process is None:
            raise ServiceError(f"{self.name} is not running")
        return self.process.pid

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check_alive(self) -> None:
        if not self.alive():
            raise ServiceError(f"{self.name} exited; last lines of {self.log_path}:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def signal(self, sig: signal.Signals) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        """SIGTERM without waiting, so that several processes shut down at once (then :meth:`stop` each)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)  # a paused child cannot handle SIGTERM
            self.process.terminate()

    def wait(self, timeout: float) -> int:
        """The exit status once the process has ended (negative: the signal that ended it), reaped; raises
        ``subprocess.TimeoutExpired`` if it still runs after ``timeout``."""
        if self.process is None:
            raise ServiceError(f"{self.name} is not running")
        return self.process.wait(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; always reaps the child."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None


def wait_http_ready(
    process: ManagedProcess, url: str, *, timeout: float, what: str, context: ssl.SSLContext | None = None
) -> None:
    """Until ``GET url`` answers 200; fails at once (with the log's tail) if the process exits. ``context``: for
    an ``https://`` URL."""

    def ready() -> bool:
        process.check_alive()
        with urllib.request.urlopen(url, timeout=2, context=context) as answer:
            return bool(answer.status == 200)

    wait_until(ready, timeout=timeout, what=what)
