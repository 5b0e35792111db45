"""Compressed record batches: Kafka's codec ids and framing, round trips through every reader, and the
limits a reader keeps against garbage and decompression bombs."""

from __future__ import annotations

import asyncio
import gzip
import struct
from collections.abc import Mapping

import cramjam
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.http.messages import _messages_json, batch_spans
from server.messaging.fetch import holds_compressed as _holds_compressed
from server.security.trim import trim_to_allowance
from talos import (
    HEADER_SIZE,
    AsyncFunctionTransport,
    AsyncProducer,
    CorruptBatchError,
    FunctionTransport,
    Producer,
    Record,
    RecordData,
    Response,
    decode_batches,
    decode_records,
    encode_batch,
    read_header,
    set_base_offset,
    validate_batch,
)
from talos._codec import build_batch, crc32c, encode_records
from talos._compression import MAX_DECOMPRESSED_SIZE, Codec, codec_named, compress, decompress
from talos._fetcher import _decode
from tests.unit.test_codec import records

CODECS = [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]
# Text-like records that compress well, with every field a record has.
RECORDS = [
    RecordData(
        orjson.dumps({"level": "info", "n": i, "msg": f"request {i} served"}),
        key=None if i % 3 == 0 else f"key-{i % 7}".encode(),
        headers=[("trace", f"t{i}".encode()), ("empty", None)] if i % 2 else (),
        timestamp=1_700_000_000_000 + i * 7,
    )
    for i in range(500)
]


def fields(recs: list[RecordData]) -> list[tuple[object, ...]]:
    return [(r.key, r.value, tuple(r.headers), r.timestamp) for r in recs]


def fields_of(decoded: list[Record]) -> list[tuple[object, ...]]:
    return [(r.key, r.value, r.headers, r.timestamp) for r in decoded]


def section(batch: bytes) -> bytes:
    return batch[HEADER_SIZE:]


def recrc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, 13, crc32c(memoryview(data)[17:]))
    return bytes(data)


def with_section(codec: int, records_section: bytes, count: int) -> bytes:
    """A batch of ``count`` records whose (compressed) section is exactly ``records_section``; its first
    timestamp is that of ``RECORDS``, from which the section's timestamps count."""
    template = encode_batch([RecordData(b"x", timestamp=RECORDS[0].timestamp)])
    data = bytearray(template[:HEADER_SIZE]) + records_section
    struct.pack_into(">i", data, 8, len(data))
    struct.pack_into(">h", data, 17, codec)
    struct.pack_into(">i", data, 19, count)
    return recrc(data)


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_with_keys_headers_and_timestamps(codec: Codec) -> None:
    batch = encode_batch(RECORDS, base_offset=40, producer_id=3, producer_epoch=1, base_sequence=0, compression=codec)
    header = validate_batch(batch)
    assert (header.flags, header.record_count, header.producer_id) == (codec, len(RECORDS), 3)
    assert header.max_timestamp == RECORDS[-1].timestamp
    assert len(batch) < len(encode_batch(RECORDS)) / 3  # it did compress
    decoded = decode_records(batch)
    assert fields([RecordData(r.value, r.key, r.headers, r.timestamp) for r in decoded]) == fields(RECORDS)
    assert [r.offset for r in decoded] == list(range(40, 40 + len(RECORDS)))


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.lists(records, min_size=1, max_size=20), st.sampled_from(CODECS), st.integers(0, 2**62))
def test_any_batch_round_trips_through_every_codec(recs: list[RecordData], codec: Codec, base: int) -> None:
    body, first, top = encode_records(recs, 1_700_000_000_000)
    batch = build_batch(body, len(recs), first, top, base_offset=base, compression=codec)
    assert validate_batch(batch).flags == codec
    assert decode_records(batch) == decode_records(build_batch(body, len(recs), first, top, base_offset=base))


def test_gzip_is_a_gzip_stream() -> None:
    batch = encode_batch(RECORDS, compression=Codec.GZIP)
    assert section(batch)[:2] == b"\x1f\x8b"
    assert gzip.decompress(section(batch)) == section(encode_batch(RECORDS))  # any gzip reader reads it


