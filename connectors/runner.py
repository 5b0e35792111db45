"""``talos connect run``: one process hosting connectors, each with its tasks on their own threads.

The runner starts every task under :func:`connectors.task.supervise` (restarts with backoff), prints a
status line per task every ``status_interval_s``, optionally serves the same as JSON (``GET /status``),
and on SIGTERM or Ctrl-C stops every task gracefully: sinks write and commit what they hold, sources
checkpoint what was acknowledged, group members leave so their partitions move at once.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TextIO

from connectors.checkpoints import CheckpointStore
from connectors.config import ConnectorConfig, RunnerConfig
from connectors.task import Task, TaskStatus, supervise

__all__ = ["Runner", "build_task"]

log = logging.getLogger("talos.connect")


def build_task(
    connector: ConnectorConfig, status: TaskStatus, *, url: str, checkpoints: CheckpointStore, stop: threading.Event
) -> Task:
    """A new task object for one (re)start of task ``status.task`` of ``connector``."""
    settings = connector.settings
    if connector.type == "hdfs-sink":
        from connectors.hdfs.sink import HdfsSinkWriter
        from connectors.sink import SinkTask

        return SinkTask(url=url, connector=connector, status=status, writer=lambda: HdfsSinkWriter(settings))
    if connector.type == "elasticsearch-sink":
        from connectors.elasticsearch.sink import ElasticsearchSinkWriter
        from connectors.sink import SinkTask

        def writer() -> ElasticsearchSinkWriter:
            return ElasticsearchSinkWriter(settings, template_name=connector.name, status=status, stop=stop)

        return SinkTask(url=url, connector=connector, status=status, writer=writer)
    if connector.type == "hdfs-source":
        from connectors.hdfs.source import HdfsSourceTask

        return HdfsSourceTask(url=url, connector=connector, status=status, checkpoints=checkpoints)
    from connectors.elasticsearch.source import ElasticsearchSourceTask

    return ElasticsearchSourceTask(url=url, connector=connector, status=status, checkpoints=checkpoints)


class Runner:
    def __init__(
        self,
        config: RunnerConfig,
        *,
        url: str,
        status_port: int | None = None,
        status_host: str = "127.0.0.1",
        status_file: str | None = None,
        only: set[tuple[str, int]] | None = None,
        out: TextIO,
    ) -> None:
        """``only``: run just these (connector, task) of the file's (a server runs each task it is given so);
        ``status_file``: write :meth:`snapshot` there (JSON, replaced whole) every second."""
        self.config = config
        self.url = url
        self.status_port = status_port
        self.status_host = status_host
        self.status_file = status_file
        self.out = out
        self.stop = threading.Event()
        self.checkpoints = CheckpointStore(url)
        self.tasks: list[tuple[ConnectorConfig, TaskStatus]] = [
            (connector, TaskStatus(connector.name, index))
            for connector in config.connectors
            for index in range(connector.tasks)
            if only is None or (connector.name, index) in only
        ]
        self._server: ThreadingHTTPServer | None = None

    def snapshot(self) -> dict[str, Any]:
        connectors = []
        for connector in self.config.connectors:
            tasks = [status.to_json() for c, status in self.tasks if c is connector]
            connectors.append({"name": connector.name, "type": connector.type, "tasks": tasks})
        return {"url": self.url, "connectors": connectors}

    def run(self) -> int:
        """Until every task finished or :attr:`stop` is set; 0 when all stopped cleanly. Raises OSError
        before starting anything if the status port cannot be had."""
        if self.status_port is not None:
            self._serve_status(self.status_port)
        threads = []
        for connector, status in self.tasks:
            make: Callable[[], Task] = functools.partial(
                build_task, connector, status, url=self.url, checkpoints=self.checkpoints, stop=self.stop
            )
            thread = threading.Thread(target=supervise, args=(make, status, self.stop), name=status.name, daemon=True)
            thread.start()
            threads.append(thread)
        counts = {status.name: status.records for _, status in self.tasks}
        last = time.monotonic()
        self._print(
            f"talos connect: {len(threads)} task(s) of {len(self.config.connectors)} connector(s) on {self.url}"
        )
        written = 0.0
        while any(thread.is_alive() for thread in threads) and not self.stop.is_set():
            self.stop.wait(0.2)  # so a runner whose tasks all finished exits at once
            now = time.monotonic()
            if self.status_file is not None and now - written >= 1.0:
                self._write_status()
                written = now
            if now - last < self.config.status_interval_s:
                continue
            for _, status in self.tasks:
                rate = (status.records - counts[status.name]) / max(now - last, 1e-3)
                counts[status.name] = status.records
                self._print(_status_line(status, rate))
            last = now
        self.stop.set()
        self._print("talos connect: stopping (sinks write and commit what they hold)")
        deadline = time.monotonic() + 120
        for thread in threads:
            thread.join(timeout=max(deadline - time.monotonic(), 0.1))
        if self._server is not None:
            self._server.shutdown()
        self.checkpoints.close()
        for _, status in self.tasks:
            self._print(_status_line(status, None))
        if self.status_file is not None:
            self._write_status()
        return 0

    def _write_status(self) -> None:
        assert self.status_file is not None
        partial = f"{self.status_file}.tmp"
        with open(partial, "w") as out:
            json.dump(self.snapshot(), out)
        os.replace(partial, self.status_file)

    def _print(self, line: str) -> None:
        self.out.write(f"{time.strftime('%H:%M:%S')} {line}\n")
        self.out.flush()

    def _serve_status(self, port: int) -> None:
        runner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.rstrip("/") not in ("/status", ""):
                    self.send_error(404, "GET /status")
                    return
                body = json.dumps(runner.snapshot()).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((self.status_host, port), Handler)
        threading.Thread(target=self._server.serve_forever, name="connect-status", daemon=True).start()
        self._print(f"talos connect: status at http://{self.status_host}:{self._server.server_address[1]}/status")


def _status_line(status: TaskStatus, rate: float | None) -> str:
    parts = [f"{status.name:<24}", f"{status.state:<9}", f"records={status.records}"]
    if rate is not None:
        parts.append(f"({rate:,.0f}/s)")
    if status.skipped:
        parts.append(f"skipped={status.skipped}")
    if status.restarts:
        parts.append(f"restarts={status.restarts}")
    parts += [f"{key}={value}" for key, value in status.detail.copy().items()]
    if status.error:
        parts.append(f"error={status.error}")
    return "  ".join(parts)
