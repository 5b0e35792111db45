"""Property tests of the batch validator: every batch the encoder makes passes, and no batch it lets through
can make a fetch fail (the server's JSON rendering and the SDK consumer's decoding, exactly as they run).

The validator checks the framing and the count (what the log's offsets rest on), not the fields inside a
record: a batch whose fields do not decode is stored, and both fetch paths step over it whole and say so."""

from __future__ import annotations

import struct

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.errors import ApiError
from server.http.messages import _messages_json, batch_spans
from talos import HEADER_SIZE, BatchError, RecordData, encode_batch, set_base_offset, validate_batch
from talos._codec import crc32c
from talos._fetcher import _decode
from tests.unit.test_codec import records

CRC_START = 17

producers = st.one_of(
    st.just((-1, -1, -1)),
    st.tuples(st.integers(0, 2**62), st.integers(0, 2**15 - 1), st.integers(0, 2**30)),
)


@st.composite
def valid_batches(draw: st.DrawFn) -> bytes:
    recs = draw(st.lists(records, min_size=1, max_size=12))  # the codec tests' records
    producer_id, epoch, sequence = draw(producers)
    return encode_batch(recs, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)


def recrc(data: bytearray) -> bytes:
    """What a forger does after changing bytes: a CRC that matches again."""
    if len(data) >= CRC_START:
        struct.pack_into(">I", data, 13, crc32c(memoryview(data)[CRC_START:]))
    return bytes(data)


@st.composite
def mutated_batches(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(valid_batches()))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "records", "count", "header_field", "extend"]))
        if kind == "flip":  # any bit after the base offset (which the server overwrites)
            bit = draw(st.integers(8 * 8, len(data) * 8 - 1))
            data[bit // 8] ^= 1 << (bit % 8)
        elif kind == "truncate":  # cut, with the length field told the new size
            data = data[: draw(st.integers(HEADER_SIZE, len(data)))]
            struct.pack_into(">i", data, 8, len(data))
        elif kind == "records" and len(data) > HEADER_SIZE:  # random bytes over part of the records
            start = draw(st.integers(HEADER_SIZE, len(data) - 1))
            junk = draw(st.binary(min_size=1, max_size=len(data) - start))
            data[start : start + len(junk)] = junk
        elif kind == "count":
            struct.pack_into(">i", data, 19, draw(st.integers(-(2**31), 2**31 - 1)))
        elif kind == "header_field":  # timestamps, producer fields, flags
            at, fmt = draw(st.sampled_from([(23, ">q"), (31, ">q"), (39, ">q"), (47, ">h"), (49, ">i"), (17, ">h")]))
            bits = 8 * struct.calcsize(fmt)
            struct.pack_into(fmt, data, at, draw(st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)))
        elif kind == "extend":  # bytes appended to the records, length told
            data += draw(st.binary(min_size=1, max_size=12))
            struct.pack_into(">i", data, 8, len(data))
    return recrc(data)


def assert_fetchable(body: bytes, base_offset: int) -> bool:
    """Store what the server accepted (offsets assigned by patching) and read it back as both fetch paths
    do: every offset is either delivered or inside a batch reported as skipped, nothing raises, and both
    paths agree. Returns whether anything was skipped."""
    spans = batch_spans(body)
    stored = bytearray()
    next_offset = base_offset
    for pos, length, count in spans:
        batch = bytearray(body[pos : pos + length])
        set_base_offset(batch, next_offset)
        stored += batch
        next_offset += count
    answer = _messages_json([bytes(stored)], base_offset, 10**6, 1 << 40, 1 << 30)
    orjson.dumps(answer)  # the JSON answer can be rendered
    skipped = answer.get("skipped", [])
    assert isinstance(skipped, list)
    covered = {m["offset"] for m in answer["messages"]}  # type: ignore[attr-defined]
    for gap in skipped:
        covered |= set(range(gap["base_offset"], gap["next_offset"]))
    assert covered == set(range(base_offset, next_offset))
    assert answer["next_offset"] == next_offset
    messages, after = _decode("t", 0, bytes(stored), base_offset)  # the SDK consumer on the binary path
    assert [m.offset for m in messages] == [m["offset"] for m in answer["messages"]]  # type: ignore[attr-defined]
    assert after == next_offset
    return bool(skipped)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(valid_batches(), st.integers(0, 2**40))
