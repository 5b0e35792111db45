"""Faults for ``talos verify --faults local``, on a cluster that ``talos cluster up`` started.

In rotation, one at a time: ``kill -9`` a server and start it again after a while (sometimes inside
``reassign_delay``, so its partitions stay; sometimes after it, so they move and move back); ``SIGSTOP`` a
server for longer than its ZooKeeper session plus ``reassign_delay`` (split brain), then ``SIGCONT``;
restart ZooKeeper; restart the HDFS DataNode. Processes are found and restarted from ``cluster.json``.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from server.devservices._cluster import relaunch

__all__ = ["LocalFaults"]


class LocalFaults:
    def __init__(self, base_dir: Path, *, say: Callable[[str], None] = print, pause_s: float = 3.0) -> None:
        state_file = base_dir / "cluster.json"
        if not state_file.exists():
            raise FileNotFoundError(f"{state_file} not found: --faults local needs a cluster from `talos cluster up`")
        self.base_dir = base_dir
        self.say = say
        self.pause_s = pause_s  # quiet time between faults
        settings = json.loads(state_file.read_text()).get("settings", {})
        self.session_s = float(settings.get("zk_session_timeout_s", 10.0))
        self.reassign_s = float(settings.get("reassign_delay_s", 30.0))

    def _state(self) -> dict[str, dict[str, object]]:
        processes = json.loads((self.base_dir / "cluster.json").read_text())["processes"]
        assert isinstance(processes, dict)
        return processes

    def _pid(self, name: str) -> int:
        return int(str(self._state()[name]["pid"]))

    def _servers(self) -> list[str]:
        return sorted(name for name in self._state() if name.startswith("server:"))

    def _signal(self, name: str, sig: signal.Signals) -> None:
        entry = self._state()[name]
        pid = int(str(entry["pid"]))
        try:  # only the process we recorded: a PID can be reused once it is gone
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            return
        if [part.decode(errors="replace") for part in cmdline] != entry["argv"]:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)

    def _wait_gone(self, name: str, timeout: float = 20.0) -> None:
        pid = self._pid(name)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            if Path(f"/proc/{pid}/status").exists() and "zombie" in Path(f"/proc/{pid}/status").read_text():
                return
            time.sleep(0.1)
        self._signal(name, signal.SIGKILL)

    def kill_and_restart(self, name: str, down_s: float) -> None:
        self.say(f"fault: kill -9 {name}, start it again after {down_s:.0f}s")
        self._signal(name, signal.SIGKILL)
        self._wait_gone(name)
        time.sleep(down_s)
        relaunch(self.base_dir, name)

    def pause(self, name: str) -> None:
        paused = self.session_s + self.reassign_s + 2
        self.say(f"fault: SIGSTOP {name} for {paused:.0f}s (past its ZooKeeper session: others take over)")
        self._signal(name, signal.SIGSTOP)
        time.sleep(paused)
        self._signal(name, signal.SIGCONT)

    def restart(self, name: str, down_s: float = 1.0) -> None:
        self.say(f"fault: restart {name}")
        self._signal(name, signal.SIGTERM)
        self._wait_gone(name)
        time.sleep(down_s)
        relaunch(self.base_dir, name)

    def __call__(self, stop: threading.Event) -> None:
        """Inject faults until ``stop`` is set."""
        plan: list[Callable[[], None]] = []
        for index, server in enumerate(self._servers()):
            plan.append(functools.partial(self.kill_and_restart, server, 1.0))  # back inside reassign_delay
            plan.append(functools.partial(self.pause, server))
            if index == 0:
                plan.append(functools.partial(self.restart, "zookeeper"))
                if "datanode" in self._state():
                    plan.append(functools.partial(self.restart, "datanode", 2.0))
            moved = self.session_s + self.reassign_s + 2  # its partitions move away, and back when it returns
            plan.append(functools.partial(self.kill_and_restart, server, moved))
        for fault in itertools.cycle(plan):
            if stop.wait(self.pause_s):
                return
            fault()
