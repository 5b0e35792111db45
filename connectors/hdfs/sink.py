"""The HDFS sink: a topic's partitions as files under ``<path>/<topic>/<partition>/``, through WebHDFS.

A file's name holds its offset range (``connectors.hdfs.files``), and a file is made visible only after its
offsets are committed, so a task that lost its partition cannot add one: **stage, commit, publish**.

1. *Stage*: the buffer is written whole to ``<path>/+tmp/<topic>/<partition>/<final name>.<token>-<size>.tmp``
   (no reader looks there; the token keeps two writers of one range apart, the size tells a complete file
   from one a stopped writer left half written).
2. *Commit*: the task commits the offset after the file through the consumer group. The commit carries the
   generation of the task's lock, and the coordinator refuses it from a task that no longer holds the
   partition (paused past its session, revoked): the task then deletes its staged file and renames nothing.
3. *Publish*: the staged file is renamed to its final name. Only a file whose offsets were committed gets
   here, so a stale task can at most rename a file that its successor also renames (below): the second
   rename fails because the name is taken, and the file in place holds exactly those offsets.

A task that takes a partition over (``open``) first *completes* what its predecessor committed but did not
rename (a crash or pause between 2 and 3): a complete staged file that starts where the partition's files
end and ends below the committed offset is renamed into place, repeatedly. It then deletes the other staged files (never
committed: a stale task's or a crashed one's) and resumes after the highest offset the file names hold; with
no file yet, at the committed offset. Resuming after the files rather than at the commit also re-reads
offsets committed but never made a file (possible only if a staged file was lost), and keeps the files
of a sink that renamed before committing (earlier versions) authoritative.
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
from connectors.hdfs.files import FileRange, encode, file_name, parse_temp_name, resume_offset, temp_name
from connectors.hdfs.webhdfs import webhdfs
from connectors.sink import TopicPartition
from talos import Message

__all__ = ["HdfsSinkWriter", "TMP_DIR"]

log = logging.getLogger("talos.connect.hdfs")

TMP_DIR = "+tmp"
REFUSED_PAUSE_S = 1.0  # after a refused commit, the partition's buffer waits this long before it is written again


@dataclass
class _Buffer:
    opened: float
    messages: list[Message] = field(default_factory=list)
    size: int = 0


@dataclass(frozen=True, slots=True)
class _Staged:
    tmp: str
    final: str
    last: int
    size: int


class HdfsSinkWriter:
    def __init__(self, settings: HdfsSinkSettings) -> None:
        self.settings = settings
        self._cleanup = contextlib.ExitStack()
        self.client = self._cleanup.enter_context(webhdfs(settings.namenode, settings.user))
        self._buffers: dict[TopicPartition, _Buffer] = {}
        self._floor: dict[TopicPartition, int] = {}  # the next offset to write: below it is in files already
        self._staged: dict[TopicPartition, _Staged] = {}  # written to +tmp, its commit not yet answered
        self._not_before: dict[TopicPartition, float] = {}  # refused commits: when to try the buffer again
        self._token = uuid.uuid4().hex[:16]
        self.records = 0
        self.files = 0
        self.bytes = 0
        self.completed = 0  # predecessors' committed files this writer renamed into place

    def _dir(self, tp: TopicPartition) -> str:
        return posixpath.join(self.settings.path, tp[0], str(tp[1]))

    def _tmp_dir(self, tp: TopicPartition) -> str:
        return posixpath.join(self.settings.path, TMP_DIR, tp[0], str(tp[1]))

    def open(self, tps: list[TopicPartition], committed: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        resume = {}
        for tp in tps:
            self._buffers.pop(tp, None)
            self._staged.pop(tp, None)
            self._not_before.pop(tp, None)
            self.client.makedirs(self._dir(tp))
            offset = self._complete(tp, resume_offset(self.client.list(self._dir(tp)), *tp), committed.get(tp))
            self.client.delete(self._tmp_dir(tp), recursive=True)  # what is left was never committed
            if offset is not None:
                resume[tp] = self._floor[tp] = offset
                log.info("%s/%d: files hold up to offset %d; resuming there", *tp, offset - 1)
        return resume

    def _complete(self, tp: TopicPartition, end: int | None, committed: int | None) -> int | None:
        """Rename into place the staged files a predecessor committed; the files' end offset afterwards."""
        if committed is None or self.client.status(self._tmp_dir(tp), strict=False) is None:
            return end
        staged: list[tuple[str, FileRange]] = []
        for name, info in self.client.list(self._tmp_dir(tp), status=True):
            parsed = parse_temp_name(name)
            # Only complete ones: a paused stale writer's file of the same range may still be half written.
            if parsed is not None and parsed[1][:2] == tp and int(info["length"]) == parsed[2]:
                staged.append((name, parsed[1]))
        while True:
            # Committed (it ends below the commit) and contiguous with the files (so it overlaps none; with no
            # file yet, any). The longest first: of two such, the shorter is a stale task's never committed.
            fits = [(name, r) for name, r in staged if r[3] < committed and (end is None or r[2] == end)]
            if not fits:
                return end
            name, (_, _, first, last) = max(fits, key=lambda item: (item[1][3], -item[1][2]))
            staged = [(n, r) for n, r in staged if r[3] > last]
            tmp = posixpath.join(self._tmp_dir(tp), name)
            final = posixpath.join(self._dir(tp), file_name(tp[0], tp[1], first, last, self.settings.format))
            if not self._rename(tmp, final, missing_ok=True):
                return (
                    end  # its writer, paused, refused and resumed, deleted it meanwhile: those offsets are read again
                )
            log.info("%s/%d: offsets %d-%d were committed but not renamed; renamed into place", *tp, first, last)
            self.completed += 1
            end = last + 1

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
            if (buffer.size >= self.settings.roll_bytes or now - buffer.opened >= roll_s)
            and self._not_before.get(tp, 0.0) <= now
        ]

    def pending(self) -> list[TopicPartition]:
        return list(self._buffers)

    def stage(self, tps: list[TopicPartition], holds: Callable[[TopicPartition], bool]) -> dict[TopicPartition, int]:
        positions = {}
        for tp in tps:
            buffer = self._buffers.get(tp)
            if buffer is None or tp in self._staged:
                continue
            if not holds(tp):
                continue  # not now: kept until the lock is renewed, or dropped when it is lost or revoked
            first, last = buffer.messages[0].offset, buffer.messages[-1].offset
            data = encode(buffer.messages, self.settings.format)
            final = file_name(tp[0], tp[1], first, last, self.settings.format)
            tmp = posixpath.join(self._tmp_dir(tp), temp_name(final, self._token, len(data)))
            self.client.write(tmp, data=data, overwrite=True)
            self._staged[tp] = _Staged(tmp, posixpath.join(self._dir(tp), final), last, len(data))
            positions[tp] = last + 1
        return positions

    def publish(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            staged = self._staged.pop(tp)
            self._rename(staged.tmp, staged.final, missing_ok=False)
            buffer = self._buffers.pop(tp)
            self._floor[tp] = staged.last + 1
            self.records += len(buffer.messages)
            self.files += 1
            self.bytes += staged.size

    def abandon(self, tps: list[TopicPartition]) -> None:
        """The commit was refused: delete the staged files. The buffers stay (a lock the coordinator grants
        again without a new assignment needs them written again); a lost partition's go with ``drop``."""
        now = time.monotonic()
        for tp in tps:
            staged = self._staged.pop(tp)
            self._not_before[tp] = now + REFUSED_PAUSE_S
            try:
                self.client.delete(staged.tmp)
            except HdfsError as exc:  # never committed: the partition's next holder deletes it
                log.warning("%s/%d: could not delete %s: %s", *tp, staged.tmp, exc)

    def _rename(self, tmp: str, final: str, *, missing_ok: bool) -> bool:
        """Rename ``tmp`` to ``final``; False if ``tmp`` is gone and ``final`` absent (only with ``missing_ok``)."""
        try:
            self.client.rename(tmp, final)
            return True
        except HdfsError:
            # Renamed by an earlier attempt whose answer was lost, or by the partition's next holder, which
            # completed this committed file while this task was paused: the file in place holds these offsets.
            if self.client.status(final, strict=False) is not None:
                self.client.delete(tmp)
                return True
            if missing_ok and self.client.status(tmp, strict=False) is None:
                return False
            raise

    def drop(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            self._buffers.pop(tp, None)
            self._floor.pop(tp, None)
            self._staged.pop(tp, None)
            self._not_before.pop(tp, None)

    def describe(self) -> dict[str, object]:
        return {"files": self.files, "bytes": self.bytes, "completed": self.completed}

    def close(self) -> None:
        self._buffers.clear()
        self._cleanup.close()