def test_every_batch_the_encoder_makes_passes(batch: bytes, base: int) -> None:
    header = validate_batch(batch)
    assert header.length == len(batch)
    assert not assert_fetchable(batch, base)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_batches(), st.integers(0, 2**40))
def test_a_mutated_batch_is_rejected_or_fetchable(body: bytes, base: int) -> None:
    try:
        batch_spans(body)
    except ApiError as exc:
        rejected: ApiError | None = exc
    else:
        rejected = None
    if rejected is not None:
        assert (rejected.status, rejected.code) in ((400, "CORRUPT_BATCH"), (400, "INVALID_REQUEST"))
        return
    assert_fetchable(body, base)


def forged(records_area: bytes, count: int, *, first: int = 1000, top: int = 1000) -> bytes:
    """A batch with the given record bytes and header fields, its length and CRC correct."""
    data = bytearray(encode_batch([RecordData(b"x", timestamp=first)]))[:HEADER_SIZE] + records_area
    struct.pack_into(">i", data, 8, len(data))
    struct.pack_into(">iqq", data, 19, count, first, top)
    return recrc(data)


def record(body: bytes) -> bytes:
    return bytes([len(body)]) + body


GOOD = record(b"\x00\x01\x04ab\x00")  # a well-formed record: key null, value "ab", no headers


@pytest.mark.parametrize(
    ("area", "count", "reason"),
    [
        (GOOD, 1, None),
        (GOOD, 2**31 - 1, "cannot fit"),
        (GOOD * 3, 2, "holds more"),
        (GOOD * 4, 5, "holds 4"),
        (GOOD[:-1], 1, "runs past"),  # truncated last record
        (GOOD + b"\xff" * 5, 2, "runs past"),  # a varint running off the end
        (GOOD + b"\x40" + b"\x00" * 4, 2, "runs past"),  # a record length past the end
    ],
)
def test_framing_attacks_are_refused(area: bytes, count: int, reason: str | None) -> None:
    batch = forged(area, count)
    if reason is None:
        assert validate_batch(batch).record_count == count
        return
    with pytest.raises(BatchError, match=reason):
        validate_batch(batch)


@pytest.mark.parametrize(
    "area",
    [
        record(b"\x00\x80\x80\x80\x80\x80\x02\x01\x00"),  # a huge key length inside a well-framed record
        record(b"\x00\x03\x04ab\x00"),  # a negative key length
        record(b"\x00\x01\x04ab\x01\x01\xff\x01"),  # a header name that is not UTF-8
        record(b"\x00\x01\x04ab\x00\x00"),  # a byte left inside the record
    ],
)
def test_garbage_inside_a_framed_record_is_stored_and_stepped_over(area: bytes) -> None:
    body = forged(GOOD, 1) + forged(area + GOOD, 2) + forged(GOOD, 1)
    assert assert_fetchable(body, 100)
    answer = _messages_json([_stored(body, 100)], 100, 1000, 1 << 40, 1 << 30)
    assert [m["offset"] for m in answer["messages"]] == [100, 103]  # type: ignore[attr-defined]
    [gap] = answer["skipped"]  # type: ignore[misc]
    assert (gap["base_offset"], gap["next_offset"]) == (101, 103)
    assert isinstance(gap["error"], str) and gap["error"]


def _stored(body: bytes, base_offset: int) -> bytes:
    stored = bytearray()
    for pos, length, count in batch_spans(body):
        batch = bytearray(body[pos : pos + length])
        set_base_offset(batch, base_offset)
        stored += batch
        base_offset += count
    return bytes(stored)


def test_producer_fields_and_flags_are_checked() -> None:
    idempotent = encode_batch([RecordData(b"v")] * 3, producer_id=7, producer_epoch=0, base_sequence=2**31 - 3)
    assert validate_batch(idempotent).record_count == 3
    overflowing = encode_batch([RecordData(b"v")] * 3, producer_id=7, producer_epoch=0, base_sequence=2**31 - 2)
    with pytest.raises(BatchError, match="sequences"):
        validate_batch(overflowing)
    with pytest.raises(BatchError, match="flags"):  # codecs are 1-4 (tests/unit/test_compression.py)
        data = bytearray(encode_batch([RecordData(b"v")]))
        struct.pack_into(">h", data, 17, 5)
        validate_batch(recrc(data))
