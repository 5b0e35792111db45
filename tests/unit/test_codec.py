"""Property tests of the record-batch codec: round trip, every damaged bit and every truncation detected."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fencing import scan_valid_prefix
from talos import (
    HEADER_SIZE,
    BatchError,
    CorruptBatchError,
    RecordData,
    TruncatedBatchError,
    decode_records,
    encode_batch,
    iter_batches,
    read_header,
    set_base_offset,
    verify_batch,
)
from talos._codec import one_value_batch

pytestmark = pytest.mark.usefixtures("codec_implementation")  # each test: pure Python, then compiled

BASE_OFFSET_BITS = 64  # the first 8 bytes: not covered by the CRC, by design

blobs = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=20), st.one_of(st.none(), st.binary(max_size=40))), max_size=4)
records = st.builds(
    RecordData,
    value=blobs,
    key=blobs,
    headers=headers,
    timestamp=st.one_of(st.none(), st.integers(min_value=0, max_value=2**45)),
)
batches = st.lists(records, min_size=1, max_size=20)
ids = st.integers(min_value=-1, max_value=2**62)


@pytest.mark.slow
@given(batches, st.integers(min_value=0, max_value=2**62), ids, st.integers(-1, 2**15 - 1), st.integers(-1, 2**31 - 1))
def test_round_trip(recs: list[RecordData], base: int, producer_id: int, epoch: int, sequence: int) -> None:
    data = encode_batch(recs, base_offset=base, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)
    header = verify_batch(data)
    assert header.length == len(data)
    assert header.record_count == len(recs)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (producer_id, epoch, sequence)
    decoded = decode_records(data)
    assert [r.offset for r in decoded] == list(range(base, base + len(recs)))
    for original, got in zip(recs, decoded, strict=True):
        assert (got.key, got.value, list(got.headers)) == (original.key, original.value, list(original.headers))
        if original.timestamp is not None:
            assert got.timestamp == original.timestamp
    assert header.max_timestamp == max(r.timestamp for r in decoded)
    assert header.first_timestamp == decoded[0].timestamp


@given(batches, st.integers(min_value=0, max_value=2**62))
def test_assigning_offsets_patches_only_the_base_offset(recs: list[RecordData], base: int) -> None:
    data = encode_batch(recs)
    patched = bytearray(data)
    set_base_offset(patched, base)
    assert patched[8:] == data[8:]
    assert verify_batch(patched).base_offset == base
    assert decode_records(patched)[0].offset == base


@pytest.mark.slow
@settings(max_examples=300)
@given(batches, st.data())
def test_any_flipped_bit_outside_the_base_offset_is_detected(recs: list[RecordData], data: st.DataObject) -> None:
    encoded = bytearray(encode_batch(recs))
    bit = data.draw(st.integers(min_value=BASE_OFFSET_BITS, max_value=len(encoded) * 8 - 1), label="bit")
    encoded[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(BatchError):
        verify_batch(encoded)


@pytest.mark.slow
@settings(max_examples=100)
@given(st.lists(batches, min_size=2, max_size=5), st.data())
def test_flipped_base_offset_bit_is_caught_by_the_log_scan(groups: list[list[RecordData]], data: st.DataObject) -> None:
    """The CRC leaves the base offset out; the log catches a damaged one because offsets must be contiguous."""
    buffers = []
    offset = 0
    for recs in groups:
        buffers.append(encode_batch(recs, base_offset=offset))
        offset += len(recs)
    segment = bytearray(b"".join(buffers))
    victim = data.draw(st.integers(min_value=0, max_value=len(buffers) - 1), label="batch")
    bit = data.draw(st.integers(min_value=0, max_value=BASE_OFFSET_BITS - 1), label="bit")
    start = sum(len(b) for b in buffers[:victim])
    segment[start + bit // 8] ^= 1 << (bit % 8)
    valid, end = scan_valid_prefix(segment, 0)
    assert valid == start
    assert end == sum(len(g) for g in groups[:victim])


@given(batches, st.data())
def test_truncation_is_detected(recs: list[RecordData], data: st.DataObject) -> None:
    encoded = encode_batch(recs)
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1), label="cut")
    with pytest.raises(TruncatedBatchError):
        verify_batch(encoded[:cut])


def test_every_truncation_point_of_a_batch() -> None:
    encoded = encode_batch([RecordData(b"value", b"key", [("h", b"v")]), RecordData(None)])
    for cut in range(len(encoded)):
        with pytest.raises(TruncatedBatchError):
            read_header(encoded[:cut])


def test_iter_batches_walks_consecutive_batches_and_stops_at_damage() -> None:
    first = encode_batch([RecordData(b"a")], base_offset=0)
    second = encode_batch([RecordData(b"b"), RecordData(b"c")], base_offset=1)
    joined = first + second
    assert [(pos, h.base_offset, h.record_count) for pos, h in iter_batches(joined)] == [
        (0, 0, 1),
        (len(first), 1, 2),
    ]
    damaged = bytearray(joined)
    damaged[-1] ^= 0xFF
    seen = []
    with pytest.raises(CorruptBatchError):
        for _pos, header in iter_batches(damaged):
            seen.append(header.base_offset)
    assert seen == [0]


def test_header_layout_is_53_bytes_and_empty_batches_are_refused() -> None:
    assert HEADER_SIZE == 53
    assert len(encode_batch([RecordData(b"")])) > HEADER_SIZE
    with pytest.raises(ValueError, match="at least one record"):
        encode_batch([])


def test_garbage_is_not_a_batch() -> None:
    with pytest.raises(BatchError):
        verify_batch(b"\x00" * 100)
    with pytest.raises(CorruptBatchError, match="magic"):
        verify_batch(b"\x00" * 12 + b"\x07" + b"\x00" * 100)


@given(st.binary(max_size=40_000), st.integers(min_value=0, max_value=2**62))
def test_one_value_batch_is_encode_batch_of_that_value_and_its_header(value: bytes, now: int) -> None:
    batch, header = one_value_batch(value, now)
    assert batch == encode_batch([RecordData(value, None, [], now)])
    assert header == read_header(batch) == verify_batch(batch)
