"""Kafka record batches v2 <-> Talos batches (server.kafka.records), cross-checked with kafka-python's own
builder and reader: round trips for every codec, what is refused and with which Kafka error code, and that
damaged input of any shape raises nothing but KafkaRecordError."""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator, Sequence

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec
from kafka.errors import CorruptRecordError
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from server.kafka import records as conversions
from server.kafka.records import KafkaRecordError, kafka_to_talos, talos_to_kafka
from talos import _codec
from talos._codec import RecordData, decode_batches, encode_batch, set_base_offset, validate_batch
from talos._compression import Codec, compress, decompress

CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_REQUEST, UNSUPPORTED_FOR_MESSAGE_FORMAT = 2, 10, 42, 43
BASE_TIMESTAMP = 1_700_000_000_000
Headers = list[tuple[str, bytes | None]]
KafkaRecord = tuple[int, bytes | None, bytes | None, Headers]  # timestamp, key, value, headers


@pytest.fixture(scope="module", params=["compiled", "plain", "careful"], autouse=True)
def conversion_path(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test three times: with the compiled conversion of the common case (server/kafka/_convert.c,
    "compiled"); with the Python loop for it, checked by the compiled Talos decoder ("plain"); and as
    without either, every field read in Python ("careful")."""
    assert conversions._compiled_plain is not None, "server/kafka/_convert.c is built by scripts/install"
    saved = _codec.SPEEDUPS, conversions.COMPILED
    _codec.SPEEDUPS = request.param != "careful"
    conversions.COMPILED = request.param == "compiled"
    try:
        yield request.param
    finally:
        _codec.SPEEDUPS, conversions.COMPILED = saved


def kafka_batch(
    records: Sequence[KafkaRecord],
    *,
    codec: int = 0,
    producer: tuple[int, int, int] = (-1, -1, -1),
    transactional: bool = False,
    offsets: Sequence[int] | None = None,
) -> bytearray:
    """A batch as kafka-python's producer builds it. Codecs kafka-python cannot write here are applied
    afterwards: the section compressed with Talos's codec (Kafka's framing), attributes, length, CRC set."""
    native = codec in {Codec.NONE, Codec.GZIP}
    builder = DefaultRecordBatchBuilder(2, codec if native else 0, transactional, *producer, batch_size=2**30)
    for index, (timestamp, key, value, headers) in enumerate(records):
        builder.append(index if offsets is None else offsets[index], timestamp, key, value, headers)
    batch = bytearray(builder.build())
    if not native:
        batch[61:] = compress(codec, bytes(batch[61:]))
        batch[21:23] = struct.pack(">h", struct.unpack_from(">h", batch, 21)[0] | codec)
        reseal(batch)
    return batch


def reseal(batch: bytearray) -> bytearray:
    """Fix a hand-edited Kafka batch's length and CRC, so what is tested is the edit, not the checksum."""
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return batch


def inflated(data: bytes) -> bytes:
    """A fetch answer with each compressed batch's records section decompressed (attributes, length and CRC
    rewritten, the CRC of the compressed form checked first): kafka-python has no snappy, lz4 or zstd library
    here to read them itself."""
    out = bytearray()
    pos = 0
    while pos < len(data):
        length = struct.unpack_from(">i", data, pos + 8)[0] + 12
        batch = bytearray(data[pos : pos + length])
        assert struct.unpack_from(">I", batch, 17)[0] == crc32c.crc32c(bytes(batch[21:]))
        codec = batch[22] & 7
        if codec:
            batch[61:] = decompress(codec, bytes(batch[61:]))
            batch[22] &= ~7
            struct.pack_into(">i", batch, 8, len(batch) - 12)
            struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
        out += batch
        pos += length
    return bytes(out)


