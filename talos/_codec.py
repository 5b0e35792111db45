"""The record-batch format: the unit on the wire and on disk.

Layout of one batch (big-endian, 53-byte header, then the records)::

    offset  size  field
    0       8     base_offset       int64, assigned by the partition owner
    8       4     batch_length      int32, whole batch including this header
    12      1     magic             int8, currently 1
    13      4     crc               uint32, CRC32C of bytes [17, batch_length)
    17      2     flags             int16, bits 0-2 compression (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd),
                                      bit 4 transactional, bit 5 control (Kafka's attribute bits)
    19      4     record_count      int32
    23      8     first_timestamp   int64, milliseconds since the epoch
    31      8     max_timestamp     int64
    39      8     producer_id       int64, -1 when not idempotent
    47      2     producer_epoch    int16
    49      4     base_sequence     int32
    53      ...   records

The CRC starts after itself, so neither the base offset nor the length is covered: the owner assigns
offsets by patching 8 bytes without re-checksumming, and a damaged length makes the CRC run over the
wrong bytes, which fails. A damaged base offset is caught where offsets are known (the log checks
that batches are contiguous).

Each record is ``uvarint(body_length) body`` with body::

    zigzag-varint timestamp_delta      (from first_timestamp)
    zigzag-varint key_length (-1 = no key),   key bytes
    zigzag-varint value_length (-1 = null),   value bytes
    uvarint header_count, then per header:
        uvarint name_length, UTF-8 name, zigzag-varint value_length (-1 = null), value bytes

Record ``i`` has offset ``base_offset + i`` (there is no per-record offset delta). ``flags`` bits 0-2 are the
compression codec (``BatchHeader.codec``). Bits 4 and 5 mark a transaction's batches and its commit or abort
markers (:mod:`talos._control`), as Kafka's attributes do: every reader steps over a control batch, whose offset
counts all the same; producers may set neither yet (:func:`validate_batch`). With a codec, the records section
(everything after the header) is compressed as one block, with Kafka's codec ids and framing
(:mod:`talos._compression`); the header stays uncompressed and the CRC covers the compressed bytes.
``producer_id`` is -1 (not idempotent: epoch and sequence are ignored) or an id >= 0 with an epoch in
0..32767 and sequences ``base_sequence .. base_sequence + record_count - 1`` within 0..2**31-1, or
``base_sequence`` -1: the epoch is checked (a stale one is fenced), the batch is not deduplicated (what a fenced
task's checkpoint writes use). :func:`validate_batch` checks this and the records' framing (of an uncompressed
batch: the server does not decompress, a reader does); the server stores nothing it rejects.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import crc32c as _crc32c

from talos._compression import MAX_DECOMPRESSED_SIZE, Codec, compress, decompress
from talos._errors import BatchError, CorruptBatchError, TruncatedBatchError

__all__ = [
    "CODEC_MASK",
    "CONTROL",
    "HEADER_SIZE",
    "MAGIC",
    "BatchHeader",
    "DecodedBatch",
    "Record",
    "RecordData",
    "TRANSACTIONAL",
    "crc32c",
    "decode_batches",
    "decode_records",
    "build_batch",
    "decode_records_section",
    "encode_batch",
    "one_value_batch",
    "encode_records",
    "encode_values",
    "iter_batches",
    "read_header",
    "rebatch",
    "set_base_offset",
    "validate_batch",
    "verify_batch",
    "walk_records",
]

MAGIC = 1
HEADER_SIZE = 53
CRC_START = 17
MAX_BATCH_LENGTH = 2**31 - 1
_MIN_INT64, _MAX_INT64 = -(2**63), 2**63 - 1
# The smallest record: length, timestamp delta, key length, value length and header count, a byte each.
MIN_RECORD_SIZE = 5
_MIN_INT64 = -(2**63)
_MAX_SEQUENCE = 2**31 - 1
_MAX_EPOCH = 2**15 - 1

_CODECS = frozenset(Codec)  # the flags a producer's batch may have: a codec, nothing else
CODEC_MASK = 0x07  # flags bits 0-2: the compression codec
TRANSACTIONAL = 0x10  # flags bit 4: a batch written in a transaction
CONTROL = 0x20  # flags bit 5: a transaction's commit or abort marker (also transactional), never handed to readers
_ATTRIBUTES = TRANSACTIONAL | CONTROL
_HEADER = struct.Struct(">qibIhiqqqhi")
_BASE_OFFSET = struct.Struct(">q")
assert _HEADER.size == HEADER_SIZE

Buffer = bytes | bytearray | memoryview
Headers = Sequence[tuple[str, bytes | None]]


def crc32c(data: Buffer) -> int:
    """CRC32C (Castagnoli), hardware-accelerated where the CPU has it."""
    return int(_crc32c.crc32c(data))


class BatchHeader(NamedTuple):
    """The fixed header of one batch, as read from a buffer (records not parsed). A named tuple: one is made per
    batch read, several per produce, and a frozen dataclass of eleven fields costs 5x as much to make."""

    base_offset: int
    length: int
    magic: int
    crc: int
    flags: int
    record_count: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int

    @property
    def next_offset(self) -> int:
        """The offset right after this batch's last record."""
        return self.base_offset + self.record_count

    @property
    def codec(self) -> int:
        """The compression codec of the records section (0: none)."""
        return self.flags & CODEC_MASK

    @property
    def transactional(self) -> bool:
        return bool(self.flags & TRANSACTIONAL)

    @property
    def control(self) -> bool:
        """A transaction marker: its offsets count, its record is no message."""
        return bool(self.flags & CONTROL)


