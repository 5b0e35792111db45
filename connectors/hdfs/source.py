"""The HDFS source: the lines of the files in a directory, as they appear and as they grow.

Every ``poll_ms`` a task lists the directory and reads what is new in each of its files (a file belongs
to task ``crc32c(path) mod tasks``). Only complete lines are read: a line still being appended waits for
its newline. Each line is one record (``jsonl``: ``key_field`` of the object becomes the key), tagged
with ``<path>:<byte offset>``; per-file positions are checkpointed every ``batch_size`` lines through
:class:`connectors.source.SourceWriter`, which keeps a crash from writing a line twice.
"""

from __future__ import annotations

import fnmatch
import logging
import posixpath
import threading
from typing import Any

import orjson
from hdfs import InsecureClient

from connectors.checkpoints import CheckpointStore
from connectors.config import ConnectorConfig, HdfsSourceSettings
from connectors.source import SourceWriter
from connectors.task import TaskStatus
from talos import crc32c

__all__ = ["HdfsSourceTask", "line_key", "owns", "readable"]

log = logging.getLogger("talos.connect.hdfs")

_CHUNK = 4 * 1024 * 1024


def readable(name: str, pattern: str) -> bool:
    """Not hidden, not being copied in (``hdfs dfs -put`` writes ``NAME._COPYING_``), and matching."""
    return not name.startswith((".", "_")) and not name.endswith("._COPYING_") and fnmatch.fnmatch(name, pattern)


def owns(path: str, task: int, tasks: int) -> bool:
    return crc32c(path.encode()) % tasks == task


def line_key(line: bytes, key_field: str | None) -> bytes | None:
    """The value of ``key_field`` in a JSON object line (None if absent or not JSON)."""
    if key_field is None:
        return None
    try:
        document = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(document, dict) or document.get(key_field) is None:
        return None
    value = document[key_field]
    return value.encode() if isinstance(value, str) else orjson.dumps(value)


class HdfsSourceTask:
    def __init__(
        self,
        *,
        url: str,
        connector: ConnectorConfig,
        status: TaskStatus,
        checkpoints: CheckpointStore,
    ) -> None:
        self.url = url
        self.connector = connector
        self.settings: HdfsSourceSettings = connector.settings
        self.status = status
        self._checkpoints = checkpoints

    def run(self, stop: threading.Event) -> None:
        assert self.connector.topic is not None
        client = InsecureClient(self.settings.namenode, user=self.settings.user, timeout=30)
        writer = SourceWriter(
            url=self.url,
            topic=self.connector.topic,
            connector=self.connector.name,
            task=self.status.task,
            checkpoints=self._checkpoints,
            status=self.status,
        )
        try:
            positions: dict[str, int] = {}
            for state in writer.recover().values():  # files may have belonged to another task before
                for path, position in state.get("files", {}).items():
                    positions[path] = max(int(position), positions.get(path, 0))
            while not stop.is_set():
                read = False
                for path, length in self._files(client):
                    if length > positions.get(path, 0):
                        read |= self._read(client, writer, path, length, positions, stop)
                self.status.detail["files"] = len(positions)
                if not read:
                    stop.wait(self.settings.poll_ms / 1000)
        finally:
            writer.close()

    def _files(self, client: InsecureClient) -> list[tuple[str, int]]:
        found = []
        for name, info in sorted(client.list(self.settings.path, status=True)):
            path = posixpath.join(self.settings.path, name)
            if (
                info["type"] == "FILE"
                and readable(name, self.settings.pattern)
                and owns(path, self.status.task, self.connector.tasks)
            ):
                found.append((path, int(info["length"])))
        return found

    def _read(
        self,
        client: InsecureClient,
        writer: SourceWriter,
        path: str,
        length: int,
        positions: dict[str, int],
        stop: threading.Event,
    ) -> bool:
        """Write the complete lines of ``path`` after its position; True if the position moved."""
        start = position = positions.get(path, 0)
        lines = 0
        while position < length and not stop.is_set():
            with client.read(path, offset=position, length=min(_CHUNK, length - position)) as reader:
                data: bytes = reader.read()
            end = data.rfind(b"\n")
            if end < 0:
                if len(data) >= _CHUNK:
                    raise ValueError(f"{path}: a line at byte {position} is longer than {_CHUNK} bytes")
                break  # an incomplete last line: wait for the rest
            line_start = 0
            while line_start <= end:
                line_end = data.index(b"\n", line_start)
                line = data[line_start:line_end].rstrip(b"\r")
                if line.strip() or self.settings.format == "text":
                    writer.send(f"{path}:{position + line_start}", line, key=line_key(line, self.settings.key_field))
                    lines += 1
                line_start = line_end + 1
                if lines >= self.settings.batch_size:
                    positions[path] = position + line_start
                    self._commit(writer, positions)
                    lines = 0
            position += end + 1
            positions[path] = position
        if positions.get(path, 0) != start:
            self._commit(writer, positions)
            return True
        return False

    def _commit(self, writer: SourceWriter, positions: dict[str, int]) -> None:
        state: dict[str, Any] = {"files": dict(positions)}
        writer.commit(state)