def parse_kafka(
    data: bytes,
) -> list[tuple[DefaultRecordBatch, list[tuple[int, int, bytes | None, bytes | None, Headers]]]]:
    """kafka-python's reading of a fetch answer: each batch (CRC checked) with its records."""
    out = []
    for batch in MemoryRecords(inflated(data)):
        assert isinstance(batch, DefaultRecordBatch)
        assert batch.validate_crc()
        out.append((batch, [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]))
    return out


def talos_records(batch: bytes | bytearray) -> list[tuple[int, int, bytes | None, bytes | None, Headers]]:
    validate_batch(batch)
    (decoded,) = decode_batches(bytes(batch))
    assert decoded.error is None
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in decoded.records]


def expected(
    records: Sequence[KafkaRecord], base_offset: int = 0
) -> list[tuple[int, int, bytes | None, bytes | None, Headers]]:
    return [(base_offset + i, ts, key, value, list(headers)) for i, (ts, key, value, headers) in enumerate(records)]


def varint(value: int) -> bytes:
    """A zigzag varint, as Kafka writes every varint of a record."""
    raw, out = (value << 1) ^ (value >> 63), bytearray()
    while raw > 0x7F:
        out.append(raw & 0x7F | 0x80)
        raw >>= 7
    return bytes([*out, raw])


def reference_read(
    section: bytes, count: int, base_timestamp: int, attributes: list[int] | None = None
) -> list[tuple[int, int, bytes | None, bytes | None, Headers]] | None:
    """The records section of a batch read as the protocol describes it, as plainly as can be (kafka-python
    reads the attributes byte as a varint, so it misreads one of 0x80 or more): None where a Kafka reader
    refuses, or Talos cannot hold it (offset deltas not 0..n-1, header names not UTF-8). The records'
    attributes bytes are appended to ``attributes``."""
    pos = 0

    def read_varint(limit: int) -> int:
        nonlocal pos
        raw = shift = 0
        while True:
            if pos >= len(section) or shift >= limit:
                raise ValueError("varint")
            byte = section[pos]
            pos += 1
            raw |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                if raw >> limit:
                    raise ValueError("varint")
                return (raw >> 1) ^ -(raw & 1)

    def read_bytes(limit: int, nullable: bool = True) -> bytes | None:
        nonlocal pos
        length = read_varint(limit)
        if length == -1 and nullable:
            return None
        if length < 0 or pos + length > len(section):
            raise ValueError("length")
        pos += length
        return section[pos - length : pos]

    out = []
    try:
        for index in range(count):
            length = read_varint(32)
            if length < 0:
                return None
            end = pos + length
            if attributes is not None:
                attributes.append(section[pos])
            pos += 1  # attributes: int8
            timestamp = base_timestamp + read_varint(64)
            if read_varint(32) != index or not -(2**63) <= timestamp < 2**63:
                return None
            key, value = read_bytes(64), read_bytes(64)  # (lengths up to 64 bits: as Talos's decoder takes them)
            headers: Headers = []
            header_count = read_varint(32)
            if header_count < 0:
                return None
            for _ in range(header_count):
                name = read_bytes(32, nullable=False)
                assert name is not None
                headers.append((name.decode(), read_bytes(32)))
            if pos != end:
                return None
            out.append((index, timestamp, key, value, headers))
    except (ValueError, IndexError):  # (UnicodeDecodeError is a ValueError)
        return None
    return out if pos == len(section) else None


def section_batch(section: bytes, count: int, *, base_timestamp: int = BASE_TIMESTAMP) -> bytearray:
    """A batch around a hand-made records section."""
    header = struct.pack(
        ">qiibIhiqqqhii", 0, 0, -1, 2, 0, 0, count - 1, base_timestamp, base_timestamp, -1, -1, -1, count
    )
    return reseal(bytearray(header + section))


