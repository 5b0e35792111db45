"""Log compaction: keep the last record of every key, in the owner's background (docs/compaction.md).

A pass, as Kafka's cleaner does it:

1. The sealed segments are *clean* (generation >= 1: written by an earlier pass) up to the first *dirty* one
   (generation 0: as produced). The active segment is never read. A pass runs when the dirty share of the
   bytes is above ``dirty_ratio``, or the oldest dirty record is older than ``max_lag_ms``, or when forced.
2. The dirty segments are read in order into a :class:`~fencing.key_index.KeyIndex` (key → latest offset),
   each whole or not at all: a segment holding a record younger than ``min_lag_ms`` ends the pass there, and
   so does a full index (the next pass goes on from there).
3. Every segment from the log's start to the last one indexed is rewritten, in groups of at most
   ``segment_bytes`` of input, keeping a record unless a later record of its key is in the index. A tombstone
   (a key with a null value) is kept too, until it has been through one pass already and is older than
   ``delete_retention_ms``: by then every older value of its key is gone, and a reader that kept up has seen
   it. Records without a key (written before the topic was compacted) are kept. Offsets never change: a batch
   whose records all stay is copied as it is; otherwise each run of consecutive kept records becomes a batch
   of its own at its first record's offset (the batch format has no per-record offsets).
Transactions, as Kafka's cleaner: a transaction's records count only once its marker says it committed (their
keys are indexed then; an aborted transaction's batches are removed whole), a pass ends before the segment
holding a transaction not decided in what it read, and markers are always kept (their offsets are a reader's
to step over; the partition's aborted index refers to them). A clean segment holds no aborted record.

4. Each group is swapped in under the fencing protocol (:meth:`fencing.log.PartitionLog.create_cleaning` and
   :meth:`~fencing.log.PartitionLog.commit_cleaned`): written as ``<base>.<epoch>.<end>.cleaning``, renamed
   to its sealed name with the next generation (the commit), then the segments it replaces are deleted.

Reads and writes go through a :class:`Throttle` (bytes per second), so a pass never takes the disk from the
partitions' flushes.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from fencing.errors import LogCorruptError, LogError
from fencing.filesystem import FileSystem, WritableFile
from fencing.key_index import KeyIndex
from fencing.log import (
    PartitionLog,
    SealedSegment,
    create_cleaning,
    discard_cleaning,
    discard_path,
    read_sealed,
)
from fencing.segments import SegmentName
from talos import HEADER_SIZE, BatchError, BatchHeader, Record, decode_records, read_header
from talos._codec import rebatch
from talos._control import parse_marker

__all__ = [
    "CompactionReport",
    "CompactionSettings",
    "Output",
    "SegmentSource",
    "StoredSegments",
    "Throttle",
    "commit",
    "compact",
    "dirty_ratio",
    "write_pass",
]

log = logging.getLogger("talos.compaction")

_READ_CHUNK = 4 * 1024 * 1024
_WRITE_CHUNK = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class CompactionSettings:
    min_lag_ms: int = 0
    max_lag_ms: int | None = None
    delete_retention_ms: int = 86_400_000
    dirty_ratio: float = 0.5
    segment_bytes: int = 128 * 1024 * 1024  # input per output segment


@dataclass
class CompactionReport:
    """What one pass did."""

    segments_in: int = 0
    segments_out: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    cleaned_to: int = 0  # offsets below this are compacted now
    seconds: float = 0.0
    index_keys: int = 0
    index_bytes: int = 0
    outputs: list[str] = field(default_factory=list)


class Throttle:
    """At most ``bytes_per_second`` on average (None: unlimited); :meth:`spend` sleeps to keep to it."""

    def __init__(
        self,
        bytes_per_second: float | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rate = bytes_per_second
        self._clock = clock
        self._sleep = sleep
        self._started = clock()
        self._spent = 0.0

    def spend(self, size: int) -> None:
        if not self.rate:
            return
        self._spent += size
        ahead = self._spent / self.rate - (self._clock() - self._started)
        if ahead > 0:
            self._sleep(ahead)
        elif ahead < -1.0:  # idle for a while: no credit beyond a second's worth
            self._started = self._clock() - 1.0
            self._spent = 0.0


class SegmentSource(Protocol):
    """What a pass reads and writes through: the owner's :class:`~fencing.log.PartitionLog`, or, in a worker
    process, :class:`StoredSegments` (the same files, the same fencing checks)."""

    @property
    def directory(self) -> str: ...

    def read_sealed(self, segment: SealedSegment, position: int, size: int) -> bytes: ...

    def create_cleaning(self, base: int, end: int) -> WritableFile: ...

    def discard_cleaning(self, writer: WritableFile) -> None: ...

    def discard_path(self, path: str) -> None: ...


@dataclass(frozen=True, slots=True)
class StoredSegments:
    """A partition directory's sealed segments as a worker process sees them: read by path, compaction output
    created under the owner's ``epoch`` with the same check against newer owners as the log's."""

    fs: FileSystem
    directory: str
    epoch: int

    def read_sealed(self, segment: SealedSegment, position: int, size: int) -> bytes:
        return read_sealed(self.fs, segment, position, size)

    def create_cleaning(self, base: int, end: int) -> WritableFile:
        return create_cleaning(self.fs, self.directory, self.epoch, base, end)

    def discard_cleaning(self, writer: WritableFile) -> None:
        discard_cleaning(self.fs, writer)

    def discard_path(self, path: str) -> None:
        discard_path(self.fs, path)


@dataclass(frozen=True, slots=True)
class Output:
    """A written and closed ``.cleaning`` file, to be committed in place of ``replaced``."""

    replaced: list[SegmentName]
    cleaning: str
    name: SegmentName


def dirty_ratio(segments: list[SealedSegment]) -> float:
    """The share of the sealed bytes that no pass has compacted yet."""
    total = sum(s.length for s in segments)
    dirty = sum(s.length for s in segments if s.name.generation == 0)
    return dirty / total if total else 0.0


def _batches(plog: SegmentSource, segment: SealedSegment, throttle: Throttle) -> Iterator[tuple[BatchHeader, bytes]]:
    """Each batch of a sealed segment with its header, read in chunks (a damaged tail ends it, as for readers)."""
    position = 0
    buffer = b""
    while position < segment.length:
        wanted = min(_READ_CHUNK, segment.length - position - len(buffer))
        more = plog.read_sealed(segment, position + len(buffer), wanted) if wanted > 0 else b""
        throttle.spend(len(more))
        if not more and len(buffer) < HEADER_SIZE:
            return
        buffer += more
        cursor = 0
        while position + cursor < segment.length:
            try:
                header = read_header(buffer, cursor, whole=False)
            except BatchError as exc:  # no batch after it can be found: leave the segment as it is
                raise LogCorruptError(f"{segment.path}: batch at byte {position + cursor}: {exc}") from None
            if cursor + header.length > len(buffer):
                if not more:  # cut short: nothing more will come
                    return
                break
            yield header, buffer[cursor : cursor + header.length]
            cursor += header.length
        if cursor == 0 and not more:
            return
        position += cursor
        buffer = buffer[cursor:]


def _decoded(batch: bytes) -> list[Record] | None:
    try:
        return decode_records(batch)
    except BatchError:
        return None  # damaged: copied as it is, for readers to step over as they do today


def compact(
    plog: PartitionLog,
    settings: CompactionSettings,
    index: KeyIndex,
    *,
    throttle: Throttle | None = None,
    now_ms: int | None = None,
    force: bool = False,
) -> CompactionReport | None:
    """One compaction pass over ``plog`` in this process (:func:`write_pass`, then :func:`commit`); None when
    nothing was due. Raises :class:`~fencing.errors.FencedError` when a newer owner took the partition over
    (nothing of this pass is then left in its place) and :class:`~fencing.errors.StorageError` when the
    storage failed."""
    started = time.monotonic()
    with plog.maintenance():
        written = write_pass(
            plog, plog.sealed_segments(), settings, index, throttle=throttle, now_ms=now_ms, force=force
        )
        if written is None:
            return None
        outputs, report = written
        commit(plog, outputs)
    report.seconds = time.monotonic() - started
    return report


def commit(plog: PartitionLog, outputs: list[Output]) -> None:
    """Put a pass's outputs in place, in order (inside ``plog.maintenance()``, with the segments the pass read
    still in place); an output not committed is deleted."""
    names = [str(o.name) for o in outputs]
    try:
        while outputs:
            output = outputs[0]
            plog.commit_cleaned(output.replaced, output.cleaning, output.name)
            outputs = outputs[1:]
    finally:
        for output in outputs:
            with contextlib.suppress(LogError, OSError):
                plog.discard_path(output.cleaning)
    log.info("%s: compacted segments in place: %s", plog.directory, names)


def write_pass(
    source: SegmentSource,
    segments: list[SealedSegment],
    settings: CompactionSettings,
    index: KeyIndex,
    *,
    throttle: Throttle | None = None,
    now_ms: int | None = None,
    force: bool = False,
) -> tuple[list[Output], CompactionReport] | None:
    """Read ``segments`` (the log's sealed ones, oldest first) and write the compacted ones as ``.cleaning``
    files, ready for :func:`commit`; None when nothing was due. Runs in any process: it changes nothing
    readers see."""
    throttle = throttle or Throttle(None)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    started = time.monotonic()
    first_dirty = next((i for i, s in enumerate(segments) if s.name.generation == 0), len(segments))
    if first_dirty == len(segments):
        return None
    if (
        not force
        and dirty_ratio(segments) <= settings.dirty_ratio
        and not _lag_due(source, segments[first_dirty], settings, now_ms)
    ):
        return None
    report = CompactionReport()
    index.clear()
    indexed = _index_dirty(source, segments, first_dirty, index, settings, now_ms, throttle, report)
    last = indexed.last
    if last < first_dirty:
        return None
    report.index_keys, report.index_bytes = index.size, index.memory_bytes
    outputs: list[Output] = []
    try:
        for group in _groups(segments[: last + 1], settings.segment_bytes):
            output = _rewrite(source, group, index, indexed.aborted, settings, now_ms, throttle, report)
            if output is not None:
                outputs.append(output)
    except BaseException:
        for output in outputs:
            with contextlib.suppress(LogError, OSError):
                source.discard_path(output.cleaning)
        raise
    report.cleaned_to = segments[last].name.end or 0
    report.seconds = time.monotonic() - started
    log.info(
        "%s: compacting %d segments into %d below offset %d: %d of %d records removed (%d tombstones), "
        "%d bytes read, %d written, %.2fs",
        source.directory, report.segments_in, report.segments_out, report.cleaned_to, report.records_removed,
        report.records_read, report.tombstones_removed, report.bytes_read, report.bytes_written, report.seconds,
    )  # fmt: skip
    return outputs, report


def _lag_due(plog: SegmentSource, first_dirty: SealedSegment, settings: CompactionSettings, now_ms: int) -> bool:
    """Whether the oldest dirty record is older than ``max_lag_ms``."""
    if settings.max_lag_ms is None:
        return False
    head = plog.read_sealed(first_dirty, 0, HEADER_SIZE)
    try:
        return now_ms - read_header(head, whole=False).first_timestamp > settings.max_lag_ms
    except BatchError:
        return False


@dataclass
class _Indexed:
    """What indexing the dirty segments found: the last segment a pass may rewrite, and the batches of aborted
    transactions there, as (producer id, base offset)."""

    last: int
    aborted: set[tuple[int, int]] = field(default_factory=set)


@dataclass
class _Open:
    """A transaction whose marker is not read yet: where it began, its batches and their keyed records."""

    position: int  # of the segment of its first batch
    batches: list[int] = field(default_factory=list)
    keys: list[tuple[bytes, int]] = field(default_factory=list)


def _index_dirty(
    plog: SegmentSource,
    segments: list[SealedSegment],
    first_dirty: int,
    index: KeyIndex,
    settings: CompactionSettings,
    now_ms: int,
    throttle: Throttle,
    report: CompactionReport,
) -> _Indexed:
    """Index the dirty segments, each whole; the position of the last one indexed whole, old enough and before
    any transaction still undecided (``first_dirty - 1`` if none). Keys of a segment indexed in part stay in
    the index: they are later records of their keys, so removing what they supersede is still right. A
    transaction's keys go in only at its commit marker (an aborted one's never)."""
    found = _Indexed(first_dirty - 1)
    open_: dict[int, _Open] = {}

    def decided_before() -> int:
        return min((t.position for t in open_.values()), default=len(segments)) - 1

    for position in range(first_dirty, len(segments)):
        segment = segments[position]
        newest = 0
        for header, batch in _batches(plog, segment, throttle):
            report.bytes_read += len(batch)
            newest = max(newest, header.max_timestamp)
            records = _decoded(batch)
            if header.control:
                if not _ended(header, records, open_, index, found):
                    found.last = min(found.last, decided_before())
                    return found  # full: this segment waits for the next pass
                continue
            if header.transactional and header.producer_id >= 0:
                txn = open_.setdefault(header.producer_id, _Open(position))
                txn.batches.append(header.base_offset)
                txn.keys += [(r.key, r.offset) for r in records or () if r.key is not None]
                continue
            for record in records or ():
                if record.key is not None and not index.put(record.key, record.offset):
                    found.last = min(found.last, decided_before())
                    return found  # full: this segment waits for the next pass
        if now_ms - newest < settings.min_lag_ms:
            break  # holds records too young to compact
        found.last = position
    found.last = min(found.last, decided_before())
    return found


def _ended(
    header: BatchHeader, records: list[Record] | None, open_: dict[int, _Open], index: KeyIndex, found: _Indexed
) -> bool:
    """A marker read: its transaction's keys indexed (commit) or its batches noted as aborted. False when the
    index is full."""
    try:
        marker = parse_marker(header, records or [])
    except BatchError:
        return True  # not a transaction's end: kept, changes nothing
    txn = open_.pop(marker.producer_id, None)
    if txn is None:
        return True
    if not marker.committed:
        found.aborted.update((marker.producer_id, base) for base in txn.batches)
        return True
    return all(index.put(key, offset) for key, offset in txn.keys)


def _groups(segments: list[SealedSegment], limit: int) -> Iterator[list[SealedSegment]]:
    group: list[SealedSegment] = []
    size = 0
    for segment in segments:
        if group and size + segment.length > limit:
            yield group
            group, size = [], 0
        group.append(segment)
        size += segment.length
    if group:
        yield group


def _kept_runs(records: list[Record], keep: list[bool]) -> Iterator[list[Record]]:
    run: list[Record] = []
    for record, kept in zip(records, keep, strict=True):
        if kept:
            run.append(record)
        elif run:
            yield run
            run = []
    if run:
        yield run


def _rewrite(
    plog: SegmentSource,
    group: list[SealedSegment],
    index: KeyIndex,
    aborted: set[tuple[int, int]],
    settings: CompactionSettings,
    now_ms: int,
    throttle: Throttle,
    report: CompactionReport,
) -> Output | None:
    base, end = group[0].name.base, group[-1].name.end
    assert end is not None
    writer = plog.create_cleaning(base, end)
    removed_here = 0
    pending: list[bytes] = []
    pending_bytes = written = 0

    def write(data: bytes) -> None:
        nonlocal pending_bytes, written
        pending.append(data)
        pending_bytes += len(data)
        written += len(data)
        if pending_bytes >= _WRITE_CHUNK:
            flush()

    def flush() -> None:
        nonlocal pending_bytes
        if pending:
            data = b"".join(pending)
            writer.write(data)
            throttle.spend(len(data))
            pending.clear()
            pending_bytes = 0

    try:
        for segment in group:
            cleaned_before = segment.name.generation > 0
            for header, batch in _batches(plog, segment, throttle):
                report.bytes_read += len(batch)
                if header.control:  # a transaction's marker: always kept
                    write(batch)
                    continue
                if header.transactional and (header.producer_id, header.base_offset) in aborted:
                    report.records_read += header.record_count
                    removed_here += header.record_count
                    continue
                records = _decoded(batch)
                if records is None:
                    write(batch)
                    continue
                report.records_read += len(records)
                keep = []
                for record in records:
                    if record.key is None:
                        keep.append(True)
                        continue
                    if index.get(record.key) > record.offset:
                        keep.append(False)  # a later record of the key exists
                        continue
                    expired = cleaned_before and now_ms - header.max_timestamp > settings.delete_retention_ms
                    if record.value is None and expired:
                        report.tombstones_removed += 1
                        keep.append(False)
                        continue
                    keep.append(True)
                dropped = keep.count(False)
                removed_here += dropped
                if not dropped:
                    write(batch)
                    continue
                for run in _kept_runs(records, keep):
                    write(rebatch(header, run))
        flush()
        writer.sync()
        writer.close()
    except BaseException:
        _discard(plog, writer)
        raise
    report.records_removed += removed_here
    report.segments_in += len(group)
    if removed_here == 0 and len(group) == 1 and group[0].name.generation > 0:
        _discard(plog, writer)  # nothing changed: the segment stays as it is
        return None
    generation = 1 + max(s.name.generation for s in group)
    epoch = max(s.name.epoch for s in group)
    name = SegmentName(base, epoch, end, written, generation=generation)
    report.bytes_written += written
    report.segments_out += 1
    report.outputs.append(str(name))
    return Output([s.name for s in group], writer.path, name)


def _discard(plog: SegmentSource, writer: WritableFile) -> None:
    try:
        plog.discard_cleaning(writer)
    except (LogError, OSError) as exc:
        log.warning("%s: could not remove a compaction's output: %r", plog.directory, exc)
