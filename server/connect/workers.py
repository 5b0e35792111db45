"""Every server's supervisor of the connector tasks the ring gives it: each task a ``talos connect run`` process.

A task's place is the ring's owner of the key ``__connector:<name>:<task>``, so tasks spread over the live servers
as partitions do and move when their server dies or leaves (after the ring's delayed reassignment). Each server
folds ``__connectors`` (read through the services, as any server's own read) about every second, and starts, stops
or restarts its tasks to match: a task runs while its connector is not paused, and is started again when its
configuration, its connector's generation or its own changed (``server.connect.state``).

Each task runs in a child process, ``python -m talos.cli connect run FILE --task NAME/INDEX``, against this
server's own URL and as the connector's tenant (the admin's token naming the tenant, which the servers take as that
tenant, never the admin). The server imports no connector code to run it, a task's crash or leak is its own, and
the child is killed with SIGKILL when the server dies (``--die-with-parent``): as when a machine fails.

Two runs of one task at once (a ring change seen at different moments by two servers) are safe: a sink's partitions
are held under its consumer group's time-limited locks, whose commits fence an old holder, and a source's work
under its lease and its named producer's epoch (docs/connectors.md, "Exactly once"). What moves is only who does the
work, never what is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from server import internal_topics
from server.broker import Broker
from server.connect.coordinator import CONNECTORS_TOPIC
from server.connect.state import Connector, Connectors
from server.errors import ApiError

__all__ = ["TaskState", "TaskWorkers", "task_key"]

log = logging.getLogger("talos.connect")

_STOP_GRACE_S: Final = 20.0  # a stopped task's sink writes and commits what it holds; then it is killed
_LOG_TAIL: Final = 4000


def task_key(name: str, task: int) -> str:
    """The ring key of a connector's task."""
    return f"__connector:{name}:{task}"


@dataclass(frozen=True, slots=True)
class _Spec:
    """What a task's process runs: a changed spec is a restart."""

    config: bytes
    tenant: str | None
    generation: tuple[int, int]


@dataclass
class _Child:
    spec: _Spec
    process: asyncio.subprocess.Process
    status_file: Path
    log_file: Path
    started: float = field(default_factory=time.monotonic)


@dataclass(frozen=True, slots=True)
class _Failure:
    """Why a task is not running under ``spec`` (a restart or a new configuration starts it at once), and when it is
    tried again (never, for a source that finished)."""

    spec: _Spec
    count: int
    retry_at: float
    why: str | None


@dataclass(frozen=True, slots=True)
class TaskState:
    """A task as its server sees it, in Kafka Connect's terms (``RUNNING``, ``FAILED``, ``PAUSED``, ``UNASSIGNED``;
    ``FINISHED``: a source that reached its end)."""

    state: str
    worker_id: str
    trace: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self, task: int) -> dict[str, Any]:
        out: dict[str, Any] = {"id": task, "state": self.state, "worker_id": self.worker_id, **self.detail}
        if self.trace:
            out["trace"] = self.trace
        return out