# Compressible (kafka-python sends a batch uncompressed when compressing does not shrink it), with every
# kind of field: null and empty keys and values, null header values, deltas negative and past one byte,
# 2-byte offset deltas (past 63) and lengths past 2 and 3 bytes.
VARIED: list[KafkaRecord] = [
    (BASE_TIMESTAMP + (i * 37) % 300 - 50, None if i % 5 == 0 else b"key-%d" % i,
     None if i % 7 == 3 else b"" if i % 7 == 4 else b"value %d " % i * (1 + i % 4) * 10,
     [("trace", b"t%d" % i), ("empty", b""), ("null", None)] if i % 3 == 0 else [])
    for i in range(90)
]  # fmt: skip
VARIED.append((BASE_TIMESTAMP, b"big", b"x" * 20_000, [("h" * 200, b"v" * 9000)]))
PLAIN: list[KafkaRecord] = [(BASE_TIMESTAMP + i, b"k%d" % i, b"v" * 1024, []) for i in range(100)]
# Varints of three bytes and more without headers: lengths past 8 KiB, deltas past 8 s, offset deltas past 8191.
LARGE: list[KafkaRecord] = [(BASE_TIMESTAMP + i * 10_000, b"k", b"x" * 9000 * (i % 2), []) for i in range(10)]
MANY: list[KafkaRecord] = [(BASE_TIMESTAMP, None, b"v%d" % i, []) for i in range(8300)]
ALL_CODECS = list(Codec)


def kafka_python_can(codec: int) -> bool:
    """The codecs kafka-python can read and write here (its optional libraries)."""
    return {
        Codec.NONE: True,
        Codec.GZIP: kafka_codec.has_gzip(),
        Codec.SNAPPY: kafka_codec.has_snappy(),
        Codec.LZ4: kafka_codec.has_lz4(),
        Codec.ZSTD: kafka_codec.has_zstd(),
    }[Codec(codec)]


# ------------------------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("codec", ALL_CODECS, ids=[c.name.lower() for c in ALL_CODECS])
@pytest.mark.parametrize("records", [VARIED, PLAIN, LARGE, MANY], ids=["varied", "plain", "large", "many"])
def test_kafka_talos_kafka_keeps_everything(codec: int, records: list[KafkaRecord]) -> None:
    kafka = kafka_batch(records, codec=codec, producer=(4242, 7, 1000))
    assert kafka[22] & 7 == codec
    (talos,) = kafka_to_talos(bytes(kafka))
    header = validate_batch(talos)
    assert (header.base_offset, header.flags, header.record_count) == (0, codec, len(records))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 7, 1000)
    assert header.first_timestamp == records[0][0]
    assert header.max_timestamp == max(r[0] for r in records)
    assert talos_records(talos) == expected(records)

    set_base_offset(talos, 5_000_000_000)
    back = talos_to_kafka(bytes(talos))
    assert back[22] & 7 == (codec if codec != Codec.GZIP else 0)  # gzip goes out uncompressed: too slow to redo
    ((batch, got),) = parse_kafka(back)
    assert got == expected(records, 5_000_000_000)
    assert (batch.base_offset, batch.magic, batch.leader_epoch, batch.compression_type) == (5_000_000_000, 2, -1, 0)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (4242, 7, 1000)
    assert (batch.first_timestamp, batch.max_timestamp) == (records[0][0], max(r[0] for r in records))
    assert (batch.timestamp_type, batch.is_transactional, batch.is_control_batch) == (0, False, False)
    assert batch.last_offset_delta == len(records) - 1
    if codec == 0:  # byte for byte what kafka-python built, but for the base offset and the leader epoch
        struct.pack_into(">qii", kafka, 0, 5_000_000_000, len(kafka) - 12, -1)
        assert back == bytes(kafka)


@pytest.mark.parametrize("codec", ALL_CODECS, ids=[c.name.lower() for c in ALL_CODECS])
def test_kafka_pythons_batches_decode_as_talos(codec: int) -> None:
    assert kafka_python_can(codec), "kafka-python's codec libraries are in the dev extra (scripts/install --dev)"
    builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, batch_size=2**30)
    for i, (timestamp, key, value, headers) in enumerate(VARIED):
        builder.append(i, timestamp, key, value, headers)
    kafka = bytes(builder.build())
    assert kafka[22] & 7 == codec  # compressed indeed
    (talos,) = kafka_to_talos(memoryview(kafka))
    assert validate_batch(talos).flags == codec
    assert talos_records(talos) == expected(VARIED)
    assert talos_records(talos) == [rec for _, rec in [(b, r) for b, rs in parse_kafka(kafka) for r in rs]]


