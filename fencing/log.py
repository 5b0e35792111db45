"""The segment log of one partition, with the single-writer (fencing) protocol.

Opening a :class:`PartitionLog` *is* a takeover (ARCHITECTURE.md, "Ownership and fencing"):

1. take a new epoch from the :class:`~fencing.epochs.EpochSource`;
2. create the marker ``_epoch/<epoch>`` exclusively — before looking at any segment;
3. for every open segment of a lower epoch: recover its lease (HDFS) or move it aside to
   ``<base>.<epoch>.sealing`` (POSIX), then scan it, cut a torn or corrupt tail, and rename it to its sealed
   name, which records the valid length;
4. create ``<next offset>.<epoch>.log`` and serve.

An old owner learns it was fenced: on HDFS its next ``hsync`` fails once the lease is recovered; on POSIX
it checks after every sync that its segment path still names its file (one ``stat``): a write synced
before the move is in what the takeover reads, one synced after it is never acknowledged. Before writing
into a newly created segment (a roll, which a takeover that listed the directory earlier cannot know)
it lists ``_epoch/``. A write is acknowledged (``flush`` returns) only if it lies inside the sealed length
the next owner will read.

A roll keeps the partition's writes going: the flush that fills the active segment creates the next file
``<end>.<epoch>.log``, lists ``_epoch/`` and switches to it, and a background thread closes the full one and
renames it to its sealed name (an HDFS close waits for the last block to complete: up to ~0.5 s). Every byte
of the old segment was synced before the switch, so whoever seals it (this thread, or a takeover that lists
it while it still has its open name) records the same length; a rename that loses that race finds the file
gone, which fences this writer as it always did. Until its seal is done the old segment is still served to
readers, from memory where storage cannot read open files. At most ``SEALING_MAX`` segments seal in the
background at a time (they hold memory on HDFS): a roll beyond that waits for the oldest, and :meth:`close`
for all. If closing or renaming one fails, the log fails (at the next flush, roll or close) as a failed roll
in the flush did: the next takeover seals it with lease recovery. Seals may finish in any order: a takeover
seals whatever is still open, and every open segment holds exactly the bytes up to the next one's base.

One thread at a time may append, and one (possibly another) flush, roll or close; readers may call
:meth:`read` from any thread.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import posixpath
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from fencing.epochs import EpochSource, highest_epoch
from fencing.errors import FencedError, LogCorruptError, LogError, OffsetOutOfRangeError, StorageError
from fencing.filesystem import Buffer, FileInfo, FileSystem, WritableFile
from fencing.segments import (
    EPOCH_DIR,
    START_DIR,
    CleaningName,
    SegmentName,
    epoch_marker_name,
    parse_start_marker,
    start_marker_name,
)
from talos import (
    HEADER_SIZE,
    BatchError,
    BatchHeader,
    CorruptBatchError,
    iter_batches,
    read_header,
    set_base_offset,
    verify_batch,
)

__all__ = [
    "LogConfig",
    "PartitionLog",
    "RecoveryReport",
    "SealedSegment",
    "create_cleaning",
    "discard_cleaning",
    "discard_path",
    "read_sealed",
    "scan_valid_prefix",
]

log = logging.getLogger("talos.log")

#: Segments closing in the background at once, per log. An HDFS close takes up to ~0.5 s: a partition that
#: fills segments faster than that waits at a roll only beyond this many.
SEALING_MAX = 4

#: Called at the named steps of the protocol; tests use it to widen race windows.
Hook = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 128 * 1024 * 1024  # roll when the active segment reaches this size
    segment_ms: int = 7 * 24 * 3600 * 1000  # ... or this age
    index_interval_bytes: int = 16 * 1024  # one sparse-index entry per this many bytes
    retention_ms: int | None = None  # delete sealed segments older than this
    retention_bytes: int | None = None  # ... and the oldest while the log is larger than this
    lease_timeout_s: float = 120.0
    read_chunk_bytes: int = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What the takeover found and sealed."""

    epoch: int
    sealed: list[str]  # open segments of older epochs that this takeover sealed
    truncated_bytes: int  # torn or corrupt bytes cut from their tails
    next_offset: int


def scan_valid_prefix(data: Buffer, base_offset: int) -> tuple[int, int]:
    """Length of the longest prefix of whole, CRC-valid, contiguous batches, and the offset after it."""
    valid = 0
    expected = base_offset
    try:
        for position, header in iter_batches(data):
            if header.base_offset != expected:
                log.warning(
                    "batch at byte %d has base offset %d, expected %d: cut there",
                    position,
                    header.base_offset,
                    expected,
                )
                break
            valid = position + header.length
            expected = header.next_offset
    except BatchError as exc:
        log.warning("segment cut at byte %d of %d: %s", valid, len(data), exc)
    return valid, expected


