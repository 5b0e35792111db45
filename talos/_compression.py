"""Compressed records sections: the codecs of a batch's ``flags`` bits 0-2.

The ids and the framing are Kafka's (record batch v2), so a Kafka listener can pass the compressed bytes
through as they are and a Kafka client's compressed section decodes here:

====  ======  =====================================================================================
id    name    the records section after the header is, compressed as one block
====  ======  =====================================================================================
0     none    the records as they are
1     gzip    a gzip stream (RFC 1952), as ``java.util.zip.GZIPOutputStream`` writes it
2     snappy  snappy-java's ("xerial") framing: a 16-byte header, then 32 KiB blocks, each a big-endian
              int32 length and raw snappy; raw snappy without that framing (what librdkafka writes) is
              read too
3     lz4     an LZ4 frame (magic 0x184D2204) with independent blocks, which Kafka's reader requires
4     zstd    a zstd frame (magic 0xFD2FB528)
====  ======  =====================================================================================

Decompression is bounded (``max_size``): a few compressed kilobytes can claim gigabytes, and a reader must
not be made to allocate them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from enum import IntEnum

import cramjam

from talos._errors import CorruptBatchError

__all__ = ["MAX_DECOMPRESSED_SIZE", "Codec", "codec_named", "compress", "decompress"]

Buffer = bytes | bytearray | memoryview


class Codec(IntEnum):
    """A batch's compression: the value of its ``flags`` bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# Beyond what any producer's batch holds (the server takes 8 MiB requests; the SDK builds 1 MiB batches):
# only a decompression bomb gets here.
MAX_DECOMPRESSED_SIZE = 64 * 1024 * 1024

_NAMES = {codec.name.lower(): codec for codec in Codec}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # format version 1, readable by version 1 readers
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default, what Kafka's Java producer writes
_BLOCK_LENGTH = struct.Struct(">i")
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_FIRST_GUESS = 64 * 1024  # the smallest output buffer tried when the size is unknown
_SHORT_WRITE = "failed to write whole buffer"


def codec_named(name: str) -> Codec:
    """The codec called ``name`` (none, gzip, snappy, lz4, zstd); ValueError for anything else."""
    codec = _NAMES.get(name)
    if codec is None:
        raise ValueError(f"compression must be one of {', '.join(_NAMES)}; got {name!r}")
    return codec


def compress(codec: int, data: Buffer) -> bytes:
    """``data`` compressed with ``codec``, framed as a Kafka client frames a records section."""
    if codec == Codec.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == Codec.SNAPPY:
        return _snappy_xerial(data)
    if codec == Codec.LZ4:
        # Independent blocks (Kafka's reader refuses linked ones); no content checksum, as Kafka writes it.
        # Level 1, LZ4's fast mode: cramjam's default (4, high compression) took 2.4 ms per 100 KiB against
        # 63 µs, for a frame about 0.2 % smaller (docs/kafka.md). Its compressor takes only ``bytes``.
        compressor = cramjam.lz4.Compressor(level=1, content_checksum=False, block_linked=False)
        compressor.compress(data if isinstance(data, bytes) else bytes(data))
        return bytes(compressor.finish())
    if codec == Codec.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    if codec == Codec.NONE:
        return bytes(data)
    raise ValueError(f"unknown compression codec {codec}")


def decompress(codec: int, data: Buffer, *, max_size: int = MAX_DECOMPRESSED_SIZE) -> bytes:
    """``data`` decompressed. Raises :class:`CorruptBatchError` for an unknown codec, bytes that do not
    decompress, or more than ``max_size`` bytes of output (found out without producing them all)."""
    view = memoryview(data)
    if codec == Codec.GZIP:
        # ISIZE, the last 4 bytes: the size (mod 2**32) of the stream's last member. A hint only.
        hint = int.from_bytes(view[-4:], "little") if len(view) >= 18 else 0
        return _bounded(cramjam.gzip.decompress_into, view, hint, max_size, "gzip")
    if codec == Codec.SNAPPY:
        return _snappy_decompress(view, max_size)
    if codec == Codec.LZ4:
        return _bounded(cramjam.lz4.decompress_into, view, _lz4_content_size(view), max_size, "lz4")
    if codec == Codec.ZSTD:
        return _bounded(cramjam.zstd.decompress_into, view, _zstd_content_size(view), max_size, "zstd")
    raise CorruptBatchError(f"unknown compression codec {codec}")