@pytest.mark.parametrize("codec", ALL_CODECS, ids=[c.name.lower() for c in ALL_CODECS])
def test_talos_batches_read_with_kafka_python(codec: int) -> None:
    first = [RecordData(b"v%d" % i * 50, key=b"k" if i % 2 else None, timestamp=BASE_TIMESTAMP + i) for i in range(70)]
    second = [
        RecordData(None, key=b"k", headers=[("a", b"1"), ("b", None)], timestamp=BASE_TIMESTAMP - 5),
        RecordData(b"", headers=[("ü", b"")], timestamp=BASE_TIMESTAMP + 100_000),
    ]
    stored = encode_batch(first, base_offset=10, compression=codec) + encode_batch(
        second, base_offset=80, producer_id=3, producer_epoch=1, base_sequence=70, compression=codec
    )
    partial = encode_batch(first, base_offset=82)[:-1]  # what a byte-bounded read ends with
    batches = parse_kafka(talos_to_kafka(memoryview(stored + partial)))
    assert [(b.base_offset, b.producer_id, b.producer_epoch, b.base_sequence) for b, _ in batches] == [
        (10, -1, -1, -1),
        (80, 3, 1, 70),
    ]
    assert [(b.first_timestamp, b.max_timestamp) for b, _ in batches] == [
        (BASE_TIMESTAMP, BASE_TIMESTAMP + 69),
        (BASE_TIMESTAMP - 5, BASE_TIMESTAMP + 100_000),
    ]
    want = [
        (offset, r.timestamp, r.key, r.value, list(r.headers)) for offset, r in enumerate([*first, *second], start=10)
    ]
    assert [rec for _, recs in batches for rec in recs] == want


