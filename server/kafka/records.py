"""Record batches between Kafka's format (record batch v2, magic 2) and Talos's (:mod:`talos._codec`).

A Kafka client produces and fetches Kafka batches; a Talos partition stores Talos batches. The two carry the
same things (producer id, epoch and base sequence, a base and a largest timestamp, keys, values, headers,
one compression codec over the records section, with the same codec ids and framing) but are not laid out
alike, so every produce and every fetch through the Kafka listener converts.

The batch headers (big-endian)::

    Kafka, 61 bytes                                 Talos, 53 bytes
    baseOffset int64                                base_offset int64
    batchLength int32, bytes after itself           batch_length int32, the whole batch
    partitionLeaderEpoch int32                      -
    magic int8 = 2                                  magic int8 = 1
    crc uint32, CRC-32C of attributes..end          crc uint32, CRC-32C of flags..end
    attributes int16: codec, timestampType,         flags int16: the codec, nothing else
        isTransactional, isControlBatch
    lastOffsetDelta int32                           -
    baseTimestamp, maxTimestamp int64               first_timestamp, max_timestamp int64
    producerId int64, producerEpoch int16,          producer_id int64, producer_epoch int16,
        baseSequence int32                              base_sequence int32
    records count int32                             record_count int32 (after flags)

The records::

    Kafka                                           Talos
    varint length (zigzag)                          uvarint length
    attributes int8 (unused)                        -
    varlong timestampDelta (zigzag)                 varlong timestamp delta (zigzag)
    varint offsetDelta (zigzag)                     - (record i has offset base + i)
    varint keyLength (zigzag, -1 null), key         the same
    varint valueLength (zigzag, -1 null), value     the same
    varint headerCount (zigzag)                     uvarint header count
    per header: varint nameLength (zigzag), name,   uvarint name length, name,
        varint valueLength (zigzag, -1 null), value     the same value

So a record converts by dropping (or adding) its attributes byte and offset delta and rewriting three kinds
of varint; the timestamp delta, the key and the value are copied as they are. A record without headers
(the common case) converts as two slices of its bytes around a new length.

Talos has no per-record offset delta, so a produced Kafka batch must number its records 0..n-1; it has no
transactions, so transactional and control batches are refused. A compressed batch is decompressed
(bounded, a few kilobytes can claim gigabytes) and, towards Talos, compressed again with its codec: the
section is not the same bytes in the two formats.

This runs on every produce and fetch. Records without headers, the common case, are converted by reading
only their length, timestamp delta and offset delta and copying the rest; the compiled Talos decoder
(``talos._speedups``, through :data:`talos._codec.decode_records_section`) then checks every field in C.
Records with headers, and all records where the compiled codec is not built, take a careful path that
reads every field in Python. Both paths take exactly the same batches.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from operator import attrgetter

import crc32c as _crc32c

from talos import _codec
from talos._codec import Buffer
from talos._compression import MAX_DECOMPRESSED_SIZE, Codec, compress, decompress
from talos._errors import BatchError, CorruptBatchError, TruncatedBatchError

__all__ = ["KafkaRecordError", "kafka_to_talos", "talos_to_kafka"]

_Compiled = Callable[[bytes | bytearray | memoryview, int, int, int], "tuple[bytes, int, int] | None"]
# ``_convert.kafka_records_plain`` with a ``reserve``: the records in a bytearray after that much room.
_CompiledToTalos = Callable[[Buffer, int, int, int, int], "tuple[bytearray, int, int] | None"]
_compiled_plain: _CompiledToTalos | None
_compiled_back: _Compiled | None
try:  # the compiled common cases (server/kafka/_convert.c); without a C compiler, the Python loops below
    from server.kafka import _convert

    _compiled_plain, _compiled_back = _convert.kafka_records_plain, _convert.talos_records_plain
except ImportError:  # pragma: no cover - the install builds it where it can
    _compiled_plain = _compiled_back = None


# Kafka's error codes, the ones a conversion answers with.
_CORRUPT_MESSAGE = 2
_MESSAGE_TOO_LARGE = 10
_INVALID_REQUEST = 42
_UNSUPPORTED_FOR_MESSAGE_FORMAT = 43

_KAFKA_HEADER = struct.Struct(">qiibIhiqqqhii")
_KAFKA_HEADER_SIZE = 61
_KAFKA_LENGTH_END = 12  # batchLength counts the bytes after itself
_KAFKA_MAGIC_AT = 16  # where magic 0 and 1 message sets keep theirs too: checked before anything else
_KAFKA_CRC_START = 21
_KAFKA_CRC_AT = 17
_KAFKA_MAGIC = 2
_KAFKA_MIN_RECORD = 7  # length, attributes, timestamp delta, offset delta, key, value, header count
_CODEC_MASK = _codec.CODEC_MASK
_TRANSACTIONAL = _codec.TRANSACTIONAL  # Kafka's attribute bits and Talos's flags are the same
_CONTROL = _codec.CONTROL
_DELETE_HORIZON = 0x40  # set by the log cleaner only; it turns baseTimestamp into something else
assert _KAFKA_HEADER.size == _KAFKA_HEADER_SIZE

# Talos has no leader epochs. -1 is "unknown" to a Kafka consumer: records then carry no epoch, so a Java
# consumer (KIP-320) neither commits one nor validates its position with OffsetsForLeaderEpoch, which a
# made-up 0 would start and the listener would then have to answer consistently.
_LEADER_EPOCH = -1

_TALOS_HEADER = struct.Struct(">qibIhiqqqhi")
_TALOS_HEADER_SIZE = _codec.HEADER_SIZE
_TALOS_CRC_START = 17
_TALOS_CRC_AT = 13
_TALOS_MAX_LENGTH = 2**31 - 1
_MAX_SEQUENCE = 2**31 - 1
_MAX_EPOCH = 2**15 - 1
_MIN_INT64, _MAX_INT64 = -(2**63), 2**63 - 1
_CRC = struct.Struct(">I")

_Bytes = bytes | bytearray
_HEADERS: Callable[[_codec.Record], tuple[tuple[str, bytes | None], ...]] = attrgetter("headers")
_TIMESTAMP: Callable[[_codec.Record], int] = attrgetter("timestamp")


class KafkaRecordError(Exception):
    """A batch that cannot be converted, with the Kafka error code to answer: 2 CORRUPT_MESSAGE (CRC,
    framing, truncation, fields out of range), 10 MESSAGE_TOO_LARGE (decompresses past the bound),
    42 INVALID_REQUEST (transactional or control batch, or what Talos cannot store), 43
    UNSUPPORTED_FOR_MESSAGE_FORMAT (magic 0 or 1)."""

    code: int

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _corrupt(message: str) -> KafkaRecordError:
    return KafkaRecordError(_CORRUPT_MESSAGE, message)


def _uvarint_bytes(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Looked up instead of encoded, once per record: uvarints of 0..16383 (Talos lengths) and zigzag varints of
# 0..8191 (Kafka lengths and offset deltas), one or two bytes each.
_UVARINTS = [_uvarint_bytes(n) for n in range(1 << 14)]
_ZIGZAGS = _UVARINTS[::2]
# A Kafka record's attributes byte (always 0) and a one-byte timestamp delta, by that byte.
_ATTRIBUTES_AND_STAMPS = [bytes((0, stamp)) for stamp in range(0x80)]


def _uvarint(n: int) -> bytes:
    return _UVARINTS[n] if n < 16384 else _uvarint_bytes(n)


def _zigzag(n: int) -> bytes:
    """A non-negative ``n`` as a zigzag varint."""
    return _ZIGZAGS[n] if n < 8192 else _uvarint_bytes(n << 1)


def _read_varint(buf: _Bytes, pos: int, end: int, bits: int) -> tuple[int, int]:
    """The raw (not yet zigzag-decoded) varint at ``pos``, which must end before ``end`` and fit ``bits``
    bits (Kafka's varints are 32 bits, its varlongs 64). The rare path: the loops read one byte inline."""
    result = shift = 0
    while pos < end:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if result >> bits:
                raise _corrupt(f"varint over {bits} bits")
            return result, pos
        shift += 7
        if shift >= bits:
            raise _corrupt(f"varint longer than a {bits}-bit one")
    raise _corrupt("varint runs past the end of its record")


def _skip_key_value(buf: _Bytes, pos: int, record_end: int) -> int:
    """Where the key and the value at ``pos`` end: the same encoding in both formats, a zigzag length (-1
    null) and the bytes. A length past the record is left for the caller's end check to find (``pos`` only
    grows). The lengths are taken up to 64 bits, as Talos's decoder (the plain paths' check) takes them, so
    that both paths take the same batches: past 5 bytes a varint is only a longer way to write a length."""
    for _ in range(2):
        raw = buf[pos]
        if raw < 0x80:
            pos += 1
        elif (byte := buf[pos + 1]) < 0x80:
            raw = (raw & 0x7F) | byte << 7
            pos += 2
        else:
            raw, pos = _read_varint(buf, pos, record_end, 64)
        if raw & 1:
            if raw != 1:
                raise _corrupt(f"field length {(raw >> 1) ^ -(raw & 1)}")
        else:
            pos += raw >> 1
    return pos


def _check_producer(producer_id: int, epoch: int, base_sequence: int, count: int) -> None:
    """What :func:`talos._codec.validate_batch` requires of the producer fields, answered in Kafka's terms."""
    if producer_id < -1:
        raise _corrupt(f"producerId {producer_id}")
    if producer_id >= 0:
        if not 0 <= epoch <= _MAX_EPOCH or base_sequence < -1:
            raise _corrupt(f"producer {producer_id}: epoch {epoch}, baseSequence {base_sequence}")
        if base_sequence + count - 1 > _MAX_SEQUENCE:
            # Kafka's sequences wrap around to 0 here; Talos's do not (nor, at 2**31 records, does anyone's).
            raise KafkaRecordError(_INVALID_REQUEST, f"sequences {base_sequence}.. wrap around past 2**31-1")


def _decompress(codec: int, data: memoryview, limit: int) -> bytes:
    try:
        return decompress(codec, data, max_size=limit)
    except CorruptBatchError as exc:
        # talos._compression says "over the bound" and "damaged" with one exception type; its messages differ.
        text = str(exc)
        code = _MESSAGE_TOO_LARGE if "the limit is" in text or "more than" in text else _CORRUPT_MESSAGE
        raise KafkaRecordError(code, str(exc)) from None


# ---------------------------------------------------------------------------------------------------- produce


def kafka_to_talos(records: bytes | memoryview, *, max_decompressed: int = MAX_DECOMPRESSED_SIZE) -> list[bytearray]:
    """The Kafka record batches of one partition's Produce ``records`` field → one Talos batch each
    (producer id/epoch/base sequence, timestamps, record count kept; keys, values, headers kept byte for
    byte; compression codec kept: a compressed Kafka batch becomes a Talos batch compressed with the same
    codec via talos._compression.compress). Checks magic, CRC, lengths, that offset deltas are 0..n-1 in
    order and lastOffsetDelta == n-1 (Talos has no per-record offset delta), keeps the transactional
    bit (Talos's flag is Kafka's), refuses control batches (a client never writes a marker). Raises
    KafkaRecordError. Base offsets of the returned batches are 0 (the partition owner assigns them).

    The Talos ``max_timestamp`` is computed from the records, as the Kafka broker does, not taken from the
    producer. Bytes after the last whole batch are refused (a producer sends whole batches)."""
    # A view of the request (the listener's frame) is read as it is: only the Python conversion, if it is
    # needed, copies it (_kafka_batch).
    data = records
    view = memoryview(data)
    end = len(data)
    pos = 0
    out: list[bytearray] = []
    while pos < end:
        if end - pos <= _KAFKA_MAGIC_AT:
            raise _corrupt(f"{end - pos} bytes after the last batch")
        magic = data[pos + _KAFKA_MAGIC_AT]
        if magic != _KAFKA_MAGIC:
            raise KafkaRecordError(_UNSUPPORTED_FOR_MESSAGE_FORMAT, f"magic {magic}; only record batch v2 is taken")
        if end - pos < _KAFKA_HEADER_SIZE:
            raise _corrupt(f"{end - pos} bytes left, a batch header needs {_KAFKA_HEADER_SIZE}")
        (_, batch_length, _, _, crc, attributes, last_offset_delta, base_timestamp, _,
         producer_id, epoch, base_sequence, count) = _KAFKA_HEADER.unpack_from(data, pos)  # fmt: skip
        batch_end = pos + _KAFKA_LENGTH_END + batch_length
        if batch_length < _KAFKA_HEADER_SIZE - _KAFKA_LENGTH_END or batch_end > end:
            raise _corrupt(f"batchLength {batch_length} with {end - pos - _KAFKA_LENGTH_END} bytes left")
        if _crc32c.crc32c(view[pos + _KAFKA_CRC_START : batch_end]) != crc:
            raise _corrupt("CRC mismatch")
        # The timestampType bit is not looked at: producers write CreateTime, and what Talos keeps is the
        # records' own timestamps either way.
        if attributes & (_CONTROL | _DELETE_HORIZON):
            # Markers are the coordinator's to write (WriteTxnMarkers), never a producer's; the delete horizon is
            # the log cleaner's. A transactional data batch (0x10) is taken: the partition checks its
            # transaction with the coordinator.
            raise KafkaRecordError(_INVALID_REQUEST, f"attributes {attributes:#x}: a control batch from a client")
        codec = attributes & _CODEC_MASK
        if codec > 4:
            raise _corrupt(f"compression {codec}")
        if count < 1 or last_offset_delta != count - 1:
            raise _corrupt(f"records count {count} with lastOffsetDelta {last_offset_delta}")
        _check_producer(producer_id, epoch, base_sequence, count)
        if attributes & _TRANSACTIONAL and producer_id < 0:
            raise KafkaRecordError(_INVALID_REQUEST, "a transactional batch without a producer id")
        start = pos + _KAFKA_HEADER_SIZE
        if codec:
            if count > max_decompressed // _KAFKA_MIN_RECORD:
                raise _corrupt(f"{count} records cannot fit in {max_decompressed} bytes")
            section = _decompress(codec, view[start:batch_end], max_decompressed)
            plain, max_timestamp = _kafka_batch(section, 0, len(section), count, base_timestamp)
            batch = bytearray(_TALOS_HEADER_SIZE)
            batch += compress(codec, bytes(memoryview(plain)[_TALOS_HEADER_SIZE:]))  # (its LZ4 takes no bytearray)
        else:
            batch, max_timestamp = _kafka_batch(data, start, batch_end, count, base_timestamp)
        if len(batch) > _TALOS_MAX_LENGTH:
            raise KafkaRecordError(_MESSAGE_TOO_LARGE, f"{len(batch)} bytes, over a Talos batch's {_TALOS_MAX_LENGTH}")
        _TALOS_HEADER.pack_into(
            batch, 0, 0, len(batch), _codec.MAGIC, 0, codec | (attributes & _TRANSACTIONAL), count, base_timestamp,
            max_timestamp, producer_id, epoch, base_sequence,
        )  # fmt: skip
        _CRC.pack_into(batch, _TALOS_CRC_AT, _crc32c.crc32c(memoryview(batch)[_TALOS_CRC_START:]))
        out.append(batch)
        pos = batch_end
    return out


COMPILED = True  # the tests turn the compiled conversion off to check the Python one against it


def _kafka_batch(
    buf: _Bytes | memoryview, pos: int, end: int, count: int, base_timestamp: int
) -> tuple[bytearray, int]:
    """A Talos batch (its header left zero for the caller) of the ``count`` uncompressed Kafka records filling
    ``buf[pos:end]``, and their largest timestamp. The compiled conversion writes the records after the room
    for the header, so they are not copied into the batch afterwards."""
    if count > (end - pos) // _KAFKA_MIN_RECORD:
        raise _corrupt(f"records count {count} cannot fit in {end - pos} bytes")
    if _compiled_plain is not None and COMPILED:
        converted = _compiled_plain(buf, pos, end, count, _TALOS_HEADER_SIZE)
        if converted is not None:
            batch, low, high = converted
            if base_timestamp + low >= _MIN_INT64 and base_timestamp + high <= _MAX_INT64:
                return batch, base_timestamp + high
    if isinstance(buf, memoryview):
        buf = buf.tobytes()  # the Python paths index and slice bytes
    batch = bytearray(_TALOS_HEADER_SIZE)
    if _codec.SPEEDUPS:
        found = _kafka_records_plain(buf, pos, end, count, batch, base_timestamp)
        if found is not None:
            return batch, found
        del batch[_TALOS_HEADER_SIZE:]
    low, high = _kafka_records_careful(buf, pos, end, count, batch)
    if base_timestamp + low < _MIN_INT64 or base_timestamp + high > _MAX_INT64:
        raise _corrupt("a record's timestamp is outside 64 bits")
    return batch, base_timestamp + high


def _kafka_records_plain(
    buf: _Bytes, pos: int, end: int, count: int, out: bytearray, base_timestamp: int
) -> int | None:
    """The common case, records without headers, in two thirds of the careful path's time: only each record's
    length, timestamp delta and offset delta are read here (up to two bytes inline, as the careful path
    reads them past that); the rest, key, value and header count, is copied as it is, and the compiled Talos
    decoder then checks the result (in about a tenth of this loop's time).
    It decodes with no headers only if every record's key and value fit it and a header count of 0 ends it,
    the same byte in both formats (a Kafka count n >= 1, or negative, reads as a Talos count >= 1, which it
    reports or refuses). The largest timestamp, or None: not the common case, or damaged, which
    :func:`_kafka_records_careful` then converts or explains."""
    start = len(out)
    uvarints = _UVARINTS
    try:
        for index in range(count):
            raw = buf[pos]
            if raw < 0x80:
                pos += 1
            elif (byte := buf[pos + 1]) < 0x80:
                raw = (raw & 0x7F) | byte << 7
                pos += 2
            else:
                raw, pos = _read_varint(buf, pos, end, 32)
            record_end = pos + (raw >> 1)
            # A header count of 0 is the record's last byte; anything else there is a header, seen early.
            if raw & 1 or record_end > end or buf[record_end - 1]:
                return None
            stamp = buf[pos + 1]  # past the attributes byte
            # (A delta within 64 ms of the base is one byte.)
            head = pos + 2 if stamp < 0x80 else _read_varint(buf, pos + 1, record_end, 64)[1]
            raw = buf[head]
            if raw < 0x80:
                body = head + 1
            elif (byte := buf[head + 1]) < 0x80:
                raw = (raw & 0x7F) | byte << 7
                body = head + 2
            else:
                raw, body = _read_varint(buf, head, record_end, 32)
            if raw != index << 1 or record_end - body < 3:
                return None
            size = head - pos - 1 + record_end - body
            out += uvarints[size] if size < 16384 else _uvarint_bytes(size)
            if stamp < 0x80:
                out.append(stamp)
            else:
                out += buf[pos + 1 : head]
            out += buf[body:record_end]  # (a bytes slice and a copy beat a memoryview slice here)
            pos = record_end
    except IndexError:
        return None
    if pos != end:
        return None
    try:
        decoded = _codec.decode_records_section(out, start, len(out), count, 0, base_timestamp)
    except BatchError:
        return None
    if any(map(_HEADERS, decoded)):
        return None
    return max(map(_TIMESTAMP, decoded))


def _kafka_records_careful(buf: _Bytes, pos: int, end: int, count: int, out: bytearray) -> tuple[int, int]:
    """:func:`_kafka_batch`'s conversion field by field: any record, and an exact reason for a damaged one. Returns the
    lowest and highest timestamp delta. Short varints are read inline, the rest by :func:`_read_varint`;
    ``pos`` only grows, so a field running past its record is caught by the record's end check (and past
    the buffer, by the IndexError)."""
    uvarints = _UVARINTS
    low, high = _MAX_INT64, _MIN_INT64
    try:
        for index in range(count):
            raw = buf[pos]
            if raw < 0x80:
                pos += 1
            elif (byte := buf[pos + 1]) < 0x80:
                raw = (raw & 0x7F) | byte << 7
                pos += 2
            else:
                raw, pos = _read_varint(buf, pos, end, 32)
            record_end = pos + (raw >> 1)
            if raw & 1 or record_end > end:
                raise _corrupt(f"record {index}: length {(raw >> 1) ^ -(raw & 1)} with {end - pos} bytes left")
            stamp = pos + 1  # past the attributes byte
            byte = buf[stamp]
            if byte < 0x80:
                delta = (byte >> 1) ^ -(byte & 1)
                stamp_end = stamp + 1
            else:
                raw, stamp_end = _read_varint(buf, stamp, record_end, 64)
                delta = (raw >> 1) ^ -(raw & 1)
            low = delta if delta < low else low  # not min(): a call per record costs more than the compare
            high = delta if delta > high else high
            byte = buf[stamp_end]
            if byte < 0x80:
                raw = byte
                pos = stamp_end + 1
            else:
                raw, pos = _read_varint(buf, stamp_end, record_end, 32)
            if raw != index << 1:
                raise _corrupt(f"record {index}: offsetDelta {(raw >> 1) ^ -(raw & 1)}")
            body = pos
            pos = _skip_key_value(buf, pos, record_end)
            if pos + 1 == record_end and buf[pos] == 0:  # no headers: everything from the key on is Talos's too
                size = stamp_end - stamp + record_end - body
                out += uvarints[size] if size < 16384 else _uvarint_bytes(size)
                out += buf[stamp:stamp_end]
                out += buf[body:record_end]
            else:
                tail = _headers(buf, pos, record_end, index, from_kafka=True)
                size = stamp_end - stamp + pos - body + len(tail)
                out += _uvarint(size)
                out += buf[stamp:stamp_end]
                out += buf[body:pos]
                out += tail
            pos = record_end
    except IndexError:
        raise _corrupt("a record runs past the end of its batch") from None
    if pos != end:
        raise _corrupt(f"records count {count}, the batch holds more")
    return low, high


def _headers(buf: _Bytes, pos: int, record_end: int, index: int, *, from_kafka: bool) -> bytearray:
    """A record's headers (count, then each name and value) at ``pos`` in the other format: Kafka's count and
    name lengths are zigzag varints, Talos's unsigned ones; value lengths are zigzag in both. Names must be
    UTF-8, as Talos's readers and Kafka's consumers decode them."""
    if pos >= record_end:
        raise _corrupt(f"record {index}: its key or value runs past its length")
    raw = buf[pos]
    if raw < 0x80:
        pos += 1
    else:
        raw, pos = _read_varint(buf, pos, record_end, 32)
    count = raw >> 1 if from_kafka else raw
    if (from_kafka and raw & 1) or count > record_end - pos:
        raise _corrupt(f"record {index}: header count {(raw >> 1) ^ -(raw & 1) if from_kafka else raw}")
    tail = bytearray(_uvarint(count) if from_kafka else _zigzag(count))
    for _ in range(count):
        raw = buf[pos]
        if raw < 0x80:
            pos += 1
        else:
            raw, pos = _read_varint(buf, pos, record_end, 32)
        if from_kafka and raw & 1:
            raise _corrupt(f"record {index}: header name length {(raw >> 1) ^ -(raw & 1)}")
        length = raw >> 1 if from_kafka else raw
        value = pos + length
        if value >= record_end:
            raise _corrupt(f"record {index}: header name runs past the record")
        name = buf[pos:value]
        try:
            name.decode()
        except UnicodeDecodeError:
            raise _corrupt(f"record {index}: header name is not UTF-8") from None
        if from_kafka:
            tail += _UVARINTS[length] if length < 16384 else _uvarint_bytes(length)
        else:
            tail += _ZIGZAGS[length] if length < 8192 else _zigzag(length)
        tail += name
        raw = buf[value]
        if raw < 0x80:
            pos = value + 1
        else:
            raw, pos = _read_varint(buf, value, record_end, 32)
        if raw & 1:
            if raw != 1:
                raise _corrupt(f"record {index}: header value length {(raw >> 1) ^ -(raw & 1)}")
        else:
            pos += raw >> 1
        tail += buf[value:pos]
    if pos != record_end:
        raise _corrupt(f"record {index}: its fields do not fill its length")
    return tail


# ------------------------------------------------------------------------------------------------------ fetch


def talos_to_kafka(batches: bytes | memoryview, *, max_decompressed: int = MAX_DECOMPRESSED_SIZE) -> bytes:
    """Stored Talos batches (what a partition fetch returns: zero or more whole batches back to back, each
    possibly compressed; a trailing partial batch must be ignored, as Kafka consumers expect) → Kafka record
    batches v2 with the same base offsets, timestamps, producer fields, keys/values/headers. Compressed
    Talos batches are decompressed and converted, then compressed again with the same codec, but for gzip
    (sent uncompressed: too slow to compress on every fetch). CRC-32C correct, partitionLeaderEpoch -1 (Talos has
    none), timestampType CreateTime.

    Each Talos batch's CRC and records are checked (a Kafka CRC computed over damaged records would vouch
    for them). A damaged batch ends the answer before it, so the consumer gets what precedes it and its
    next fetch starts there; a damaged first batch raises :class:`KafkaRecordError` (2 CORRUPT_MESSAGE, or
    10 MESSAGE_TOO_LARGE when it decompresses past ``max_decompressed``), for the fetch handler to decide."""
    data = batches if isinstance(batches, bytes | bytearray) else bytes(batches)
    end = len(data)
    pos = 0
    # A buffer per batch, joined once: one growing buffer of a whole fetch is copied as it grows, and a large
    # one is fresh memory each time (page faults): a 10-batch fetch took 40% longer that way.
    out: list[bytearray] = []
    while pos < end:
        try:
            header = _codec.read_header(data, pos)
        except TruncatedBatchError:
            break
        except CorruptBatchError as exc:
            if not out:
                raise _corrupt(f"batch at byte {pos}: {exc}") from None
            break
        try:
            out.append(_talos_batch(data, pos, header, max_decompressed))
        except KafkaRecordError:
            if not out:
                raise
            break
        pos += header.length
    return b"".join(out)


# Codecs a fetched batch is compressed with again on the way out (the records were converted): cheap ones
# (10-25 % more fetch CPU), so a consumer's answer is not 10-50x what it asked for in bytes. Gzip costs 2-6x
# the conversion: gzip batches go out uncompressed (docs/kafka.md, "Record format").
_RECOMPRESSED = frozenset((Codec.SNAPPY, Codec.LZ4, Codec.ZSTD))


def _talos_batch(data: _Bytes, pos: int, header: _codec.BatchHeader, max_decompressed: int) -> bytearray:
    """The Kafka form of the (whole, header-checked) Talos batch at ``pos``."""
    batch_end = pos + header.length
    view = memoryview(data)
    if _crc32c.crc32c(view[pos + _TALOS_CRC_START : batch_end]) != header.crc:
        raise _corrupt(f"batch at offset {header.base_offset}: CRC mismatch")
    codec, count = header.codec, header.record_count
    if not 0 <= codec <= 4 or header.flags & ~(_CODEC_MASK | _TRANSACTIONAL | _CONTROL):
        raise _corrupt(f"batch at offset {header.base_offset}: flags {header.flags:#x}")
    out = bytearray(_KAFKA_HEADER_SIZE)
    if codec:
        section = _decompress(codec, view[pos + _TALOS_HEADER_SIZE : batch_end], max_decompressed)
        _talos_records(section, 0, len(section), count, out, header.first_timestamp)
    else:
        _talos_records(data, pos + _TALOS_HEADER_SIZE, batch_end, count, out, header.first_timestamp)
    attributes = header.flags & (_TRANSACTIONAL | _CONTROL)  # Talos's bits are Kafka's: a reader skips markers
    if codec in _RECOMPRESSED:
        records = compress(codec, memoryview(out)[_KAFKA_HEADER_SIZE:])
        del out[_KAFKA_HEADER_SIZE:]
        out += records
        attributes |= codec
    batch_length = len(out) - _KAFKA_LENGTH_END
    if batch_length > _TALOS_MAX_LENGTH:
        raise KafkaRecordError(_MESSAGE_TOO_LARGE, f"batch at offset {header.base_offset}: {batch_length} bytes")
    _KAFKA_HEADER.pack_into(
        out, 0, header.base_offset, batch_length, _LEADER_EPOCH, _KAFKA_MAGIC, 0, attributes, count - 1,
        header.first_timestamp, header.max_timestamp, header.producer_id, header.producer_epoch,
        header.base_sequence, count,
    )  # fmt: skip
    _CRC.pack_into(out, _KAFKA_CRC_AT, _crc32c.crc32c(memoryview(out)[_KAFKA_CRC_START:]))
    return out


def _talos_records(buf: _Bytes, pos: int, end: int, count: int, out: bytearray, first_timestamp: int) -> None:
    """Append the Kafka form of the ``count`` Talos records filling ``buf[pos:end]`` to ``out``."""
    if count > (end - pos) // _codec.MIN_RECORD_SIZE:
        raise _corrupt(f"record count {count} cannot fit in {end - pos} bytes")
    if _compiled_back is not None and COMPILED:
        converted = _compiled_back(buf, pos, end, count)
        if converted is not None:
            records, low, high = converted
            if first_timestamp + low >= _MIN_INT64 and first_timestamp + high <= _MAX_INT64:
                out += records
                return
    if not _codec.SPEEDUPS:
        low, high = _talos_records_careful(buf, pos, end, count, out)
        if first_timestamp + low < _MIN_INT64 or first_timestamp + high > _MAX_INT64:
            raise _corrupt("a record's timestamp is outside 64 bits")
        return
    # The compiled decoder checks every field (what a Talos reader would refuse, a Kafka consumer gets no
    # batch of) in a tenth of the careful path's time, and says which records have headers.
    try:
        decoded = _codec.decode_records_section(buf, pos, end, count, 0, first_timestamp)
    except BatchError as exc:
        raise _corrupt(str(exc)) from None
    zigzags = _ZIGZAGS
    attributes_and_stamps = _ATTRIBUTES_AND_STAMPS
    try:
        for index, record in enumerate(decoded):
            size = buf[pos]
            if size < 0x80:
                pos += 1
            elif (byte := buf[pos + 1]) < 0x80:
                size = (size & 0x7F) | byte << 7
                pos += 2
            else:
                size, pos = _read_varint(buf, pos, end, 32)
            record_end = pos + size
            stamp = buf[pos]
            offset_delta = zigzags[index] if index < 8192 else _zigzag(index)
            if stamp < 0x80 and not record.headers:  # the common case: the header count is the same 0 byte
                size += 1 + len(offset_delta)
                out += zigzags[size] if size < 8192 else _zigzag(size)
                out += attributes_and_stamps[stamp]
                out += offset_delta
                out += buf[pos + 1 : record_end]
            else:
                body = pos + 1 if stamp < 0x80 else _read_varint(buf, pos, record_end, 64)[1]
                if record.headers:
                    fields_end = _skip_key_value(buf, body, record_end)
                    tail = _headers(buf, fields_end, record_end, index, from_kafka=False)
                else:
                    fields_end = record_end
                    tail = bytearray()
                size = 1 + body - pos + len(offset_delta) + fields_end - body + len(tail)
                out += zigzags[size] if size < 8192 else _zigzag(size)
                out += b"\x00"  # the record's attributes, unused
                out += buf[pos:body]
                out += offset_delta
                out += buf[body:fields_end]
                out += tail
            pos = record_end
    except IndexError:  # (the decoder has checked the records: only were it wrong)
        raise _corrupt("a record runs past the end of its batch") from None


def _talos_records_careful(buf: _Bytes, pos: int, end: int, count: int, out: bytearray) -> tuple[int, int]:
    """:func:`_talos_records` without the compiled decoder: every field read here. Returns the lowest and
    highest timestamp delta."""
    zigzags = _ZIGZAGS
    low, high = _MAX_INT64, _MIN_INT64
    try:
        for index in range(count):
            size = buf[pos]
            if size < 0x80:
                pos += 1
            elif (byte := buf[pos + 1]) < 0x80:
                size = (size & 0x7F) | byte << 7
                pos += 2
            else:
                size, pos = _read_varint(buf, pos, end, 32)
            record_end = pos + size
            if record_end > end:
                raise _corrupt(f"record {index} runs past the end of its batch")
            stamp = pos
            byte = buf[stamp]
            if byte < 0x80:
                delta = (byte >> 1) ^ -(byte & 1)
                body = stamp + 1
            else:
                raw, body = _read_varint(buf, stamp, record_end, 64)
                delta = (raw >> 1) ^ -(raw & 1)
            low = delta if delta < low else low  # not min(): a call per record costs more than the compare
            high = delta if delta > high else high
            pos = body
            pos = _skip_key_value(buf, pos, record_end)
            offset_delta = zigzags[index] if index < 8192 else _zigzag(index)
            if pos + 1 == record_end and buf[pos] == 0:  # no headers: the Kafka count is the same 0 byte
                size = 1 + body - stamp + len(offset_delta) + record_end - body
                out += zigzags[size] if size < 8192 else _zigzag(size)
                out += b"\x00"
                out += buf[stamp:body]
                out += offset_delta
                out += buf[body:record_end]
            else:
                tail = _headers(buf, pos, record_end, index, from_kafka=False)
                size = 1 + body - stamp + len(offset_delta) + pos - body + len(tail)
                out += _zigzag(size)
                out += b"\x00"
                out += buf[stamp:body]
                out += offset_delta
                out += buf[body:pos]
                out += tail
            pos = record_end
    except IndexError:
        raise _corrupt("a record runs past the end of its batch") from None
    if pos != end:
        raise _corrupt(f"record count {count}, the batch holds more")
    return low, high