class TaskWorkers:
    def __init__(self, broker: Broker, *, interval_s: float = 1.0) -> None:
        self._broker = broker
        self._interval_s = interval_s
        self._known = Connectors()
        self._next = 0  # the offset of __connectors read up to
        self._children: dict[tuple[str, int], _Child] = {}
        self._stopping: dict[tuple[str, int], tuple[asyncio.Task[None], _Child]] = {}
        self._failures: dict[tuple[str, int], _Failure] = {}
        self._dir = Path(tempfile.mkdtemp(prefix="talos-connect-"))
        self._closed = False

    @property
    def worker_id(self) -> str:
        return self._broker.config.url

    async def run(self) -> None:
        while not self._closed:
            try:
                await self.refresh()
            except (ApiError, OSError) as exc:
                log.warning("connectors: %s; trying again", exc)
            except Exception:
                log.exception("connectors: the supervisor's pass failed; trying again")
            await asyncio.sleep(self._interval_s)

    async def refresh(self) -> None:
        """Read what changed in ``__connectors``, then start and stop this server's tasks to match it."""
        if self._broker.topic_now(CONNECTORS_TOPIC) is not None:
            changes = await internal_topics.read_all(self._broker, CONNECTORS_TOPIC, 0, start=self._next)
            for offset, name, value in changes:
                if name is not None:
                    self._known.apply(name, value)
                self._next = offset + 1
        wanted = self._wanted()
        for key, child in list(self._children.items()):
            if child.process.returncode is not None:
                self._exited(key, child)
            elif wanted.get(key, (None, None))[1] != child.spec:
                self._stop(key)
        for key, (connector, spec) in wanted.items():
            if key in self._children or key in self._stopping:
                continue
            failed = self._failures.get(key)
            if failed is not None and failed.spec == spec and time.monotonic() < failed.retry_at:
                continue
            await self._start(key, connector, spec)
        for key in list(self._failures):
            if key not in wanted:
                del self._failures[key]

    def _wanted(self) -> dict[tuple[str, int], tuple[Connector, _Spec]]:
        out = {}
        for connector in self._known.by_name.values():
            if connector.paused:
                continue
            config = orjson.dumps(dict(connector.config), option=orjson.OPT_SORT_KEYS)
            for task in range(connector.tasks):
                try:
                    local = self._broker.owner_of(task_key(connector.name, task)).local
                except ApiError:  # no ring yet, or this server stepped down: it runs nothing
                    local = False
                if local:
                    spec = _Spec(config, connector.tenant, connector.task_generation(task))
                    out[(connector.name, task)] = (connector, spec)
        return out

    async def _start(self, key: tuple[str, int], connector: Connector, spec: _Spec) -> None:
        name, task = key
        base = f"{name}-{task}"  # (not Path.with_suffix: a name may hold dots)
        try:
            from connectors.config import ConfigError
            from connectors.plugins import from_connect, to_runner_config
        except ImportError as exc:
            self._failed(key, spec, f"this server cannot run connectors: {exc} (install talos-mq[connect])")
            return
        try:
            runner_config = to_runner_config(from_connect(name, connector.config))
        except ConfigError as exc:
            self._failed(key, spec, str(exc))
            return
        config_file = self._dir / f"{base}.json"  # YAML reads JSON
        # Readable by this user only from the start: a search server's password may be in it.
        with open(config_file, "wb", opener=lambda path, flags: os.open(path, flags, 0o600)) as out:
            out.write(orjson.dumps(runner_config))
        status_file = self._dir / f"{base}.status.json"
        status_file.unlink(missing_ok=True)
        log_file = self._dir / f"{base}.log"
        command = [
            sys.executable, "-m", "talos.cli", "connect", "run", str(config_file),
            "--url", self._broker.config.url, "--task", f"{name}/{task}", "--status-file", str(status_file),
            "--die-with-parent", str(os.getpid()),
        ]  # fmt: skip
        with open(log_file, "wb") as out:
            process = await asyncio.create_subprocess_exec(
                *command, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out, env=self._environment(spec)
            )
        self._children[key] = _Child(spec, process, status_file, log_file)
        log.info("connector %s: task %d started (pid %d)", name, task, process.pid)

    def _environment(self, spec: _Spec) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("TALOS_TOKEN", "TALOS_AS_TENANT")}
        config = self._broker.config
        if config.admin_token:
            env["TALOS_TOKEN"] = config.admin_token
            if spec.tenant is not None:
                env["TALOS_AS_TENANT"] = spec.tenant  # the servers take the admin's token naming a tenant as it
        if config.tls_ca_file:
            env["TALOS_CA_FILE"] = config.tls_ca_file
        return env

    def _exited(self, key: tuple[str, int], child: _Child) -> None:
        del self._children[key]
        code = child.process.returncode
        if code == 0 and self._read_status(child).get("state") == "finished":
            self._failures[key] = _Failure(child.spec, 0, float("inf"), None)  # a finite source at its end
            return
        self._failed(key, child.spec, f"the task's process exited ({code}): {_tail(child.log_file)}")

    def _failed(self, key: tuple[str, int], spec: _Spec, why: str) -> None:
        before = self._failures.get(key)
        count = before.count + 1 if before is not None and before.spec == spec else 1
        delay = float(min(2 ** (count - 1), 30))
        self._failures[key] = _Failure(spec, count, time.monotonic() + delay, why)
        log.warning("connector %s: task %d failed (%s); starting it again in %.0f s", *key, why[:300], delay)

    def _stop(self, key: tuple[str, int], grace_s: float = _STOP_GRACE_S) -> None:
        child = self._children.pop(key)
        self._failures.pop(key, None)
        stopping = asyncio.get_running_loop().create_task(self._terminate(key, child, grace_s))
        self._stopping[key] = (stopping, child)

    async def _terminate(self, key: tuple[str, int], child: _Child, grace_s: float) -> None:
        try:
            with contextlib.suppress(ProcessLookupError):
                child.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(child.process.wait(), grace_s)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    child.process.kill()
                await child.process.wait()
            log.info("connector %s: task %d stopped", *key)
        finally:
            self._stopping.pop(key, None)

    @staticmethod
    def _read_status(child: _Child) -> dict[str, Any]:
        try:
            doc = orjson.loads(child.status_file.read_bytes())
            tasks = doc["connectors"][0]["tasks"]
            return dict(tasks[0]) if tasks else {}
        except (OSError, orjson.JSONDecodeError, KeyError, IndexError):
            return {}

    def local_state(self, name: str, task: int) -> TaskState:
        """The task as this server runs it (``UNASSIGNED`` if it does not, or not yet)."""
        key = (name, task)
        child = self._children.get(key)
        if child is None:
            failed = self._failures.get(key)
            if failed is not None and failed.why is not None:
                return TaskState("FAILED", self.worker_id, failed.why)
            if failed is not None:
                return TaskState("FINISHED", self.worker_id)
            return TaskState("UNASSIGNED", self.worker_id)
        status = self._read_status(child)
        detail: dict[str, Any] = {k: status[k] for k in ("records", "skipped", "restarts") if k in status}
        detail["pid"] = child.process.pid
        state = {"retrying": "FAILED", "finished": "FINISHED", "stopped": "UNASSIGNED"}.get(status.get("state", ""))
        return TaskState(state or "RUNNING", self.worker_id, status.get("error"), detail)

    async def close(self, grace_s: float = 5.0) -> None:
        """Stop every task: each gets ``grace_s`` to finish cleanly, then is killed; the directory goes."""
        self._closed = True
        for key in list(self._children):
            self._stop(key, grace_s)
        if self._stopping:
            _, late = await asyncio.wait([task for task, _ in self._stopping.values()], timeout=grace_s)
            for _, child in list(self._stopping.values()):
                with contextlib.suppress(ProcessLookupError):
                    child.process.kill()
            if late:
                await asyncio.wait(late, timeout=5.0)
        shutil.rmtree(self._dir, ignore_errors=True)


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as source:
            source.seek(0, os.SEEK_END)
            size = source.tell()
            source.seek(max(0, size - _LOG_TAIL))
            text = source.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