@pytest.mark.parametrize("records", [PLAIN, LARGE, MANY], ids=["plain", "large", "many"])
def test_records_without_headers_take_the_plain_path(
    records: list[KafkaRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_codec, "SPEEDUPS", True)  # the compiled decoder checks the plain path (CI builds it)

    def refuse(*_: object) -> tuple[int, int]:
        raise AssertionError("the careful path was taken")

    monkeypatch.setattr(conversions, "_kafka_records_careful", refuse)
    monkeypatch.setattr(conversions, "_talos_records_careful", refuse)
    (talos,) = kafka_to_talos(bytes(kafka_batch(records)))
    ((_, got),) = parse_kafka(talos_to_kafka(talos))
    assert got == expected(records)


@pytest.mark.parametrize("records", [PLAIN, LARGE, MANY], ids=["plain", "large", "many"])
def test_records_without_headers_take_the_compiled_path(
    records: list[KafkaRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(conversions, "COMPILED", True)

    def refuse(*_: object) -> object:
        raise AssertionError("a Python path was taken")

    monkeypatch.setattr(conversions, "_kafka_records_plain", refuse)
    monkeypatch.setattr(conversions, "_kafka_records_careful", refuse)
    (talos,) = kafka_to_talos(bytes(kafka_batch(records)))
    assert talos_records(talos) == expected(records)
    monkeypatch.setattr(conversions, "_talos_records_careful", refuse)
    monkeypatch.setattr(_codec, "decode_records_section", refuse)  # what the Python way back starts with
    ((_, got),) = parse_kafka(talos_to_kafka(talos))
    assert got == expected(records)


def test_the_compiled_conversion_can_leave_room_for_the_batch_header() -> None:
    """With a ``reserve``, the same records come in a bytearray after that many zero bytes (the Talos batch, its
    header written in afterwards: no copy of the records into it); refused past 4096; None stays None."""
    from server.kafka import _convert

    batch = bytes(kafka_batch([(BASE_TIMESTAMP + i, b"k%d" % i, b"v" * i, []) for i in range(5)]))
    plain = _convert.kafka_records_plain(batch, 61, len(batch), 5)
    room = _convert.kafka_records_plain(batch, 61, len(batch), 5, 61)
    assert plain is not None and room is not None
    assert isinstance(room[0], bytearray) and room[0][:61] == bytes(61) and room[0][61:] == plain[0]
    assert room[1:] == plain[1:]
    assert _convert.kafka_records_plain(batch, 61, len(batch) - 1, 5, 61) is None  # cut short
    with pytest.raises(ValueError, match="reserve"):
        _convert.kafka_records_plain(batch, 61, len(batch), 5, 4097)


def test_nothing_and_only_a_partial_batch_give_nothing() -> None:
    assert kafka_to_talos(b"") == []
    assert talos_to_kafka(b"") == b""
    assert talos_to_kafka(encode_batch([RecordData(b"v")])[:30]) == b""
    assert talos_to_kafka(encode_batch([RecordData(b"v")])[:-1]) == b""


def test_several_kafka_batches_become_several_talos_batches() -> None:
    one = kafka_batch(PLAIN[:3])
    two = kafka_batch(VARIED[:5], codec=Codec.ZSTD, producer=(1, 0, 0))
    talos = kafka_to_talos(bytes(one + two))
    assert [talos_records(t) for t in talos] == [expected(PLAIN[:3]), expected(VARIED[:5])]
    assert [validate_batch(t).producer_id for t in talos] == [-1, 1]


def test_the_largest_timestamp_is_the_records_not_the_producers_word() -> None:
    kafka = kafka_batch(PLAIN[:5])
    struct.pack_into(">q", kafka, 35, BASE_TIMESTAMP + 10**9)  # maxTimestamp
    (talos,) = kafka_to_talos(bytes(reseal(kafka)))
    assert validate_batch(talos).max_timestamp == BASE_TIMESTAMP + 4


# ---------------------------------------------------------------------------------------------------- refused


def code_of(records: bytes | bytearray, **kwargs: int) -> int:
    with pytest.raises(KafkaRecordError) as caught:
        kafka_to_talos(bytes(records), **kwargs)
    return caught.value.code


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.ZSTD])
def test_transactional_batches_keep_their_flag(codec: int) -> None:
    kafka = kafka_batch(PLAIN[:3], codec=codec, producer=(5, 2, 7), transactional=True)
    (talos,) = kafka_to_talos(bytes(kafka))
    header = validate_batch(talos)
    assert header.transactional and not header.control
    assert header.flags == codec | _codec.TRANSACTIONAL
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 2, 7)
    assert talos_records(talos) == expected(PLAIN[:3])
    back = DefaultRecordBatch(talos_to_kafka(bytes(talos)))  # a reader sees it as a transaction's data
    assert back.is_transactional and not back.is_control_batch


def test_control_batches_and_transactional_ones_without_a_producer_are_refused() -> None:
    control = kafka_batch(PLAIN[:2], producer=(5, 0, 0), transactional=True)
    control[22] |= 0x20
    assert code_of(reseal(control)) == INVALID_REQUEST  # a marker is the coordinator's to write
    horizon = kafka_batch(PLAIN[:2])
    horizon[22] |= 0x40
    assert code_of(reseal(horizon)) == INVALID_REQUEST  # the log cleaner's
    assert code_of(kafka_batch(PLAIN[:2], transactional=True)) == INVALID_REQUEST  # producer id -1


@pytest.mark.parametrize("magic", [0, 1])
def test_old_message_formats_are_refused(magic: int) -> None:
    builder = LegacyRecordBatchBuilder(magic, 0, batch_size=2**20)
    builder.append(0, BASE_TIMESTAMP if magic else None, b"k", b"v")
    assert code_of(builder.build()) == UNSUPPORTED_FOR_MESSAGE_FORMAT
    assert code_of(kafka_batch(PLAIN[:1]) + builder.build()) == UNSUPPORTED_FOR_MESSAGE_FORMAT


