"""The HDFS sink: a topic's partitions as files under ``<path>/<topic>/<partition>/``, through WebHDFS.

A file is written whole to ``<path>/+tmp/<topic>/<partition>/<random>`` and then renamed into place, so
no reader ever sees a partial file. Its name holds its offset range (``connectors.hdfs.files``); a task
that takes a partition over first deletes the partition's temporary files (a paused predecessor's pending
rename then fails), then resumes after the highest offset the names hold. The task checks that it still
holds the partition before writing and again before renaming.
"""

from __future__ import annotations

import contextlib
import logging
import posixpath
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from hdfs import HdfsError

from connectors.config import HdfsSinkSettings
from connectors.hdfs.files import encode, file_name, resume_offset
from connectors.hdfs.webhdfs import webhdfs
from connectors.sink import TopicPartition
from talos import Message

__all__ = ["HdfsSinkWriter", "TMP_DIR"]

log = logging.getLogger("talos.connect.hdfs")

TMP_DIR = "+tmp"


@dataclass
class _Buffer:
    opened: float
    messages: list[Message] = field(default_factory=list)
    size: int = 0


class HdfsSinkWriter:
    def __init__(self, settings: HdfsSinkSettings) -> None:
        self.settings = settings
        self._cleanup = contextlib.ExitStack()
        self.client = self._cleanup.enter_context(webhdfs(settings.namenode, settings.user))
        self._buffers: dict[TopicPartition, _Buffer] = {}
        self._floor: dict[TopicPartition, int] = {}  # the next offset to write: below it is in files already
        self.records = 0
        self.files = 0
        self.bytes = 0

    def _dir(self, tp: TopicPartition) -> str:
        return posixpath.join(self.settings.path, tp[0], str(tp[1]))

    def _tmp_dir(self, tp: TopicPartition) -> str:
        return posixpath.join(self.settings.path, TMP_DIR, tp[0], str(tp[1]))

    def open(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        resume = {}
        for tp in tps:
            self._buffers.pop(tp, None)
            self.client.delete(self._tmp_dir(tp), recursive=True)
            self.client.makedirs(self._dir(tp))
            offset = resume_offset(self.client.list(self._dir(tp)), *tp)
            if offset is not None:
                resume[tp] = self._floor[tp] = offset
                log.info("%s/%d: files hold up to offset %d; resuming there", *tp, offset - 1)
        return resume

    def add(self, message: Message) -> bool:
        tp = (message.topic, message.partition)
        buffer = self._buffers.get(tp)
        last = buffer.messages[-1].offset if buffer else self._floor.get(tp, 0) - 1
        if message.offset <= last:
            return False  # already buffered or already in a file (read again after a seek)
        if buffer is None:
            buffer = self._buffers[tp] = _Buffer(time.monotonic())
        buffer.messages.append(message)
        buffer.size += len(message.value or b"") + len(message.key or b"") + 64
        return buffer.size >= self.settings.roll_bytes

    def due(self, now: float) -> list[TopicPartition]:
        roll_s = self.settings.roll_ms / 1000
        return [
            tp
            for tp, buffer in self._buffers.items()
            if buffer.size >= self.settings.roll_bytes or now - buffer.opened >= roll_s
        ]

    def pending(self) -> list[TopicPartition]:
        return list(self._buffers)

    def flush(self, tps: list[TopicPartition], holds: Callable[[TopicPartition], bool]) -> dict[TopicPartition, int]:
        written = {}
        for tp in tps:
            buffer = self._buffers.get(tp)
            if buffer is None:
                continue
            if not holds(tp):
                continue  # not now: kept until the lock is renewed, or dropped when it is lost or revoked
            first, last = buffer.messages[0].offset, buffer.messages[-1].offset
            data = encode(buffer.messages, self.settings.format)
            final = posixpath.join(self._dir(tp), file_name(tp[0], tp[1], first, last, self.settings.format))
            tmp = posixpath.join(self._tmp_dir(tp), f"{uuid.uuid4().hex}.{self.settings.format}")
            self.client.write(tmp, data=data, overwrite=True)
            if not holds(tp):  # the lock lapsed while writing: not renamed, so not written
                self.client.delete(tmp)
                continue
            self._rename(tmp, final)
            del self._buffers[tp]
            self._floor[tp] = last + 1
            written[tp] = last + 1
            self.records += len(buffer.messages)
            self.files += 1
            self.bytes += len(data)
        return written

    def _rename(self, tmp: str, final: str) -> None:
        try:
            self.client.rename(tmp, final)
        except HdfsError:
            # Renamed by an earlier attempt whose answer was lost, or the same range by a predecessor:
            # either way the file in place holds exactly these offsets.
            if self.client.status(final, strict=False) is None:
                raise
            self.client.delete(tmp)

    def drop(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            self._buffers.pop(tp, None)
            self._floor.pop(tp, None)

    def describe(self) -> dict[str, object]:
        return {"files": self.files, "bytes": self.bytes}

    def close(self) -> None:
        self._buffers.clear()
        self._cleanup.close()