class _ChunkBuffer:
    """The unsealed bytes of a segment, for filesystems that cannot read open files.

    Holds the flushed batches themselves, not a copy: the log owns an appended ``bytearray`` (see
    :meth:`PartitionLog.append`) and the server's tail cache keeps the same objects, so the bytes of the
    active segment are in memory once."""

    def __init__(self) -> None:
        self._chunks: list[Buffer] = []
        self._starts = array("q")
        self._size = 0

    def append(self, data: Buffer) -> None:
        self._starts.append(self._size)
        self._chunks.append(data)
        self._size += len(data)

    def read(self, position: int, size: int) -> bytes:
        end = min(position + size, self._size)
        out = []
        index = max(bisect.bisect_right(self._starts, position) - 1, 0)
        while position < end and index < len(self._chunks):
            chunk, start = self._chunks[index], self._starts[index]
            out.append(memoryview(chunk)[position - start : end - start])
            position = start + len(chunk)
            index += 1
        return b"".join(out)


@dataclass(frozen=True, slots=True)
class SealedSegment:
    """A sealed segment as a compaction sees it."""

    name: SegmentName
    path: str
    length: int


def entries_of_older_cleaning(entries: list[tuple[SegmentName | None, FileInfo]], epoch: int) -> list[FileInfo]:
    """The ``.cleaning`` files of epochs below ``epoch`` among a directory's entries."""
    out = []
    for _name, info in entries:
        cleaning = CleaningName.parse(info.name)
        if cleaning is not None and cleaning.epoch < epoch:
            out.append(info)
    return out


def create_cleaning(fs: FileSystem, directory: str, epoch: int, base: int, end: int) -> WritableFile:
    """A new file for a compaction's output covering [base, end), by the owner of ``epoch``. Checked against
    newer owners *after* it exists: a takeover writes its marker before it lists the directory and deletes the
    older owners' ``.cleaning`` files, so either this check sees the marker or the takeover deletes the file and
    the rename in :meth:`PartitionLog.commit_cleaned` fails; a rename before the takeover lists is seen by it."""
    writer = fs.create(posixpath.join(directory, str(CleaningName(base, epoch, end))))
    if highest_epoch(fs, directory) > epoch:
        with contextlib.suppress(LogError):
            discard_cleaning(fs, writer)
        raise FencedError(f"{directory}: a newer epoch exists; compaction stopped")
    return writer


def read_sealed(fs: FileSystem, segment: SealedSegment, position: int, size: int) -> bytes:
    """Bytes of a sealed segment (a compaction reads them), never past its sealed length."""
    return fs.read(segment.path, position, max(min(size, segment.length - position), 0))


def discard_path(fs: FileSystem, path: str) -> None:
    """Delete a compaction's output file, if it is there."""
    with contextlib.suppress(FileNotFoundError):
        fs.delete(path)


def discard_cleaning(fs: FileSystem, writer: WritableFile) -> None:
    """Close and delete a compaction's output that is not to be committed."""
    with contextlib.suppress(LogError):
        writer.close()
    with contextlib.suppress(FileNotFoundError):
        fs.delete(writer.path)


@dataclass
class _Segment:
    name: SegmentName
    path: str
    length: int  # valid bytes
    end: int  # next offset after the segment
    mtime_ms: int
    # Sparse index: offsets[i] is the base offset of the batch at byte positions[i].
    offsets: array[int] | None = None
    positions: array[int] = field(default_factory=lambda: array("q"))
    # Its bytes while the storage cannot serve them (open on HDFS): the active segment, and a rolled one
    # until its background seal is done.
    memory: _ChunkBuffer | None = None
    replaced: bool = False  # by a compaction's output, or deleted (retention, deleted records): read again

    @property
    def base(self) -> int:
        return self.name.base