def test_damage_is_refused_as_a_corrupt_message() -> None:
    good = kafka_batch(PLAIN[:3])
    flipped = bytearray(good)
    flipped[100] ^= 1
    assert code_of(flipped) == CORRUPT_MESSAGE  # the CRC
    assert code_of(good[:-1]) == CORRUPT_MESSAGE  # truncated
    assert code_of(good + b"\x00" * 10) == CORRUPT_MESSAGE  # trailing bytes
    assert code_of(kafka_batch(PLAIN[:3], offsets=[0, 2, 3])) == CORRUPT_MESSAGE  # offset deltas not 0..n-1
    wrong_count = bytearray(good)
    struct.pack_into(">i", wrong_count, 57, 2)
    assert code_of(reseal(wrong_count)) == CORRUPT_MESSAGE
    wrong_last = bytearray(good)
    struct.pack_into(">i", wrong_last, 23, 3)
    assert code_of(reseal(wrong_last)) == CORRUPT_MESSAGE
    bad_name = kafka_batch([(BASE_TIMESTAMP, b"k", b"v", [("QQ", b"v")])])
    bad_name[bad_name.index(b"QQ") : bad_name.index(b"QQ") + 2] = b"\xff\xfe"
    assert code_of(reseal(bad_name)) == CORRUPT_MESSAGE  # Talos's readers need UTF-8 header names


def test_producer_fields_talos_cannot_store_are_refused() -> None:
    assert code_of(kafka_batch(PLAIN[:3], producer=(-2, 0, 0))) == CORRUPT_MESSAGE
    # Kafka's sequences wrap around past 2**31-1; Talos's cannot.
    assert code_of(kafka_batch(PLAIN[:3], producer=(1, 0, 2**31 - 2))) == INVALID_REQUEST
    (talos,) = kafka_to_talos(bytes(kafka_batch(PLAIN[:3], producer=(1, 0, 2**31 - 3))))
    assert validate_batch(talos).base_sequence == 2**31 - 3


@pytest.mark.parametrize("codec", [c for c in ALL_CODECS if c], ids=[c.name.lower() for c in ALL_CODECS if c])
def test_a_decompression_bomb_is_refused_as_too_large(codec: int) -> None:
    kafka = kafka_batch([(BASE_TIMESTAMP, None, b"\x00" * 300_000, [])], codec=codec)
    assert code_of(kafka, max_decompressed=100_000) == MESSAGE_TOO_LARGE
    stored = encode_batch([RecordData(b"\x00" * 300_000)], compression=codec)
    with pytest.raises(KafkaRecordError) as caught:
        talos_to_kafka(stored, max_decompressed=100_000)
    assert caught.value.code == MESSAGE_TOO_LARGE


def test_a_damaged_stored_batch_ends_the_answer_before_it() -> None:
    first = encode_batch([RecordData(b"one")], base_offset=0)
    damaged = bytearray(encode_batch([RecordData(b"two")], base_offset=1))
    damaged[-1] ^= 1
    third = encode_batch([RecordData(b"three")], base_offset=2)
    assert [recs for _, recs in parse_kafka(talos_to_kafka(first + damaged + third))] == [
        [(0, *parse_kafka(talos_to_kafka(first))[0][1][0][1:])]
    ]
    with pytest.raises(KafkaRecordError) as caught:
        talos_to_kafka(bytes(damaged) + third)
    assert caught.value.code == CORRUPT_MESSAGE
    with pytest.raises(KafkaRecordError):
        talos_to_kafka(b"\x00" * 8 + struct.pack(">i", 60) + b"\x07" + b"\x00" * 47)  # magic 7