@dataclass(frozen=True, slots=True)
class RecordData:
    """A record to encode: what a producer sends."""

    value: bytes | None
    key: bytes | None = None
    headers: Headers = ()
    timestamp: int | None = None  # ms since the epoch; None = now


@dataclass(frozen=True, slots=True)
class Record:
    """A decoded record with its place in the partition."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = field(default=())


def _put_uvarint(out: bytearray, n: int) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _get_uvarint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise CorruptBatchError("record runs past the end of the batch")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise CorruptBatchError("varint longer than 64 bits")


def _get_varint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    raw, pos = _get_uvarint(buf, pos, end)
    return (raw >> 1) ^ -(raw & 1), pos


def _get_bytes(buf: Buffer, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = _get_varint(buf, pos, end)
    if length == -1:
        return None, pos
    if length < -1 or pos + length > end:
        raise CorruptBatchError("field length out of bounds")
    return bytes(buf[pos : pos + length]), pos + length


def _uvarint_bytes(n: int) -> bytes:
    out = bytearray()
    _put_uvarint(out, n)
    return bytes(out)


# Varints of 0..16383 (one or two bytes), looked up instead of computed for every field of every record.
_UVARINTS = [_uvarint_bytes(n) for n in range(1 << 14)]
_NULL = _uvarint_bytes(1)  # zigzag(-1): no key / null value
_NO_HEADERS = b"\x00"
_ZERO_DELTA_NULL_KEY = b"\x00" + _NULL  # a record's timestamp delta 0 and no key
_CRC = struct.Struct(">I")


def _uvarint(n: int) -> bytes:
    return _UVARINTS[n] if n < 16384 else _uvarint_bytes(n)


def _zigzag(n: int) -> bytes:
    return _uvarint((n << 1) ^ (n >> 63))


def _field(data: bytes | None) -> bytes:
    return _NULL if data is None else _uvarint(len(data) << 1)


def encode_batch(
    records: Sequence[RecordData],
    *,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    compression: int = 0,
    attributes: int = 0,
) -> bytes:
    """Encode records into one batch. Records without a timestamp get the current time."""
    if not records:
        raise ValueError("a batch holds at least one record")
    body, first, last = encode_records(records, int(time.time() * 1000))
    return build_batch(
        body,
        len(records),
        first,
        last,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        compression=compression,
        attributes=attributes,
    )


def one_value_batch(value: bytes, now: int) -> tuple[bytearray, BatchHeader]:
    """``encode_batch([RecordData(value, None, [], now)])`` and its header, made in one buffer without a record
    list or a header read back: the single-message produce's batch (what the log takes over as it is)."""
    batch, crc = _one_value_batch(value, now)
    return batch, BatchHeader(0, len(batch), MAGIC, crc, 0, 1, now, now, -1, -1, -1)


