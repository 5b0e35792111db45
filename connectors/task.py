"""What every connector task shares: its status, and the supervisor that restarts it after a failure.

A task's ``run(stop)`` does the work until ``stop`` is set (or, for a finite source, until the end). Any
exception is a failure: the supervisor records it in the status, waits (1 s, doubling up to 30 s) and
starts the task again. A restart resumes from what was checkpointed, so an unreachable target or a
broken Talos connection costs time, not records.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["Stopped", "Task", "TaskStatus", "backoff_s", "supervise"]

log = logging.getLogger("talos.connect")


class Stopped(Exception):
    """The runner is stopping: leave the work where it is (nothing unacknowledged is checkpointed)."""


@dataclass
class TaskStatus:
    connector: str
    task: int
    state: str = "starting"  # starting | running | retrying | finished | stopped
    records: int = 0  # sinks: written to the target; sources: written to the topic
    skipped: int = 0  # sources: found in the topic after a crash, not written again; sinks: refused documents
    restarts: int = 0
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    @property
    def name(self) -> str:
        return f"{self.connector}/{self.task}"

    def to_json(self) -> dict[str, Any]:
        return {
            "connector": self.connector,
            "task": self.task,
            "state": self.state,
            "records": self.records,
            "skipped": self.skipped,
            "restarts": self.restarts,
            "error": self.error,
            **self.detail.copy(),  # copied at once: the task's thread may add keys meanwhile
        }


class Task(Protocol):
    def run(self, stop: threading.Event) -> None: ...


def backoff_s(attempt: int) -> float:
    return float(min(2**attempt, 30))


def supervise(make: Callable[[], Task], status: TaskStatus, stop: threading.Event) -> None:
    """Run the task until ``stop``; restart it with backoff after each failure."""
    attempt = 0
    while not stop.is_set():
        began = time.monotonic()
        try:
            status.state = "running"
            make().run(stop)
        except Stopped:
            break
        except Exception as exc:
            if stop.is_set():
                break
            if time.monotonic() - began > 60:
                attempt = 0  # it had been working: start the backoff over
            delay = backoff_s(attempt)
            attempt += 1
            status.restarts += 1
            status.state = "retrying"
            status.error = _describe(exc)
            log.error("%s failed: %s; restarting in %.0f s", status.name, status.error, delay)
            log.debug("%s failure", status.name, exc_info=True)
            stop.wait(delay)
            continue
        if not stop.is_set():
            status.state = "finished"
            log.info("%s finished", status.name)
            return
    status.state = "stopped"


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]