def test_hand_made_records() -> None:
    """What kafka-python's builder never writes: an attributes byte over 0x7f (kafka-python's reader misreads
    it), lengths in longer varints than needed, a negative header count, a record longer than its fields."""

    def record(*fields: bytes, attributes: int = 0) -> bytes:
        body = bytes([attributes]) + b"".join(fields)
        return varint(len(body)) + body

    key = varint(3) + b"key"
    value = varint(5) + b"value"
    taken = [
        record(varint(-2), varint(0), key, value, varint(0), attributes=0xA0),
        record(varint(300), varint(1), b"\x86\x80\x80\x80\x80\x80\x00key", value, varint(0)),  # 7-byte length
        record(varint(0), varint(2), varint(-1), varint(-1), varint(1), varint(1) + b"h", varint(-1)),
    ]
    section = b"".join(taken)
    (talos,) = kafka_to_talos(bytes(section_batch(section, 3)))
    assert (
        talos_records(talos)
        == reference_read(section, 3, BASE_TIMESTAMP)
        == [
            (0, BASE_TIMESTAMP - 2, b"key", b"value", []),
            (1, BASE_TIMESTAMP + 300, b"key", b"value", []),
            (2, BASE_TIMESTAMP, None, None, [("h", None)]),
        ]
    )
    refused = [
        record(varint(0), varint(0), key, value, varint(-1)),  # negative header count
        record(varint(0), varint(0), key, value, varint(0), b"\x00"),  # a byte after the fields
        record(varint(0), varint(0), varint(-2), value, varint(0)),  # key length -2
        record(varint(0), varint(0), key, value, varint(1), varint(-1), varint(-1)),  # null header name
        record(varint(0), varint(1), key, value, varint(0)),  # offset delta 1 for the first record
        record(varint(0), varint(0), key, value, varint(0))[:-1],  # shorter than its length
        b"\x81\x80\x80\x80\x80\x00" + bytes(30),  # a record length in 6 bytes: Kafka's varints take 5
        varint(-8) + bytes(8),  # negative record length
    ]
    for bad in refused:
        assert reference_read(bad, 1, BASE_TIMESTAMP) is None
        assert code_of(section_batch(bad, 1)) == CORRUPT_MESSAGE, bad.hex()
    assert code_of(section_batch(section + taken[0], 3)) == CORRUPT_MESSAGE  # more records than counted
    assert code_of(section_batch(section, 4)) == CORRUPT_MESSAGE  # fewer
    assert code_of(section_batch(section, 3, base_timestamp=2**63 - 100)) == CORRUPT_MESSAGE  # past 64 bits


# ---------------------------------------------------------------------------------------- property: any input

blobs = st.one_of(st.none(), st.binary(max_size=200))
header_lists = st.lists(st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))), max_size=3)
kafka_records = st.lists(
    st.tuples(st.integers(BASE_TIMESTAMP - 10**6, BASE_TIMESTAMP + 10**6), blobs, blobs, header_lists),
    min_size=1,
    max_size=80,
)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(kafka_records, st.sampled_from(ALL_CODECS))
def test_any_records_round_trip(records: list[KafkaRecord], codec: int) -> None:
    (talos,) = kafka_to_talos(bytes(kafka_batch(records, codec=codec, producer=(9, 9, 9))))
    assert talos_records(talos) == expected(records)
    ((_, got),) = parse_kafka(talos_to_kafka(talos))
    assert got == expected(records)


@SETTINGS
@given(kafka_records, st.sampled_from(ALL_CODECS), st.binary(max_size=20))
def test_a_view_into_a_larger_frame_converts_as_its_bytes_do(
    records: list[KafkaRecord], codec: int, around: bytes
) -> None:
    """The listener hands the records as a view into the request frame: read as it is (no copy) by the compiled
    conversion, copied for the Python ones; the same batches either way, and the frame is left as it was."""
    batch = bytes(kafka_batch(records, codec=codec, producer=(9, 9, 9)))
    frame = around + batch + around
    view = memoryview(frame)[len(around) : len(around) + len(batch)]
    assert kafka_to_talos(view) == kafka_to_talos(batch)
    assert frame == around + batch + around