def _one_value_batch_py(value: bytes, now: int) -> tuple[bytearray, int]:
    """The batch of :func:`one_value_batch`, and its CRC."""
    size = len(value)
    field = _uvarint(size << 1)
    record = len(field) + size + 3  # timestamp delta 0, the null key, the value's length, the value, no headers
    prefix = _uvarint(record)
    length = HEADER_SIZE + len(prefix) + record
    if length > MAX_BATCH_LENGTH:
        raise ValueError("batch too large")
    batch = bytearray(HEADER_SIZE)
    batch += prefix
    batch += _ZERO_DELTA_NULL_KEY
    batch += field
    batch += value
    batch += _NO_HEADERS
    _HEADER.pack_into(batch, 0, 0, length, MAGIC, 0, 0, 1, now, now, -1, -1, -1)
    crc = _crc32c.crc32c(memoryview(batch)[CRC_START:])
    _CRC.pack_into(batch, 13, crc)
    return batch, crc


_one_value_batch: Callable[[bytes, int], tuple[bytearray, int]] = _one_value_batch_py


def rebatch(header: BatchHeader, run: Sequence[Record]) -> bytes:
    """A batch of some records of the batch ``header`` heads (``run``: consecutive, in offset order), with its
    producer fields (the sequence moved on to the first kept record), flags and codec: what compaction keeps of
    a batch, and what a fetch quota cuts it to."""
    first = run[0].offset - header.base_offset
    return encode_batch(
        [RecordData(r.value, r.key, r.headers, r.timestamp) for r in run],
        base_offset=run[0].offset,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence + first if header.base_sequence >= 0 else -1,
        compression=header.codec,
        attributes=header.flags & ~CODEC_MASK,
    )


def build_batch(
    body: Buffer,
    record_count: int,
    first_timestamp: int,
    max_timestamp: int,
    *,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    compression: int = 0,
    attributes: int = 0,
) -> bytes:
    """A batch around an encoded records section (:func:`encode_records`): the header, the CRC. With a
    ``compression`` codec (a :class:`~talos._compression.Codec`) the section is compressed first.
    ``attributes``: :data:`TRANSACTIONAL` and :data:`CONTROL`, the flags beside the codec."""
    if attributes & ~_ATTRIBUTES or compression & ~CODEC_MASK:
        raise ValueError(f"attributes {attributes:#x} or compression {compression} is not a flag of the format")
    if compression:
        body = compress(compression, body)
    length = HEADER_SIZE + len(body)
    if length > MAX_BATCH_LENGTH:
        raise ValueError("batch too large")
    header = bytearray(HEADER_SIZE)
    _HEADER.pack_into(
        header, 0, base_offset, length, MAGIC, 0, compression | attributes, record_count, first_timestamp,
        max_timestamp, producer_id, producer_epoch, base_sequence,
    )  # fmt: skip
    # The CRC runs on from the header's tail into the body: the body is copied once, into the joined batch.
    crc = _crc32c.crc32c(body, _crc32c.crc32c(memoryview(header)[CRC_START:]))
    struct.pack_into(">I", header, 13, crc)
    return b"".join((header, body))


