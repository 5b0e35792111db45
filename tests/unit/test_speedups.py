"""The compiled record codec (talos/_speedups.c) against the pure-Python one it replaces: the same answer,
or the same error (class and message), for random records, arguments and damaged buffers."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import talos._codec as codec
from talos import RecordData

try:
    from talos import _speedups as speedups
except ImportError:
    speedups = None

needs_speedups = pytest.mark.skipif(speedups is None, reason="the compiled codec was not built (no C compiler?)")

INT64 = st.integers(-(2**63), 2**63 - 1)
# timestamps: near the epoch, at the ends of 64 bits (deltas that overflow them), and past them
stamps = st.one_of(st.none(), st.integers(0, 2**45), INT64, st.integers(-(2**66), 2**66))
# (a length of 8192 bytes or more takes a three-byte varint)
blobs = st.one_of(st.none(), st.binary(max_size=100), st.just(b"x" * 9000))
odd = st.sampled_from(["text", bytearray(b"ba"), 7, memoryview(b"mv"), True])  # what Python may take or refuse
good_headers = st.lists(st.tuples(st.text(max_size=20), st.one_of(st.none(), st.binary(max_size=40))), max_size=4)
odd_header = st.one_of(
    st.tuples(st.just("\ud800"), st.none()),  # a lone surrogate cannot be UTF-8
    st.tuples(st.text(max_size=3), odd),
    st.lists(st.binary(max_size=3), min_size=1, max_size=3),
    st.tuples(st.binary(max_size=3), st.none()),
)


def outcome(function: Callable[..., Any], *args: object) -> tuple[str, object]:
    try:
        return "ok", function(*args)
    except Exception as exc:
        return "error", (type(exc), str(exc))


@st.composite
def plain_records(draw: st.DrawFn) -> RecordData:
    return RecordData(draw(blobs), draw(blobs), draw(good_headers), draw(stamps))


@st.composite
def record_lists(draw: st.DrawFn) -> list[object]:
    """Well-formed records; in half of the lists one has a field of another type or is missing one."""
    records: list[object] = draw(st.lists(plain_records(), max_size=12))
    if not records or draw(st.booleans()):
        return records
    victim = draw(st.integers(0, len(records) - 1))
    record = records[victim]
    assert isinstance(record, RecordData)
    fields = {"value": record.value, "key": record.key, "headers": record.headers, "timestamp": record.timestamp}
    name = draw(st.sampled_from(sorted(fields)))
    if draw(st.integers(0, 4)) == 0:
        del fields[name]
    elif name == "headers":
        fields[name] = draw(st.one_of(st.lists(odd_header, min_size=1, max_size=2), odd, st.just({"a": b"b"})))
    else:
        fields[name] = draw(st.one_of(odd, st.just(1.5), st.just({"a": b"b"})))
    records[victim] = SimpleNamespace(**fields)
    return records


@pytest.mark.slow
@needs_speedups
@settings(max_examples=300)
@given(record_lists(), st.one_of(INT64, st.integers(-(2**70), 2**70), odd), st.booleans())
def test_encode_records_matches_python(records: list[object], now: object, as_tuple: bool) -> None:
    batch = tuple(records) if as_tuple else records
    assert outcome(speedups.encode_records, batch, now) == outcome(codec._encode_records_py, batch, now)


@needs_speedups
@given(st.lists(plain_records(), min_size=1, max_size=12), INT64)
def test_encoded_records_decode_with_either(records: list[RecordData], now: int) -> None:
    python = outcome(codec._encode_records_py, records, now)
    if python[0] == "error":
        return  # e.g. a lone surrogate in a header name: the equality test covers it
    body, first, _ = speedups.encode_records(records, now)
    args = (body, 0, len(body), len(records), 10, first)
    assert outcome(speedups.decode_records_section, *args) == outcome(codec._decode_records_py, *args)


@needs_speedups
@given(
    st.one_of(st.none(), st.lists(st.one_of(blobs, odd), max_size=10)),
    st.lists(st.one_of(blobs, blobs, odd), max_size=10),
    st.one_of(INT64, st.integers(-(2**70), 2**70), odd),
    st.booleans(),
)
def test_encode_values_matches_python(
    keys: list[object] | None, values: list[object], delta: object, tup: bool
) -> None:
    if keys is not None and len(keys) != len(values) and tup:
        keys = keys[: len(values)]
    args = (keys, tuple(values) if tup else values, delta)
    assert outcome(speedups.encode_values, *args) == outcome(codec._encode_values_py, *args)


@needs_speedups
@given(st.lists(st.tuples(blobs, blobs), min_size=1, max_size=12), INT64)
def test_encode_values_is_encode_records_with_one_timestamp(
    pairs: list[tuple[bytes | None, bytes | None]], now: int
) -> None:
    records = [RecordData(value, key) for key, value in pairs]
    keys, values = [key for key, _ in pairs], [value for _, value in pairs]
    for encode_values, encode_records in (
        (speedups.encode_values, speedups.encode_records),
        (codec._encode_values_py, codec._encode_records_py),
    ):
        assert encode_values(keys, values, 0) == encode_records(records, now)[0]


@needs_speedups
@given(
    st.one_of(st.binary(max_size=200), st.just(b"v" * 9000), odd), st.one_of(INT64, st.integers(-(2**70), 2**70), odd)
)
def test_one_value_batch_matches_python(value: object, now: object) -> None:
    assert outcome(speedups.one_value_batch, value, now) == outcome(codec._one_value_batch_py, value, now)


@st.composite
def sections(draw: st.DrawFn) -> tuple[object, int, int, int, int, int]:
    """A records section, often damaged, in some kind of buffer, with (often wrong) walk/decode arguments."""
    records = draw(
        st.lists(
            st.builds(
                RecordData,
                blobs,
                blobs,
                st.lists(st.tuples(st.text(max_size=5), blobs), max_size=3),
                st.one_of(st.none(), INT64),
            ),
            min_size=1,
            max_size=6,
        )
    )
    now = draw(INT64)
    try:
        body, first, _ = codec._encode_records_py(records, now)
    except UnicodeEncodeError:
        body, first = b"", now
    data = bytearray(body)
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["flip", "junk", "cut", "extend", "varint"]))
        if kind == "flip" and data:
            bit = draw(st.integers(0, len(data) * 8 - 1))
            data[bit // 8] ^= 1 << (bit % 8)
        elif kind == "junk" and data:
            at = draw(st.integers(0, len(data) - 1))
            junk = draw(st.binary(min_size=1, max_size=12))
            data[at : at + len(junk)] = junk
        elif kind == "cut" and data:
            del data[draw(st.integers(0, len(data) - 1)) :]
        elif kind == "extend":
            data += draw(st.binary(min_size=1, max_size=12))
        elif kind == "varint" and data:  # the longest varints: 10 bytes, 70 bits
            at = draw(st.integers(0, len(data) - 1))
            data[at:at] = draw(st.sampled_from([b"\xff" * 9 + b"\x7f", b"\xfe" * 9 + b"\x01", b"\xff" * 10 + b"\x01"]))
    pad = draw(st.integers(0, 3))
    raw = bytes(draw(st.binary(max_size=3)) + b"\x00" * pad + bytes(data))
    start = len(raw) - len(data)
    end = len(raw)
    count = len(records)
    if draw(st.booleans()):
        start = draw(st.one_of(st.just(start), st.integers(-3, len(raw) + 3)))
        end = draw(st.one_of(st.just(end), st.integers(-3, len(raw) + 3)))
        count = draw(st.one_of(st.just(count), st.integers(-2, 12), st.just(2**63), st.just(2**70)))
    base_offset = draw(st.one_of(st.just(0), INT64, st.just(2**64)))
    first = draw(st.one_of(st.just(first), INT64, st.just(-(2**64))))
    kind = draw(st.sampled_from(["bytes", "bytearray", "memoryview", "signed view", "strided view", "str"]))
    buffer: object = {
        "bytes": raw,
        "bytearray": bytearray(raw),
        "memoryview": memoryview(raw),
        "signed view": memoryview(raw).cast("b"),
        "strided view": memoryview(raw)[::2],
        "str": raw.decode("latin-1"),
    }[kind]
    return buffer, start, end, count, base_offset, first


@pytest.mark.slow
@needs_speedups
@settings(max_examples=500)
@given(sections())
# A signed view's bytes run -128..127: a walk once read -1 as a length that stays put and looped 2**63 times.
@example((memoryview(b"\xff\xff\xff").cast("b"), 0, 3, 2**63, 0, 0))
def test_walk_and_decode_accept_and_refuse_what_python_does(section: tuple[object, int, int, int, int, int]) -> None:
    walk = section[:4]
    assert outcome(speedups.walk_records, *walk) == outcome(codec._walk_records_py, *walk)
    assert outcome(speedups.decode_records_section, *section) == outcome(codec._decode_records_py, *section)


@needs_speedups
@given(st.binary(max_size=64), st.integers(0, 8))
def test_random_bytes_are_refused_alike(data: bytes, count: int) -> None:
    args = (data, 0, len(data), count)
    assert outcome(speedups.walk_records, *args) == outcome(codec._walk_records_py, *args)
    full = (*args, 0, 0)
    assert outcome(speedups.decode_records_section, *full) == outcome(codec._decode_records_py, *full)


@needs_speedups
def test_wrong_arguments_get_pythons_errors() -> None:
    for name, twin in (
        ("encode_records", "_encode_records_py"),
        ("encode_values", "_encode_values_py"),
        ("walk_records", "_walk_records_py"),
        ("decode_records_section", "_decode_records_py"),
    ):
        compiled, python = getattr(speedups, name), getattr(codec, twin)
        for args in ((), (b"",), (b"", 0, 0, 0, 0, 0, 0, 0)):
            got, expected = outcome(compiled, *args), outcome(python, *args)
            assert got[0] == expected[0] == "error"
            assert got[1][0] is expected[1][0]  # type: ignore[index]


@pytest.mark.skipif(not os.environ.get("CI"), reason="outside CI the pure-Python codec is a valid install")
def test_ci_has_the_compiled_codec() -> None:
    assert speedups is not None, "CI=true, but talos._speedups did not build: the pure-Python codec was installed"


@needs_speedups
def test_the_compiled_codec_is_bound_unless_switched_off() -> None:
    switched_off = os.environ.get("TALOS_NO_SPEEDUPS") == "1"
    assert codec.SPEEDUPS is not switched_off
    probe = "import talos._codec as c; print(c.SPEEDUPS, c.walk_records.__module__)"
    env = {**os.environ, "TALOS_NO_SPEEDUPS": "1"}
    answer = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert answer.stdout.split() == ["False", "talos._codec"]