@SETTINGS
@given(
    kafka_records,
    st.booleans(),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255), st.integers(0, 3)), min_size=1, max_size=4),
)
def test_damaged_kafka_records_raise_only_kafka_record_error(
    records: list[KafkaRecord], compressed: bool, edits: list[tuple[int, int, int]]
) -> None:
    """Bytes changed, dropped or added anywhere in the records (CRC and length fixed, so the parsing is what
    is tested); whatever is accepted is a valid Talos batch holding what kafka-python reads there."""
    section = bytearray(kafka_batch(records)[61:])
    for where, byte, kind in edits:
        at = where % (len(section) + 1)
        if kind == 0 and at < len(section):
            section[at] = byte
        elif kind == 1:
            del section[at : at + 1 + byte % 4]
        elif kind == 2:
            section[at:at] = bytes([byte]) * (1 + byte % 3)
        else:
            section[at:] = b""
    section_plain = bytes(section)
    kafka = kafka_batch(records[:1])
    if compressed:
        kafka[22] |= Codec.ZSTD
        section = bytearray(compress(Codec.ZSTD, section))
    kafka[61:] = section
    struct.pack_into(">i", kafka, 57, len(records))
    struct.pack_into(">i", kafka, 23, len(records) - 1)
    attributes: list[int] = []
    reference = reference_read(bytes(section_plain), len(records), records[0][0], attributes)
    try:
        (talos,) = kafka_to_talos(bytes(reseal(kafka)))
    except KafkaRecordError as exc:
        code, got = exc.code, None
    else:
        code, got = 0, talos_records(talos)
    assert code in {0, CORRUPT_MESSAGE}
    assert got == reference
    if reference is not None and max(attributes) < 0x80:  # (kafka-python misreads the others)
        with contextlib.suppress(CorruptRecordError):  # kafka-python, when it can read it, reads the same
            ((_, theirs),) = parse_kafka(
                bytes(section_batch(section_plain, len(records), base_timestamp=records[0][0]))
            )
            assert theirs == reference


@SETTINGS
@given(st.binary(max_size=400), st.integers(0, 7))
def test_any_bytes_raise_only_kafka_record_error(data: bytes, codec: int) -> None:
    """As they come, and dressed as a batch: magic 2, a codec, length and CRC right."""
    dressed = bytearray(data.ljust(61, b"\x00"))
    dressed[16] = 2
    dressed[21:23] = bytes([0, codec])
    for candidate in (data, bytes(reseal(dressed))):
        for convert in (kafka_to_talos, talos_to_kafka):
            with contextlib.suppress(KafkaRecordError):
                convert(candidate)


@SETTINGS
@given(
    st.lists(
        st.builds(RecordData, value=blobs, key=blobs, headers=header_lists, timestamp=st.just(BASE_TIMESTAMP)),
        min_size=1,
        max_size=30,
    ),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=3),
)
def test_damaged_stored_records_raise_only_kafka_record_error(
    records: list[RecordData], edits: list[tuple[int, int]]
) -> None:
    """A stored batch whose records were damaged (and the CRC made to match): refused, or read by kafka-python
    exactly as Talos's own reader reads it."""
    batch = bytearray(encode_batch(records))
    for at, byte in edits:
        batch[53 + at % (len(batch) - 53)] = byte
    struct.pack_into(">I", batch, 13, crc32c.crc32c(bytes(batch[17:])))
    (decoded,) = decode_batches(bytes(batch))
    if decoded.error is not None:  # what Talos's reader refuses, a Kafka consumer gets none of
        with pytest.raises(KafkaRecordError) as caught:
            talos_to_kafka(bytes(batch))
        assert caught.value.code == CORRUPT_MESSAGE
    else:
        ((_, theirs),) = parse_kafka(talos_to_kafka(bytes(batch)))
        assert theirs == [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in decoded.records]