def _bounded(
    decompress_into: Callable[[memoryview, bytearray], int], data: memoryview, hint: int, max_size: int, name: str
) -> bytes:
    """Decompress into a buffer of the hinted size, four times larger each time it is too small, up to
    ``max_size``: the work is bounded by the limit, not by what the data claims. The formats check the
    size they state (gzip's ISIZE, a frame's content size) when they end, so one over the limit is refused
    at once."""
    if hint > max_size:
        raise CorruptBatchError(f"{name} section claims {hint} bytes; the limit is {max_size}")
    size = min(max(hint or 4 * len(data), _FIRST_GUESS), max_size)
    while True:
        out = bytearray(size)
        try:
            written = decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            # A full buffer fails as a short write (Rust's io::ErrorKind::WriteZero); anything else is damage,
            # which more room would not mend (and garbage must not cost a reader buffers up to the limit).
            if _SHORT_WRITE not in str(exc):
                raise CorruptBatchError(f"{name} section does not decompress: {exc}") from None
            if size >= max_size:
                raise CorruptBatchError(f"{name} section decompresses to more than {max_size} bytes") from None
            size = min(size * 4, max_size)
            continue
        return bytes(memoryview(out)[:written])


def _snappy_xerial(data: Buffer) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK])
        parts.append(_BLOCK_LENGTH.pack(len(block)))
        parts.append(bytes(block))
    return b"".join(parts)


def _snappy_decompress(data: memoryview, max_size: int) -> bytes:
    """Xerial-framed or raw snappy. Raw snappy states its output size up front, so it is checked first."""
    if len(data) >= len(_XERIAL_HEADER) and data[: len(_XERIAL_MAGIC)] == _XERIAL_MAGIC:
        blocks: list[memoryview] = []
        pos = len(_XERIAL_HEADER)
        while pos < len(data):
            if pos + _BLOCK_LENGTH.size > len(data):
                raise CorruptBatchError("snappy block length runs past the end of the section")
            (length,) = _BLOCK_LENGTH.unpack_from(data, pos)
            pos += _BLOCK_LENGTH.size
            if length < 0 or pos + length > len(data):
                raise CorruptBatchError(f"snappy block of {length} bytes runs past the end of the section")
            blocks.append(data[pos : pos + length])
            pos += length
    else:
        blocks = [data]
    try:
        sizes = [cramjam.snappy.decompress_raw_len(block) for block in blocks]
        if sum(sizes) > max_size:
            raise CorruptBatchError(f"snappy section claims {sum(sizes)} bytes; the limit is {max_size}")
        out = bytearray(sum(sizes))
        view = memoryview(out)
        at = 0
        for block, size in zip(blocks, sizes, strict=True):
            at += cramjam.snappy.decompress_raw_into(block, view[at : at + size])
    except cramjam.DecompressionError as exc:
        raise CorruptBatchError(f"snappy section does not decompress: {exc}") from None
    if at != len(out):
        raise CorruptBatchError(f"snappy section decompressed to {at} bytes, its blocks claim {len(out)}")
    return bytes(out)


def _lz4_content_size(data: memoryview) -> int:
    """The frame's content size when its descriptor has one (Kafka's Java writer never sets it), else 0."""
    if len(data) >= 15 and data[:4] == _LZ4_MAGIC and data[4] & 0x08:
        return int.from_bytes(data[6:14], "little")
    return 0


def _zstd_content_size(data: memoryview) -> int:
    """Frame_Content_Size from the zstd frame header when present (zstd-jni's stream leaves it out), else 0."""
    if len(data) < 6 or data[:4] != _ZSTD_MAGIC:
        return 0
    descriptor = data[4]
    single_segment = (descriptor >> 5) & 1
    size_bytes = (0 if not single_segment else 1, 2, 4, 8)[descriptor >> 6]
    at = 5 + (1 - single_segment) + (0, 1, 2, 4)[descriptor & 3]  # past the window descriptor and dictionary id
    if size_bytes == 0 or at + size_bytes > len(data):
        return 0
    return int.from_bytes(data[at : at + size_bytes], "little") + (256 if size_bytes == 2 else 0)