def _encode_records_py(records: Sequence[RecordData], now: int) -> tuple[bytes, int, int]:
    """The records section of a batch (uncompressed), its first and its largest timestamp. Records without a
    timestamp get ``now``."""
    stamps = [now if r.timestamp is None else r.timestamp for r in records]
    first = stamps[0]
    parts: list[bytes] = []
    append = parts.append
    for rec, stamp in zip(records, stamps, strict=True):
        key, value = rec.key, rec.value
        if rec.headers:
            tail = bytearray(_uvarint(len(rec.headers)))
            for name, header_value in rec.headers:
                encoded = name.encode()
                tail += _uvarint(len(encoded))
                tail += encoded
                tail += _field(header_value)
                if header_value is not None:
                    tail += header_value
            trailer = bytes(tail)
        else:
            trailer = _NO_HEADERS
        head = _zigzag(stamp - first) + _field(key) + (key or b"") + _field(value)
        size = len(head) + (len(value) if value is not None else 0) + len(trailer)
        append(_uvarint(size))
        append(head)
        if value:
            append(value)
        append(trailer)
    return b"".join(parts), first, max(stamps)


encode_records: Callable[[Sequence[RecordData], int], tuple[bytes, int, int]] = _encode_records_py


def _encode_values_py(keys: Sequence[bytes | None] | None, values: Sequence[bytes | None], delta: int) -> bytes:
    """The records section of ``values`` (with ``keys``, or none), without headers, all with the timestamp
    ``delta`` ms after the batch's first: what ``Producer.send_many`` queues, without an object per record.
    ``encode_values(keys, values, 0)`` is ``encode_records``'s body for those records with one timestamp."""
    stamp = _zigzag(delta)
    parts: list[bytes] = []
    append = parts.append
    for key, value in zip([None] * len(values) if keys is None else keys, values, strict=True):
        head = stamp + _field(key) + (key or b"") + _field(value)
        append(_uvarint(len(head) + (len(value) if value is not None else 0) + len(_NO_HEADERS)))
        append(head)
        if value:
            append(value)
        append(_NO_HEADERS)
    return b"".join(parts)


encode_values: Callable[[Sequence[bytes | None] | None, Sequence[bytes | None], int], bytes] = _encode_values_py


def read_header(buf: Buffer, pos: int = 0, *, whole: bool = True) -> BatchHeader:
    """Parse the header at ``pos`` and check magic and length against the buffer. No CRC check.
    With ``whole=False`` only the header need be in ``buf`` (to learn how long the batch is)."""
    available = len(buf) - pos
    if available < HEADER_SIZE:
        raise TruncatedBatchError(f"{available} bytes left, a batch header needs {HEADER_SIZE}")
    fields = _HEADER.unpack_from(buf, pos)
    header = BatchHeader._make(fields)
    if header.magic != MAGIC:
        raise CorruptBatchError(f"unknown magic {header.magic}")
    if header.length < HEADER_SIZE or header.record_count < 1:
        raise CorruptBatchError(f"impossible length {header.length} / count {header.record_count}")
    if whole and header.length > available:
        raise TruncatedBatchError(f"batch of {header.length} bytes, only {available} present")
    return header