class PartitionLog:
    """Append-only log of record batches in one partition directory."""

    def __init__(self, fs: FileSystem, directory: str, epoch: int, config: LogConfig, hook: Hook | None) -> None:
        self._fs = fs
        self._dir = directory
        self._epoch = epoch
        self._config = config
        self._hook = hook
        self._lock = threading.Lock()
        self._segments: list[_Segment] = []  # sealed, oldest first; the active one is separate
        self._active: _Segment | None = None
        self._writer: WritableFile | None = None
        self._active_opened_ms = 0
        self._sealing: list[threading.Thread] = []  # close and rename rolled segments, oldest first
        self._seal_error: LogError | None = None  # why that failed, for the writer thread to fail the log
        self._pending: list[bytearray] = []
        self._next_offset = 0  # next offset to assign
        self._durable_offset = 0  # everything below is flushed and acknowledged
        self._error: LogError | None = None
        self._log_start = 0  # records below were deleted (``delete_records``); segments may start lower
        # Retention, deleted records and compaction change the sealed segments: one at a time.
        self._maintenance = threading.Lock()
        self.recovery: RecoveryReport | None = None  # what the takeover found

    # ------------------------------------------------------------------ takeover

    @classmethod
    def open(
        cls,
        fs: FileSystem,
        directory: str,
        epochs: EpochSource,
        *,
        config: LogConfig | None = None,
        hook: Hook | None = None,
    ) -> PartitionLog:
        """Take the partition over with a new epoch and return the log ready for appends."""
        plog = cls(fs, directory, epochs.next_epoch(), config or LogConfig(), hook)
        plog.recovery = plog._take_over()
        return plog

    def _step(self, name: str) -> None:
        if self._hook is not None:
            self._hook(name)

    def _path(self, name: str | SegmentName | CleaningName) -> str:
        return posixpath.join(self._dir, str(name))

    def _take_over(self) -> RecoveryReport:
        fs = self._fs
        marker_dir = posixpath.join(self._dir, EPOCH_DIR)
        fs.mkdirs(marker_dir)
        if highest_epoch(fs, self._dir) >= self._epoch:
            raise FencedError(f"{self._dir}: epoch {self._epoch} is not newer than the markers present")
        try:
            fs.write_file(posixpath.join(marker_dir, epoch_marker_name(self._epoch)), b"")
        except FileExistsError:
            raise FencedError(f"{self._dir}: another owner took epoch {self._epoch}") from None
        self._step("takeover:marker-written")

        sealed_now: list[str] = []
        truncated = 0
        for _attempt in range(100):
            entries = [(SegmentName.parse(i.name), i) for i in fs.list(self._dir)]
            segments = sorted(
                ((name, info) for name, info in entries if name is not None), key=lambda e: (e[0].base, e[0].epoch)
            )
            retry = False
            for info in entries_of_older_cleaning(entries, self._epoch):
                # An older owner's compaction output not yet renamed: deleted, its rename then fails (the
                # owner created it before checking the markers, so it either saw ours or left it to us).
                fs.delete(self._path(info.name))
            for name, _info in segments:
                if name.sealed:
                    continue
                if name.epoch > self._epoch:
                    raise FencedError(f"{self._dir}: open segment {name} of a newer epoch")
                if name.epoch == self._epoch:
                    raise LogCorruptError(f"{self._dir}: segment {name} already has this epoch")
                path = self._path(name)
                try:
                    if fs.lease_fencing:
                        fs.recover_lease(path, timeout=self._config.lease_timeout_s)
                    elif not name.moved_aside:
                        # Moved before it is read: a write its owner syncs after this finds its path gone.
                        moved = self._path(name.move_aside())
                        fs.rename(path, moved)
                        path = moved
                        self._step("takeover:moved-aside")
                    data = fs.read(path)
                    length, end = scan_valid_prefix(data, name.base)
                    self._step("takeover:scanned")
                    fs.rename(path, self._path(name.seal(end, length)))
                except FileNotFoundError:
                    retry = True  # its writer sealed or removed it meanwhile: look again
                    break
                truncated += len(data) - length
                sealed_now.append(str(name.seal(end, length)))
                self._step("takeover:sealed")
            if not retry:
                break
        else:
            raise StorageError(f"{self._dir}: segments kept changing during takeover")

        self._load_sealed()
        self._open_segment(self._next_offset)
        if highest_epoch(fs, self._dir) > self._epoch:
            self._fail(FencedError(f"{self._dir}: fenced by a newer epoch during takeover"))
            raise self._error  # type: ignore[misc]
        log.info(
            "took over %s at epoch %d: next offset %d, sealed %s, cut %d bytes",
            self._dir,
            self._epoch,
            self._next_offset,
            sealed_now,
            truncated,
        )
        return RecoveryReport(self._epoch, sealed_now, truncated, self._next_offset)

    def _load_sealed(self) -> None:
        entries = [(SegmentName.parse(i.name), i) for i in self._fs.list(self._dir)]
        sealed = [(name, info) for name, info in entries if name is not None and name.sealed]
        kept = self._resolve_compacted(sealed)
        self._log_start = self._read_start()
        segments: list[_Segment] = []
        for index, (name, info) in enumerate(kept):
            assert name.end is not None and name.length is not None
            if name.length == 0 and name.end == name.base and index < len(kept) - 1:
                # An empty segment (a roll interrupted by a takeover) carries nothing once another follows.
                self._fs.delete(self._path(name))
                continue
            if segments and segments[-1].end != name.base:
                raise LogCorruptError(f"{self._dir}: segment {name} does not follow offset {segments[-1].end}")
            segments.append(_Segment(name, self._path(name), name.length, name.end, info.mtime_ms))
        self._segments = segments
        self._next_offset = self._durable_offset = segments[-1].end if segments else self._log_start

    def _resolve_compacted(self, sealed: list[tuple[SegmentName, FileInfo]]) -> list[tuple[SegmentName, FileInfo]]:
        """The sealed segments to serve, by base: a compacted one replaces those of lower generations that it
        covers (a compaction renames its output in before deleting its inputs; a takeover in between finds
        both). The replaced ones are deleted. Segments of one generation never overlap."""
        kept: list[tuple[SegmentName, FileInfo]] = []
        bases: list[int] = []
        for name, info in sorted(sealed, key=lambda e: (-e[0].generation, e[0].base)):
            assert name.end is not None
            slot = bisect.bisect_right(bases, name.base) - 1
            before = kept[slot][0] if slot >= 0 else None
            after = kept[slot + 1][0] if slot + 1 < len(kept) else None
            covering = next((k for k in (before, after) if k is not None and k.covers(name)), None)
            if covering is not None and covering.generation > name.generation:
                self._fs.delete(self._path(name))
                continue
            if (before is not None and before.end is not None and before.end > name.base) or (
                after is not None and after.base < name.end
            ):
                raise LogCorruptError(f"{self._dir}: segment {name} overlaps {before if before else after}")
            kept.insert(slot + 1, (name, info))
            bases.insert(slot + 1, name.base)
        return kept

    def _read_start(self) -> int:
        try:
            markers = self._fs.list(posixpath.join(self._dir, START_DIR))
        except FileNotFoundError:
            return 0
        return max((offset for i in markers if (offset := parse_start_marker(i.name)) is not None), default=0)

    def _open_segment(self, base: int) -> None:
        self._active, self._writer = self._create_segment(base)
        self._active_opened_ms = self._active.mtime_ms

    def _create_segment(self, base: int) -> tuple[_Segment, WritableFile]:
        name = SegmentName(base, self._epoch)
        path = self._path(name)
        writer = self._fs.create(path)
        memory = None if self._fs.reads_open_files else _ChunkBuffer()
        return _Segment(name, path, 0, base, int(time.time() * 1000), offsets=array("q"), memory=memory), writer

    # ------------------------------------------------------------------ properties

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def directory(self) -> str:
        return self._dir

    @property
    def next_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._next_offset

    @property
    def durable_offset(self) -> int:
        """Every offset below this is flushed (the high watermark); reads stop here."""
        return self._durable_offset

    @property
    def start_offset(self) -> int:
        """The earliest offset still stored."""
        with self._lock:
            return self._start_locked()

    def _start_locked(self) -> int:
        if self._segments:
            first = self._segments[0].base
        else:
            first = self._active.base if self._active is not None else self._durable_offset
        return min(max(first, self._log_start), self._durable_offset)

    @property
    def size_bytes(self) -> int:
        with self._lock:
            active = self._active.length if self._active is not None else 0
            return sum(s.length for s in self._segments) + active

    @property
    def failed(self) -> LogError | None:
        """Why the log accepts no more writes (fenced, storage failure), or None."""
        return self._error

    # ------------------------------------------------------------------ writing

    def _fail(self, error: LogError) -> None:
        if self._error is None:
            self._error = error
            with self._lock:
                self._pending.clear()
                self._next_offset = self._durable_offset
            if self._writer is not None:
                with contextlib.suppress(LogError):
                    self._writer.close()
                self._writer = None

    def _check(self) -> None:
        if self._error is not None:
            raise self._error

    def append(self, batch: Buffer, *, verify: bool = True, header: BatchHeader | None = None) -> tuple[int, int]:
        """Assign offsets to one encoded batch and queue it for the next :meth:`flush`.

        Returns ``(base_offset, next_offset)``. Nothing is durable (or readable) before the flush.
        A damaged batch raises :class:`talos.BatchError` and changes nothing. A ``bytearray`` is taken
        over: its base offset is patched in place and the caller must not change it afterwards.

        May run while a :meth:`flush` is under way in another thread (the server appends on its event loop
        and flushes in an I/O thread): the flush writes what was queued when it began, this batch goes into
        the next one.
        """
        self._check()
        if verify:
            header = verify_batch(batch)
        elif header is None:  # else the caller read it already
            header = read_header(batch)
        if header.length != len(batch):
            raise CorruptBatchError(f"buffer holds {len(batch)} bytes, the batch says {header.length}")
        copy = batch if isinstance(batch, bytearray) else bytearray(batch)
        with self._lock:
            base = self._next_offset
            set_base_offset(copy, base)
            self._pending.append(copy)
            self._next_offset = base + header.record_count
        return base, self._next_offset

    @property
    def pending(self) -> bool:
        """Whether appended batches wait for a flush."""
        return bool(self._pending)

    def flush(self) -> int:
        """Write every batch queued so far as one buffer with one sync; returns the new durable offset.

        Raises :class:`FencedError` if a newer owner exists, :class:`StorageError` if the storage failed;
        then nothing queued is acknowledged and the log accepts no more writes.
        """
        self._check()
        with self._lock:
            pending, self._pending = self._pending, []
            target = self._next_offset
        if not pending:
            return self._durable_offset
        assert self._writer is not None and self._active is not None
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        try:
            self._writer.write_synced(data)
        except StorageError as exc:
            self._fail(self._fenced_or(exc))
            raise self._error from exc  # type: ignore[misc]
        self._step("flush:synced")
        # A POSIX takeover moves the segment aside before reading it, so what it reads holds every byte
        # synced while the path still named this file (on HDFS the lease fenced the sync itself).
        self._check_linked()
        self._record_flushed(data, pending, target)
        self._roll_if_due()
        return self._durable_offset

    def _fenced_or(self, error: LogError) -> LogError:
        try:
            newer = highest_epoch(self._fs, self._dir) > self._epoch
        except (LogError, OSError):
            newer = False
        return FencedError(f"{self._dir}: fenced by a newer epoch ({error})") if newer else error

    def check_owner(self) -> None:
        """Raise :class:`FencedError` if a newer owner took the partition over (asks the storage)."""
        self._check()
        self._check_not_fenced()

    def _check_not_fenced(self) -> None:
        self._check_linked()
        if highest_epoch(self._fs, self._dir) > self._epoch:
            self._fail(FencedError(f"{self._dir}: a newer epoch than {self._epoch} exists"))
            self._check()

    def _check_linked(self) -> None:
        assert self._writer is not None
        if not self._writer.still_linked():
            self._fail(FencedError(f"{self._dir}: segment {self._writer.path} was moved by a newer owner"))
            self._check()

    def _record_flushed(self, data: Buffer, flushed: list[bytearray], end: int) -> None:
        active = self._active
        assert active is not None and active.offsets is not None
        interval = self._config.index_interval_bytes
        position = active.length
        last_indexed = active.positions[-1] if active.positions else -interval
        with self._lock:
            for batch in flushed:
                if position - last_indexed >= interval:
                    active.offsets.append(read_header(batch).base_offset)
                    active.positions.append(position)
                    last_indexed = position
                position += len(batch)
            if active.memory is not None:
                for batch in flushed:  # the batches themselves: ``data`` may be a joined copy
                    active.memory.append(batch)
            active.length = position
            active.end = end
            self._durable_offset = end

    def _should_roll(self) -> bool:
        assert self._active is not None
        if self._active.length >= self._config.segment_bytes:
            return True
        age = int(time.time() * 1000) - self._active_opened_ms
        return self._active.length > 0 and age >= self._config.segment_ms

    def _roll_if_due(self) -> None:
        if self._seal_error is not None:  # the background seal of the previous segment failed
            self._fail(self._seal_error)
            raise self._seal_error
        if self._should_roll():
            self.roll(wait=False)

    def maybe_roll(self) -> None:
        """Roll the active segment if it is full or old enough, sealing the old one in the background. Call it
        periodically, ordered with the flushes (the server runs it in the partition's write thread)."""
        self._check()
        self._roll_if_due()

    def roll(self, *, wait: bool = True) -> None:
        """Start a new segment at the durable end and seal the active one (only between flushes): before
        returning with ``wait``, else in the background (see the module docstring)."""
        self._check()
        self._reap_seals(keep=SEALING_MAX - 1)
        old, old_writer = self._active, self._writer
        assert old is not None and old_writer is not None
        if old.length == 0:
            if wait:  # nothing to roll, but a roll in the background may still be sealing
                self.wait_for_seal()
            return
        # Batches appended since the last flush go into the new segment: their offsets follow the active one's end.
        try:
            segment, writer = self._create_segment(old.end)
        except (StorageError, FileExistsError) as exc:
            self._fail(self._fenced_or(StorageError(str(exc))))
            raise self._error from exc  # type: ignore[misc]
        self._step("roll:created-new")
        # A takeover that listed the directory before this file existed cannot have sealed it:
        # the marker check is what stops this writer then (its marker precedes its listing). That takeover
        # saw the old segment, still open, and seals it: it is left to it.
        if highest_epoch(self._fs, self._dir) > self._epoch:
            self._fail(FencedError(f"{self._dir}: a newer epoch appeared while rolling"))
            with contextlib.suppress(LogError):
                writer.close()
            self._fs.delete(segment.path)
            raise self._error  # type: ignore[misc]
        with self._lock:
            self._segments.append(old)  # still readable (from ``old.memory`` on HDFS) while it closes
            self._active = segment
        self._writer = writer
        self._active_opened_ms = segment.mtime_ms
        sealing = threading.Thread(
            target=self._seal_in_background, args=(old, old_writer), name=f"talos-seal-{old.name}", daemon=True
        )
        sealing.start()
        self._sealing.append(sealing)
        if wait:
            self.wait_for_seal()

    def wait_for_seal(self) -> None:
        """Wait until every rolled segment is sealed; if a seal failed, fail the log with that error and
        raise it. Only in the thread that flushes."""
        self._reap_seals(keep=0)

    def _reap_seals(self, *, keep: int) -> None:
        """Forget finished seals, wait for the oldest ones while more than ``keep`` run, and fail the log if
        one failed."""
        self._sealing = [thread for thread in self._sealing if thread.is_alive()]
        while len(self._sealing) > keep:
            self._sealing.pop(0).join()
        if self._seal_error is not None:
            self._fail(self._seal_error)
            raise self._seal_error

    def _seal_in_background(self, segment: _Segment, writer: WritableFile) -> None:
        # Never touches the active writer: a failure is left for the writer thread to act on.
        try:
            self._seal(segment, writer)
        except LogError as exc:
            log.warning("%s: sealing %s failed: %s", self._dir, segment.name, exc)
            self._seal_error = self._seal_error or exc
        except BaseException as exc:
            log.exception("%s: sealing %s failed", self._dir, segment.name)
            self._seal_error = self._seal_error or StorageError(f"{self._dir}: sealing {segment.name}: {exc!r}")

    def _seal(self, segment: _Segment, writer: WritableFile) -> None:
        """Close ``segment``'s file and rename it to its sealed name (an empty one is deleted); raises
        :class:`FencedError` if a newer owner sealed it first, :class:`StorageError` if the storage failed."""
        sealed = segment.name.seal(segment.end, segment.length)
        try:
            writer.close()
            if segment.length == 0:
                self._fs.delete(segment.path)
            else:
                self._fs.rename(segment.path, self._path(sealed))
        except FileNotFoundError:
            raise FencedError(f"{self._dir}: {segment.name} was sealed by a newer owner") from None
        except StorageError as exc:
            raise self._fenced_or(exc) from exc
        self._step("roll:sealed-old")
        if segment.length > 0:
            with self._lock:
                segment.name, segment.path, segment.mtime_ms = sealed, self._path(sealed), int(time.time() * 1000)
                segment.memory = None

    def _seal_active(self) -> None:
        """Close the active segment and rename it to its sealed name; the log has no active one after."""
        active, writer = self._active, self._writer
        assert active is not None and writer is not None
        self._writer = None
        try:
            self._seal(active, writer)
        except LogError as exc:
            self._fail(exc)
            raise
        with self._lock:
            self._active = None
            if active.length > 0:
                self._segments.append(active)

    def close(self, *, seal: bool = True) -> None:
        """Flush and stop writing. With ``seal`` the active segment is sealed, so the next owner needs
        no lease recovery (graceful hand-off); without it, it stays open for the next takeover to seal.
        Either way a segment sealing in the background is sealed (or has failed) when this returns."""
        try:
            if self._error is None:
                self.flush()
                self.wait_for_seal()
                if seal:
                    self._seal_active()
        finally:
            sealing, self._sealing = self._sealing, []
            for thread in sealing:  # the log failed: still, no thread of it outlives the close
                thread.join()
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        if self._error is None:
            self._error = LogError(f"{self._dir} is closed")

    # ------------------------------------------------------------------ retention

    def reconfigure(self, config: LogConfig) -> None:
        """Retention and segment limits from now on (a topic's settings changed)."""
        self._config = config

    def enforce_retention(self, now_ms: int | None = None) -> list[str]:
        """Delete the oldest sealed segments past the retention limits; returns their names. While a compaction
        pass holds the segments, nothing (the next call catches up): retention must not wait a pass out."""
        if not self._maintenance.acquire(blocking=False):
            return []
        try:
            return self._enforce_retention(now_ms)
        finally:
            self._maintenance.release()

    def _enforce_retention(self, now_ms: int | None) -> list[str]:
        config = self._config
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        deleted: list[str] = []
        while True:
            with self._lock:
                if not self._segments:
                    break
                oldest = self._segments[0]
                if not oldest.name.sealed:
                    break  # still sealing in the background: its rename must find it
                total = sum(s.length for s in self._segments) + (self._active.length if self._active else 0)
                too_big = config.retention_bytes is not None and total > config.retention_bytes
                too_old = config.retention_ms is not None and now_ms - oldest.mtime_ms > config.retention_ms
                if not (too_big or too_old):
                    break
                self._segments.pop(0)
                oldest.replaced = True
            self._fs.delete(oldest.path)
            deleted.append(str(oldest.name))
        return deleted

    # ------------------------------------------------------------------ reading

    def read(self, offset: int, max_bytes: int = 1024 * 1024) -> bytes:
        """Whole batches from the one holding ``offset``, up to ``max_bytes`` (at least one batch),
        never past :attr:`durable_offset`. ``offset == durable_offset`` gives ``b""``. On a compacted log the
        first batch may start after ``offset`` (the records between were compacted away)."""
        retries = 0
        while retries < 200:
            with self._lock:
                durable = self._durable_offset
                segments = list(self._segments)
                active = self._active
                start = self._start_locked()
                if offset == durable:
                    return b""
                if offset < start or offset > durable:
                    raise OffsetOutOfRangeError(offset, start, durable)
                if active is not None and offset >= active.base:
                    segment = active
                else:
                    bases = [s.base for s in segments]
                    segment = segments[bisect.bisect_right(bases, offset) - 1]
                length, memory = segment.length, segment.memory
                sealing = segment is not active and not segment.name.sealed
            try:
                if segment.offsets is None:
                    self._build_index(segment)
                assert segment.offsets is not None
                slot = bisect.bisect_right(segment.offsets, offset) - 1
                position = segment.positions[slot] if slot >= 0 else 0
                data = self._read_batches(segment, memory, position, length, offset, max_bytes)
            except FileNotFoundError:
                retries += 1
                if segment.replaced:
                    continue  # compacted or deleted meanwhile: read the segments as they are now
                if not sealing:
                    raise
                # Renamed by its background seal a moment ago (POSIX reads open files by name): read it
                # again under its sealed name once the seal has recorded it.
                time.sleep(0.002)
                continue
            if data or segment is active or segment.end >= durable:
                return data
            # Compaction removed every record from ``offset`` to the segment's end: the next one holds more.
            offset = segment.end
        raise StorageError(f"{self._dir}: offset {offset} is in a segment whose seal does not finish")

    # ------------------------------------------------------------------ deleting records, compaction

    def delete_records(self, offset: int) -> int:
        """Move the log's start to ``offset`` (at most the durable end): records below it are gone for
        readers at once, and whole segments below it from the storage. Returns the start offset; durable (a
        marker file ``_start/<offset>``) before it returns, so the next owner starts there too. Raises
        :class:`FencedError` if a newer owner exists (the marker may then still count)."""
        self._check()
        with self._maintenance:
            durable = self._durable_offset
            if not 0 <= offset <= durable:
                raise OffsetOutOfRangeError(offset, self.start_offset, durable)
            if offset <= self.start_offset:
                return self.start_offset
            starts = posixpath.join(self._dir, START_DIR)
            self._fs.mkdirs(starts)
            with contextlib.suppress(FileExistsError):
                self._fs.write_file(posixpath.join(starts, start_marker_name(offset)), b"")
            self._check_not_fenced()
            with self._lock:
                self._log_start = max(self._log_start, offset)
                gone = [s for s in self._segments if s.end <= offset and s.name.sealed]
                self._segments = [s for s in self._segments if s not in gone]
                for segment in gone:
                    segment.replaced = True
            for segment in gone:
                self._fs.delete(segment.path)
            for marker in self._fs.list(starts):  # the newest marker is the start: older ones say nothing
                older = parse_start_marker(marker.name)
                if older is not None and older < offset:
                    self._fs.delete(posixpath.join(starts, marker.name))
            return self.start_offset

    @contextlib.contextmanager
    def maintenance(self) -> Iterator[None]:
        """Hold off retention and deleted records (a compaction runs inside)."""
        with self._maintenance:
            yield

    def sealed_segments(self) -> list[SealedSegment]:
        """The sealed segments, oldest first, up to the first one still sealing (what a compaction may read)."""
        out = []
        with self._lock:
            for segment in self._segments:
                if not segment.name.sealed:
                    break
                out.append(SealedSegment(segment.name, segment.path, segment.length))
        return out

    def create_cleaning(self, base: int, end: int) -> WritableFile:
        """A new file for a compaction's output covering [base, end) (:func:`create_cleaning`)."""
        self._check()
        return create_cleaning(self._fs, self._dir, self._epoch, base, end)

    def discard_path(self, path: str) -> None:
        discard_path(self._fs, path)

    def read_sealed(self, segment: SealedSegment, position: int, size: int) -> bytes:
        return read_sealed(self._fs, segment, position, size)

    def discard_cleaning(self, writer: WritableFile) -> None:
        discard_cleaning(self._fs, writer)

    def commit_cleaned(self, replaced: list[SegmentName], cleaning: str, name: SegmentName) -> None:
        """Put the written and closed ``cleaning`` file in place of the ``replaced`` sealed segments (contiguous,
        covering exactly ``name``'s offsets): rename it to ``name`` (the commit: a takeover from then on
        serves it and deletes the replaced ones), swap it in for readers, delete the replaced files. Inside
        :meth:`maintenance`."""
        assert name.end is not None and replaced and replaced[0].base == name.base and replaced[-1].end == name.end
        self._step("compact:written")
        try:
            self._fs.rename(cleaning, self._path(name))
        except FileNotFoundError:
            raise FencedError(f"{self._dir}: a newer owner removed the compaction's output") from None
        self._step("compact:renamed")
        with self._lock:
            names = [s.name for s in self._segments]
            first = names.index(replaced[0])
            assert names[first : first + len(replaced)] == replaced, "segments changed under a compaction"
            old = self._segments[first : first + len(replaced)]
            mtime = int(time.time() * 1000)
            self._segments[first : first + len(replaced)] = [
                _Segment(name, self._path(name), name.length or 0, name.end, mtime)
            ]
            for segment in old:
                segment.replaced = True
        for segment in old:
            self._step("compact:deleting")
            self._fs.delete(segment.path)

    def durable_end_of(self, epoch: int) -> int:
        """How far the log was durable when the session of ``epoch`` ended (Swift's checkpoint of an
        earlier load session): the highest end of the segments written at that epoch or before."""
        if epoch >= self._epoch:
            return self._durable_offset
        with self._lock:
            ends = [s.end for s in self._segments if s.name.epoch <= epoch]
            first = self._segments[0].base if self._segments else self._durable_offset
        return max(ends, default=first)

    def tail_offset(self, max_bytes: int) -> int:
        """An offset from which reading to the end covers at least the last ``max_bytes`` of the log (whole
        batches), for rebuilding state that lives in the tail, such as idempotent producers' sequences."""
        with self._lock:
            segments = list(self._segments) + ([self._active] if self._active is not None else [])
            durable = self._durable_offset
        remaining = max_bytes
        for segment in reversed(segments):
            if segment.length <= remaining:
                remaining -= segment.length
                continue
            if segment.offsets is None:
                self._build_index(segment)
            assert segment.offsets is not None
            cut = segment.length - remaining
            slot = max(bisect.bisect_right(segment.positions, cut) - 1, 0)
            return segment.offsets[slot] if segment.offsets else segment.base
        return segments[0].base if segments else durable

    def _read_range(self, segment: _Segment, memory: _ChunkBuffer | None, position: int, size: int) -> bytes:
        if memory is not None:
            return memory.read(position, size)
        return self._fs.read(segment.path, position, size)

    def _read_batches(
        self, segment: _Segment, memory: _ChunkBuffer | None, position: int, length: int, offset: int, max_bytes: int
    ) -> bytes:
        """Whole batches from ``position`` (an indexed batch start at or before ``offset``): the first one
        holding ``offset`` and the next ones while they fit in ``max_bytes`` (the first one always).
        Batches before ``offset`` are stepped over by their headers, never read whole; a first batch larger
        than the chunk is read again whole, in one read, rather than grown chunk by chunk (a copy each)."""
        chunk_size = max_bytes + self._config.index_interval_bytes + 65536

        def read(at: int, size: int) -> bytes:
            return self._read_range(segment, memory, at, min(size, length - at))

        start = position  # the segment position of buffer[0]
        buffer = read(start, chunk_size)
        cursor = 0
        first = -1
        while start + cursor < length:
            if len(buffer) - cursor < HEADER_SIZE:
                if first >= 0:
                    break  # the next header is not in: what is whole is enough for this read
                buffer, start, cursor = buffer[cursor:], start + cursor, 0  # less than a header: cheap
                more = read(start + len(buffer), chunk_size)
                if not more:
                    raise LogCorruptError(f"{segment.path}: batch header at byte {start} is cut")
                buffer += more
                continue
            try:
                header = read_header(buffer, cursor, whole=False)
            except BatchError as exc:
                if first >= 0:
                    break  # serve what came before the damage
                raise LogCorruptError(f"{segment.path}: batch at byte {start + cursor}: {exc}") from None
            if header.next_offset <= offset:  # before the wanted offset: step over it
                cursor += header.length
                if cursor > len(buffer):
                    start, cursor = start + cursor, 0
                    buffer = read(start, chunk_size)
                continue
            if first >= 0 and cursor + header.length - first > max_bytes:
                break
            if cursor + header.length > len(buffer):
                if first >= 0:
                    break
                # The first batch wanted is larger than the chunk: read it whole, once.
                start, cursor = start + cursor, 0
                buffer = read(start, header.length)
                if len(buffer) < header.length:
                    raise LogCorruptError(f"{segment.path}: batch at byte {start} is cut")
            if first < 0:
                first = cursor
            cursor += header.length
        if first < 0:
            return b""
        return buffer if (first, cursor) == (0, len(buffer)) else buffer[first:cursor]

    def _build_index(self, segment: _Segment) -> None:
        offsets, positions = array("q"), array("q")
        interval = self._config.index_interval_bytes
        last = -interval
        position = 0  # where ``data`` starts in the segment
        data = b""
        while position < segment.length:
            wanted = min(self._config.read_chunk_bytes, segment.length - position - len(data))
            more = self._fs.read(segment.path, position + len(data), wanted) if wanted > 0 else b""
            if not more:
                raise LogCorruptError(f"{segment.path}: unreadable batch at byte {position}")
            data += more
            cursor = 0
            while position + cursor < segment.length:
                try:
                    header = read_header(data, cursor)
                except BatchError:
                    break
                if position + cursor - last >= interval:
                    offsets.append(header.base_offset)
                    positions.append(position + cursor)
                    last = position + cursor
                cursor += header.length
            position += cursor
            data = data[cursor:]
        with self._lock:
            segment.positions = positions
            segment.offsets = offsets