def test_snappy_is_xerial_framed_in_32_kib_blocks_and_raw_snappy_is_read_too() -> None:
    plain = section(encode_batch(RECORDS * 3))
    framed = section(encode_batch(RECORDS * 3, compression=Codec.SNAPPY))
    assert framed[:8] == b"\x82SNAPPY\x00"
    assert struct.unpack(">ii", framed[8:16]) == (1, 1)  # version 1, compatible with version 1 readers
    blocks, pos = [], 16
    while pos < len(framed):
        (length,) = struct.unpack_from(">i", framed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(framed[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert len(plain) > 64 * 1024 and all(len(b) == 32 * 1024 for b in blocks[:-1])
    assert b"".join(blocks) == plain
    raw = bytes(cramjam.snappy.compress_raw(plain))  # what librdkafka writes
    assert decompress(Codec.SNAPPY, raw) == plain
    assert fields_of(decode_records(with_section(Codec.SNAPPY, raw, len(RECORDS) * 3))) == fields(RECORDS * 3)


def test_lz4_is_a_frame_with_independent_blocks() -> None:
    framed = section(encode_batch(RECORDS, compression=Codec.LZ4))
    assert struct.unpack_from("<I", framed)[0] == 0x184D2204
    flg, bd = framed[4], framed[5]
    assert flg >> 6 == 1  # frame version 1
    assert flg & 0x20  # independent blocks: Kafka's reader refuses linked ones
    assert not flg & 0x0B  # no content size, no dictionary id, nothing reserved
    assert (bd >> 4) & 7 == 4  # 64 KiB blocks, as Kafka writes them


def test_zstd_is_a_frame_and_one_without_a_content_size_decodes() -> None:
    framed = section(encode_batch(RECORDS, compression=Codec.ZSTD))
    assert struct.unpack_from("<I", framed)[0] == 0xFD2FB528
    streaming = cramjam.zstd.Compressor()  # like zstd-jni's stream (Kafka's Java client): no content size
    streaming.compress(section(encode_batch(RECORDS * 10)))
    unsized = bytes(streaming.finish())
    assert unsized[4] >> 6 == 0  # the frame states no size: the reader finds it (more than its first guess)
    assert fields_of(decode_records(with_section(Codec.ZSTD, unsized, len(RECORDS) * 10))) == fields(RECORDS * 10)


@pytest.mark.parametrize("codec", CODECS)
def test_output_is_bounded_by_max_size(codec: Codec) -> None:
    data = bytes(300_000)  # highly compressible, as a bomb is
    packed = compress(codec, data)
    assert decompress(codec, packed, max_size=len(data)) == data
    with pytest.raises(CorruptBatchError):
        decompress(codec, packed, max_size=len(data) - 1)


def test_a_decompression_bomb_is_refused_under_the_default_limit() -> None:
    zeros = bytes(MAX_DECOMPRESSED_SIZE + 1)
    for codec in (Codec.LZ4, Codec.ZSTD):  # lz4 states no size (the reader grows to the limit); zstd does
        bomb = with_section(codec, compress(codec, zeros), 1)
        assert len(bomb) < 400_000
        validate_batch(bomb)  # the server does not decompress: stored like any batch
        with pytest.raises(CorruptBatchError, match=str(MAX_DECOMPRESSED_SIZE)):
            decode_records(bomb)
    del zeros


@pytest.mark.parametrize("codec", CODECS)
def test_garbage_and_truncation_are_corrupt_batches(codec: Codec) -> None:
    packed = compress(codec, section(encode_batch(RECORDS)))
    for bad in (b"", b"garbage" * 20, packed[: len(packed) // 2], packed[:4] + bytes(len(packed) - 4)):
        with pytest.raises(CorruptBatchError):
            decompress(codec, bad)
    stored = with_section(codec, b"garbage" * 20, 3)
    assert validate_batch(stored).flags == codec  # accepted: only readers decompress
    [decoded] = decode_batches(stored)
    assert isinstance(decoded.error, CorruptBatchError) and decoded.records == []  # stepped over, no exception


def test_snappy_blocks_running_past_the_end_are_corrupt() -> None:
    framed = compress(Codec.SNAPPY, b"abc" * 1000)
    for bad in (framed[:-1], framed + b"\x00\x00", framed[:16] + struct.pack(">i", -5)):
        with pytest.raises(CorruptBatchError):
            decompress(Codec.SNAPPY, bad)


def test_validate_accepts_codecs_1_to_4_and_refuses_other_flags() -> None:
    plain = bytearray(encode_batch([RecordData(b"v")]))
    for flags in (5, 6, 7, 0x08, 0x21, -1):
        data = bytearray(plain)
        struct.pack_into(">h", data, 17, flags)
        with pytest.raises(CorruptBatchError, match="flags"):
            validate_batch(recrc(data))
    for codec in CODECS:
        assert validate_batch(encode_batch([RecordData(b"v")], compression=codec)).flags == codec
    with pytest.raises(CorruptBatchError):
        decompress(5, b"whatever")
    with pytest.raises(ValueError, match="codec"):
        compress(5, b"whatever")


def test_a_compressed_count_is_checked_against_the_decompressed_size() -> None:
    tiny = [RecordData(b"") for _ in range(2000)]  # 5 bytes each: the section compresses to far less
    batch = encode_batch(tiny, compression=Codec.ZSTD)
    assert len(batch) - HEADER_SIZE < 2000 * 5
    assert validate_batch(batch).record_count == 2000
    assert len(decode_records(batch)) == 2000
    too_many = with_section(Codec.ZSTD, section(batch), MAX_DECOMPRESSED_SIZE // 5 + 1)
    with pytest.raises(CorruptBatchError, match="cannot fit"):
        validate_batch(too_many)  # offsets a false count would take, refused without decompressing
    with pytest.raises(CorruptBatchError, match="cannot fit"):
        decode_records(with_section(Codec.ZSTD, section(batch), 2001))


def test_readers_decode_stored_compressed_batches() -> None:
    body = b"".join(encode_batch(RECORDS[100 * i : 100 * i + 100], compression=c) for i, c in enumerate(CODECS))
    stored, offset = bytearray(), 10
    for pos, length, count in batch_spans(body):  # what the server stores: the batches as given
        batch = bytearray(body[pos : pos + length])
        set_base_offset(batch, offset)
        stored += batch
        offset += count
    assert [read_header(stored, p).flags for p, *_ in batch_spans(bytes(stored))] == CODECS
    messages, after = _decode("t", 0, bytes(stored), 10)  # the SDK consumer
    assert after == 410
    assert [(m.offset, m.key, m.value, m.headers, m.timestamp) for m in messages] == [
        (10 + i, r.key, r.value, tuple(r.headers), r.timestamp) for i, r in enumerate(RECORDS[:400])
    ]
    answer = _messages_json([bytes(stored)], 150, 1000, 1 << 40, 1 << 30)  # the server's JSON fetch
    assert answer["next_offset"] == 410 and "skipped" not in answer
    assert [m["value"] for m in answer["messages"]] == [r.value.decode() for r in RECORDS[140:400]]  # type: ignore[attr-defined,union-attr]
    first = bytes(stored[: read_header(stored).length])  # a fetch quota cuts a compressed batch
    assert len(first) > 500
    [cut] = trim_to_allowance([first], 50, 500, 1 << 30)
    kept = decode_records(cut)
    assert kept and kept[0].offset == 50 and fields_of(kept) == fields_of(decode_records(first)[40 : 40 + len(kept)])


class Scripted:
    """A server for the producer: one partition; keeps every batch it is sent."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []

    def __call__(self, method: str, url: str, params: Mapping[str, str | int], body: bytes | None) -> Response:
        if method == "GET":
            routes = {"mode": "standalone", "ring_version": 0, "topics": {"t": [{"partition": 0, "url": None}]}}
            return Response(200, {}, orjson.dumps(routes))
        assert body is not None
        base = sum(read_header(b).record_count for b in self.batches)
        self.batches.append(body)
        count = validate_batch(body).record_count
        return Response(200, {}, orjson.dumps({"results": [{"partition": 0, "offset": base, "count": count}]}))


@pytest.mark.parametrize("name", ["gzip", "snappy", "lz4", "zstd"])
def test_producers_compress_every_batch(name: str) -> None:
    script = Scripted()
    with Producer("http://scripted", transport=FunctionTransport(script), compression=name, linger_ms=1) as producer:
        for r in RECORDS[:50]:
            producer.send("t", r.value, key=r.key, headers=r.headers, timestamp=r.timestamp)
        producer.flush()

    async def produce_async() -> None:
        transport = AsyncFunctionTransport(script)
        async with AsyncProducer("http://scripted", transport=transport, compression=name) as producer:
            for r in RECORDS[50:100]:
                await producer.send("t", r.value, key=r.key, headers=r.headers, timestamp=r.timestamp)
            await producer.flush()

    asyncio.run(produce_async())
    assert {read_header(b).flags for b in script.batches} == {codec_named(name)}
    assert fields_of([r for b in script.batches for r in decode_records(b)]) == fields(RECORDS[:100])


def test_an_unknown_compression_is_a_clear_value_error() -> None:
    assert codec_named("none") == Codec.NONE
    for bad in ("brotli", "ZSTD", ""):
        with pytest.raises(ValueError, match="none, gzip, snappy, lz4, zstd"):
            Producer("http://127.0.0.1:9", compression=bad)
        with pytest.raises(ValueError, match="compression"):
            AsyncProducer("http://127.0.0.1:9", compression=bad)


def test_the_servers_readers_decompress_a_bomb_only_up_to_their_limit() -> None:
    """A batch of a few KiB that decompresses to 4 MiB (one record), then an ordinary one: a server reader
    with a 1 MiB limit steps over the bomb in a JSON answer (with the reason) and serves it whole when a
    quota cuts; the SDK's own limit (64 MiB) still reads it."""
    bomb = bytearray(encode_batch([RecordData(bytes(4 << 20))], compression=Codec.ZSTD))
    assert len(bomb) < 4096
    after = bytearray(encode_batch([RecordData(b"after")]))
    set_base_offset(after, 1)
    stored = [bytes(bomb) + bytes(after)]
    answer = _messages_json(stored, 0, 1000, 1 << 20, 1 << 20)
    assert [m["value"] for m in answer["messages"]] == ["after"]  # type: ignore[index,union-attr]
    [skipped] = answer["skipped"]  # type: ignore[misc]
    assert skipped["base_offset"] == 0 and "the limit is 1048576" in skipped["error"]  # type: ignore[index]
    assert trim_to_allowance([bytes(bomb)], 0, 100, 1 << 20) == [bytes(bomb)]
    assert len(decode_records(bomb)[0].value or b"") == 4 << 20


def test_a_json_answer_ends_once_its_records_reach_max_bytes() -> None:
    """The fetch's max_bytes counts stored bytes, which compression multiplies: the JSON answer also stops
    at max_bytes of keys and values (one record at least), so 200 KiB stored cannot become megabytes of JSON."""
    records = [RecordData(bytes(100_000)) for _ in range(30)]  # 3 MB of records
    stored = bytes(encode_batch(records, compression=Codec.ZSTD))
    assert len(stored) < 200_000
    answer = _messages_json([stored], 0, 1000, 250_000, 1 << 30)
    assert len(answer["messages"]) == 3 and answer["next_offset"] == 3  # type: ignore[arg-type]
    one = _messages_json([stored], 5, 1000, 1, 1 << 30)
    assert len(one["messages"]) == 1 and one["next_offset"] == 6  # type: ignore[arg-type]


def test_a_compressed_batch_anywhere_in_a_storage_read_sends_the_json_answer_off_the_event_loop() -> None:
    """A read from storage is one buffer of many batches; the tail cache gives a list of them."""
    plain = bytes(encode_batch([RecordData(b"plain")]))
    packed = bytes(encode_batch([RecordData(b"packed")], compression=Codec.ZSTD))
    assert _holds_compressed([plain + plain + packed])
    assert _holds_compressed([plain, packed])
    assert not _holds_compressed([plain + plain, plain])
    assert not _holds_compressed([plain + b"\x00" * 20])  # an unreadable header ends the look
