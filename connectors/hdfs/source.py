"""The HDFS source: the lines of the files in a directory, as they appear and as they grow.

Every ``poll_ms`` a task lists the directory and reads what is new in each of its files. A file is known
by its HDFS file id, not its name: a file renamed (rotated) keeps its position, a file replaced by
another of the same name is a new file, read from its start. A file belongs to task
``crc32c(file id) mod tasks``. Only complete lines are read: a line still being appended waits for its
newline. Each line is one record (``jsonl``: ``key_field`` of the object becomes the key), tagged
``<path>#<file id>:<byte offset>``; positions are checkpointed every ``batch_size`` lines through
:class:`connectors.source.SourceWriter`, which keeps a crash from writing a line twice.
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import posixpath
import threading
from dataclasses import dataclass
from typing import Any

import orjson
from hdfs import HdfsError, InsecureClient

from connectors.checkpoints import CheckpointStore
from connectors.config import ConnectorConfig, HdfsSourceSettings
from connectors.hdfs.webhdfs import webhdfs
from connectors.source import SOURCE_HEADER, SourceWriter
from connectors.task import TaskStatus
from talos import Message, crc32c

__all__ = ["HdfsSourceTask", "line_key", "owns", "parse_source", "readable"]

log = logging.getLogger("talos.connect.hdfs")

_CHUNK = 4 * 1024 * 1024


def readable(name: str, pattern: str) -> bool:
    """Not hidden, not being copied in (``hdfs dfs -put`` writes ``NAME._COPYING_``), and matching."""
    return not name.startswith((".", "_")) and not name.endswith("._COPYING_") and fnmatch.fnmatch(name, pattern)


def owns(file_id: str, task: int, tasks: int) -> bool:
    return crc32c(file_id.encode()) % tasks == task


def parse_source(source: str) -> tuple[str, int] | None:
    """(file id, byte offset) of a ``<path>#<file id>:<offset>`` record position."""
    where, _, offset = source.rpartition(":")
    _, _, file_id = where.rpartition("#")
    return (file_id, int(offset)) if file_id and offset.isdigit() else None


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


@dataclass
class _File:
    path: str
    position: int = 0  # the byte after the last complete line written

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "position": self.position}


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
        self._files: dict[str, _File] = {}  # file id → position

    def _mine(self, file_id: str) -> bool:
        return owns(file_id, self.status.task, self.connector.tasks)

    def run(self, stop: threading.Event) -> None:
        with contextlib.ExitStack() as cleanup:
            client = cleanup.enter_context(webhdfs(self.settings.namenode, self.settings.user))
            writer = SourceWriter.for_task(
                self.connector, self.status, url=self.url, checkpoints=self._checkpoints, stop=stop
            )
            cleanup.callback(writer.close)
            for state in writer.recover().values():  # files may have belonged to another task before
                for file_id, known in state.get("files", {}).items():
                    if self._mine(file_id) and known["position"] >= self._files.get(file_id, _File("")).position:
                        self._files[file_id] = _File(known["path"], int(known["position"]))
            writer.expect(self._will_read_again)
            while not stop.is_set():
                read = False
                files, present = self._list(client)
                for gone in self._files.keys() - present:  # deleted: its position is no longer needed
                    del self._files[gone]
                for file_id, path, length in files:
                    read |= self._read(client, writer, file_id, path, length, stop)
                self.status.detail["files"] = len(self._files)
                if not read:
                    writer.idle(self._state())
                    stop.wait(self.settings.poll_ms / 1000)
            writer.commit(self._state())  # stopped gracefully

    def _will_read_again(self, message: Message) -> bool:
        parsed = parse_source((message.header(SOURCE_HEADER) or b"").decode())
        if parsed is None or not self._mine(parsed[0]):
            return False
        known = self._files.get(parsed[0])
        return known is None or parsed[1] >= known.position

    def _state(self) -> dict[str, Any]:
        return {"files": {file_id: known.to_json() for file_id, known in self._files.items()}}

    def _list(self, client: InsecureClient) -> tuple[list[tuple[str, str, int]], set[str]]:
        """(file id, path, length) of this task's readable files, by name; and the ids of every entry."""
        found: list[tuple[str, str, int]] = []
        present: set[str] = set()
        if client.status(self.settings.path, strict=False) is None:
            self.status.detail["waiting_for"] = self.settings.path  # not created yet: nothing to read
            return found, present
        self.status.detail.pop("waiting_for", None)
        for name, info in sorted(client.list(self.settings.path, status=True)):
            file_id = str(info["fileId"])
            present.add(file_id)
            if info["type"] == "FILE" and readable(name, self.settings.pattern) and self._mine(file_id):
                found.append((file_id, posixpath.join(self.settings.path, name), int(info["length"])))
        return found, present

    def _read(
        self, client: InsecureClient, writer: SourceWriter, file_id: str, path: str, length: int, stop: threading.Event
    ) -> bool:
        """Write the complete lines of the file after its position; True if the position moved."""
        known = self._files.setdefault(file_id, _File(path))
        known.path = path  # renamed (rotated) files keep their position
        if length < known.position:
            log.warning("%s shrank to %d bytes (below %d): reading it from its start", path, length, known.position)
            known.position = 0
        start = known.position
        lines = 0
        while known.position < length and not stop.is_set():
            try:
                with client.read(path, offset=known.position, length=min(_CHUNK, length - known.position)) as reader:
                    data: bytes = reader.read()
            except HdfsError as exc:  # deleted or replaced since the listing: the next listing tells
                log.info("%s: cannot read now (%s)", path, str(exc).splitlines()[0])
                break
            end = data.rfind(b"\n")
            if end < 0:
                if len(data) >= _CHUNK:
                    raise ValueError(f"{path}: the line at byte {known.position} is longer than {_CHUNK} bytes")
                break  # an incomplete last line: wait for the rest
            base = known.position
            line_start = 0
            while line_start <= end:
                line_end = data.index(b"\n", line_start)
                line = data[line_start:line_end].rstrip(b"\r")
                if line.strip() or self.settings.format == "text":
                    source = f"{path}#{file_id}:{base + line_start}"
                    writer.send(source, line, key=line_key(line, self.settings.key_field))
                    lines += 1
                line_start = line_end + 1
                if lines >= self.settings.batch_size:
                    known.position = base + line_start
                    writer.commit(self._state())
                    lines = 0
            known.position = base + end + 1
        if known.position != start:
            writer.commit(self._state())
            return True
        return False