def verify_batch(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos`` and verify the CRC of the whole batch."""
    header = read_header(buf, pos)
    actual = crc32c(memoryview(buf)[pos + CRC_START : pos + header.length])
    if actual != header.crc:
        raise CorruptBatchError(f"CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}")
    return header


def iter_batches(buf: Buffer, pos: int = 0, *, verify: bool = True) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` of consecutive batches; raises on the first bad or partial one."""
    view = memoryview(buf)
    end = len(view)
    while pos < end:
        header = verify_batch(view, pos) if verify else read_header(view, pos)
        yield pos, header
        pos += header.length


def set_base_offset(buf: bytearray | memoryview, base_offset: int, pos: int = 0) -> None:
    """Assign the batch at ``pos`` its offsets: patches 8 bytes; the CRC stays valid."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


def validate_batch(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Check what the log relies on before a batch is stored: the CRC, the header's fields, and the
    framing of the records (each record's length walked once, nothing inside it decoded): they exactly
    fill the batch and there are ``record_count`` of them, so the offsets the log assigns are the records'.
    Raises :class:`CorruptBatchError`.

    The fields inside a record are not parsed here (that would cost ~9x as much, on every produce): a
    record whose fields do not decode is the producer's own garbage, and every reader steps over such a
    batch (:func:`decode_batches`) instead of failing.

    A compressed batch (``flags`` 1-4) is not decompressed: its CRC, header and producer fields are checked,
    and its count against the most a reader decompresses; its records are checked where they are read."""
    header = verify_batch(buf, pos)
    if header.flags & ~TRANSACTIONAL not in _CODECS:
        raise CorruptBatchError(
            f"unsupported flags {header.flags:#x} (bits 0-2 name the compression, 0-4; bit 4 a transaction's "
            "batch; markers are written by coordinators only)"
        )
    if header.transactional and (header.producer_id < 0 or header.base_sequence < 0):
        raise CorruptBatchError("a transactional batch needs its producer id, epoch and sequence")
    count = header.record_count
    # The records must fit the batch (refused before walking an absurd count) or, compressed, what a reader
    # decompresses at most: the offsets a false count would take are refused without decompressing.
    room = MAX_DECOMPRESSED_SIZE if header.codec else header.length - HEADER_SIZE
    if count > room // MIN_RECORD_SIZE:
        raise CorruptBatchError(f"record_count {count} cannot fit in {room} bytes of records")
    if header.producer_id >= 0:
        last_sequence = header.base_sequence + count - 1
        if not 0 <= header.producer_epoch <= _MAX_EPOCH or header.base_sequence < -1 or last_sequence > _MAX_SEQUENCE:
            raise CorruptBatchError(
                f"producer {header.producer_id}: epoch {header.producer_epoch} or sequences "
                f"{header.base_sequence}..{last_sequence} out of range"
            )
    elif header.producer_id != -1:
        raise CorruptBatchError(f"producer_id {header.producer_id} is neither -1 nor an id")
    if not header.codec:  # a compressed section is walked by its readers, once decompressed
        walk_records(buf, pos + HEADER_SIZE, pos + header.length, count)
    return header


def _walk_records_py(buf: Buffer, start: int, end: int, count: int) -> None:
    """Check that ``count`` records exactly fill ``buf[start:end]`` by their lengths (nothing inside decoded)."""
    cursor = start
    found = 0
    while cursor < end and found <= count:
        size = buf[cursor]
        # records under 128 bytes (one-byte length) are the common case: read inline. A negative "byte" (a
        # signed view) is read as a varint, which moves on, not as a length that would stand still.
        if 0 <= size < 0x80:
            cursor += 1 + size
        else:
            size, cursor = _get_uvarint(buf, cursor, end)
            cursor += size
        found += 1
    if cursor != end:
        raise CorruptBatchError(f"record {found - 1} runs past the end of the batch")
    if found != count:
        held = found if found <= count else "more"
        raise CorruptBatchError(f"the header counts {count} records, the batch holds {held}")


walk_records: Callable[[Buffer, int, int, int], None] = _walk_records_py


def decode_records(
    buf: Buffer, pos: int = 0, *, verify: bool = True, max_decompressed: int = MAX_DECOMPRESSED_SIZE
) -> list[Record]:
    """Decode every record of the batch at ``pos``; raises :class:`BatchError` if any is damaged, or if it is
    compressed and its records take more than ``max_decompressed`` bytes."""
    header = verify_batch(buf, pos) if verify else read_header(buf, pos)
    start, end = pos + HEADER_SIZE, pos + header.length
    if header.codec:
        buf = decompress(header.codec, memoryview(buf)[start:end], max_size=max_decompressed)
        start, end = 0, len(buf)
    if header.record_count > (end - start) // MIN_RECORD_SIZE:
        raise CorruptBatchError(f"the header counts {header.record_count} records; they cannot fit")
    return decode_records_section(buf, start, end, header.record_count, header.base_offset, header.first_timestamp)


def _decode_records_py(
    buf: Buffer, start: int, end: int, count: int, base_offset: int, first_timestamp: int
) -> list[Record]:
    """Decode the ``count`` records of an (uncompressed) records section ``buf[start:end]``."""
    cursor = start
    out: list[Record] = []
    for index in range(count):
        size, cursor = _get_uvarint(buf, cursor, end)
        record_end = cursor + size
        if record_end > end:
            raise CorruptBatchError(f"record {index} runs past the end of the batch")
        delta, cursor = _get_varint(buf, cursor, record_end)
        key, cursor = _get_bytes(buf, cursor, record_end)
        value, cursor = _get_bytes(buf, cursor, record_end)
        headers_count, cursor = _get_uvarint(buf, cursor, record_end)
        cursor, headers = _walk_headers(buf, cursor, record_end, headers_count) if headers_count else (cursor, ())
        if cursor != record_end:
            raise CorruptBatchError(f"record {index}: its fields do not fill its declared length")
        stamp = first_timestamp + delta
        if not _MIN_INT64 <= stamp <= _MAX_INT64:  # a damaged delta: no 64-bit reader could take it
            raise CorruptBatchError(f"record {index}: timestamp {stamp} is outside 64 bits")
        out.append(Record(base_offset + index, stamp, key, value, headers))
    if cursor != end:
        raise CorruptBatchError(f"the header counts {count} records, the batch holds more")
    return out


decode_records_section: Callable[[Buffer, int, int, int, int, int], list[Record]] = _decode_records_py

# The same five functions compiled (talos/_speedups.c, built by the install where a C compiler is found):
# 10-60x faster. TALOS_NO_SPEEDUPS=1 keeps the pure-Python ones above (to compare, or to rule the C out).
SPEEDUPS = False
if os.environ.get("TALOS_NO_SPEEDUPS") != "1":
    try:
        from talos import _speedups
    except ImportError:
        pass
    else:
        encode_records = _speedups.encode_records
        encode_values = _speedups.encode_values
        walk_records = _speedups.walk_records
        decode_records_section = _speedups.decode_records_section
        _one_value_batch = _speedups.one_value_batch
        SPEEDUPS = True


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """One batch of a fetched buffer: its records, or (``error`` set, no records) why it was skipped."""

    header: BatchHeader
    records: list[Record]
    error: BatchError | None = None


def decode_batches(
    buf: Buffer, pos: int = 0, *, verify: bool = True, max_decompressed: int = MAX_DECOMPRESSED_SIZE
) -> Iterator[DecodedBatch]:
    """Decode consecutive batches. A damaged batch whose header is readable comes back with ``error`` and
    no records, so a reader can step past it to ``header.next_offset`` instead of failing on stored data
    (so does a compressed one over ``max_decompressed``). A header that cannot be read raises
    :class:`BatchError`: nothing after it can be found."""
    end = len(buf)
    while pos < end:
        header = read_header(buf, pos)
        try:
            decoded = DecodedBatch(header, decode_records(buf, pos, verify=verify, max_decompressed=max_decompressed))
        except BatchError as exc:
            decoded = DecodedBatch(header, [], exc)
        yield decoded
        pos += header.length


def _walk_headers(
    buf: Buffer, cursor: int, record_end: int, count: int
) -> tuple[int, tuple[tuple[str, bytes | None], ...]]:
    """The headers of one record (the rare path): each name must be UTF-8. Returns the cursor after them."""
    if count > record_end - cursor:  # a header takes at least one byte: refuse a huge count before looping
        raise CorruptBatchError(f"{count} headers cannot fit in the record")
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        name_length, cursor = _get_uvarint(buf, cursor, record_end)
        if cursor + name_length > record_end:
            raise CorruptBatchError("header name runs past the record")
        try:
            name = str(buf[cursor : cursor + name_length], "utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptBatchError("header name is not UTF-8") from exc
        cursor += name_length
        value, cursor = _get_bytes(buf, cursor, record_end)
        headers.append((name, value))
    return cursor, tuple(headers)
