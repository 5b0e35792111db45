"""The Kafka protocol's primitive types: a bounds-checked reader over a frame and a bytearray-backed writer.

Everything a peer controls goes through :class:`Reader`, so every malformed input ends as one
:class:`ProtocolError`: lengths are checked against the bytes that remain before anything is sliced or
allocated, and ``struct``/``IndexError``/``UnicodeDecodeError`` never escape. The writer is fed by the
server itself, so a value it cannot represent is a bug there and raises ``ValueError``.
"""

from __future__ import annotations

import struct
import uuid

from talos._codec import Buffer

__all__ = ["KEPT_APART", "MAX_STRING_BYTES", "Buffer", "ProtocolError", "Reader", "Writer"]

# A bytes value this large is not copied into the writer's buffer: a Fetch answer's records go to the socket
# as they are (``Writer.parts``). Smaller ones are copied: a part per value would cost more than the copy.
KEPT_APART = 16 * 1024

# Kafka refuses longer strings even in the compact form (whose length prefix could say more).
MAX_STRING_BYTES = 0x7FFF

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_F64 = struct.Struct(">d")


class ProtocolError(Exception):
    """The bytes are not a valid encoding of what was expected (truncated, bad length, bad UTF-8, ...)."""


class Reader:
    """Reads primitives from ``buf[pos:end]``; ``end`` can be narrowed to confine a nested read."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None) -> None:
        view = memoryview(data)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        self.buf = view
        self.pos = pos
        self.end = len(view) if end is None else end

    def remaining(self) -> int:
        return self.end - self.pos

    def _advance(self, size: int) -> int:
        pos = self.pos
        if size > self.end - pos:
            raise ProtocolError(f"need {size} bytes at offset {pos}, only {self.end - pos} left")
        self.pos = pos + size
        return pos

    def read_raw(self, size: int) -> memoryview:
        if size < 0:
            raise ProtocolError(f"negative length {size} at offset {self.pos}")
        pos = self._advance(size)
        return self.buf[pos : pos + size]

    def skip(self, size: int) -> None:
        if size < 0:
            raise ProtocolError(f"negative length {size} at offset {self.pos}")
        self._advance(size)

    # Fixed-width integers ----------------------------------------------------------------------------------

    def read_int8(self) -> int:
        value: int = _I8.unpack_from(self.buf, self._advance(1))[0]
        return value

    def read_int16(self) -> int:
        value: int = _I16.unpack_from(self.buf, self._advance(2))[0]
        return value

    def read_int32(self) -> int:
        value: int = _I32.unpack_from(self.buf, self._advance(4))[0]
        return value

    def read_int64(self) -> int:
        value: int = _I64.unpack_from(self.buf, self._advance(8))[0]
        return value

    def read_uint16(self) -> int:
        value: int = _U16.unpack_from(self.buf, self._advance(2))[0]
        return value

    def read_uint32(self) -> int:
        value: int = _U32.unpack_from(self.buf, self._advance(4))[0]
        return value

    def read_float64(self) -> float:
        value: float = _F64.unpack_from(self.buf, self._advance(8))[0]
        return value

    def read_bool(self) -> bool:
        # Kafka reads any non-zero byte as true.
        return self.buf[self._advance(1)] != 0

    def read_uuid(self) -> uuid.UUID:
        pos = self._advance(16)
        return uuid.UUID(bytes=bytes(self.buf[pos : pos + 16]))

    # Variable-length integers ------------------------------------------------------------------------------

    def _read_varbits(self, max_bytes: int) -> int:
        buf = self.buf
        pos = self.pos
        end = self.end
        value = 0
        shift = 0
        for _ in range(max_bytes):
            if pos >= end:
                raise ProtocolError(f"truncated varint at offset {self.pos}")
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                self.pos = pos
                return value
            shift += 7
        raise ProtocolError(f"varint longer than {max_bytes} bytes at offset {self.pos}")

    def read_unsigned_varint(self) -> int:
        pos = self.pos
        # Lengths, counts and tags almost always fit one byte.
        if pos < self.end:
            byte = self.buf[pos]
            if byte < 0x80:
                self.pos = pos + 1
                return byte
        # Five bytes at most, as Kafka; the bits past 32 are dropped like Java's int does.
        return self._read_varbits(5) & 0xFFFFFFFF

    def read_varint(self) -> int:
        raw = self._read_varbits(5) & 0xFFFFFFFF
        return (raw >> 1) ^ -(raw & 1)

    def read_varlong(self) -> int:
        raw = self._read_varbits(10) & 0xFFFFFFFFFFFFFFFF
        return (raw >> 1) ^ -(raw & 1)

    # Strings -----------------------------------------------------------------------------------------------

    def _decode_utf8(self, size: int) -> str:
        pos = self._advance(size)
        try:
            return str(self.buf[pos : pos + size], "utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"string at offset {pos} is not UTF-8") from exc

    def read_string(self) -> str:
        size = self.read_int16()
        if size < 0:
            raise ProtocolError(f"non-nullable string has length {size} at offset {self.pos - 2}")
        return self._decode_utf8(size)

    def read_nullable_string(self) -> str | None:
        size = self.read_int16()
        if size == -1:
            return None
        if size < 0:
            raise ProtocolError(f"string has length {size} at offset {self.pos - 2}")
        return self._decode_utf8(size)

    def _compact_length(self) -> int:
        """The length of a compact string/bytes/array: the unsigned varint minus one; -1 means null."""
        pos = self.pos
        if pos < self.end:
            byte = self.buf[pos]
            if byte < 0x80:
                self.pos = pos + 1
                return byte - 1
        return (self._read_varbits(5) & 0xFFFFFFFF) - 1

    def read_compact_string(self) -> str:
        size = self._compact_length()
        if size < 0:
            raise ProtocolError(f"non-nullable compact string is null at offset {self.pos - 1}")
        if size > MAX_STRING_BYTES:
            raise ProtocolError(f"compact string length {size} exceeds {MAX_STRING_BYTES}")
        return self._decode_utf8(size)

    def read_compact_nullable_string(self) -> str | None:
        size = self._compact_length()
        if size < 0:
            return None
        if size > MAX_STRING_BYTES:
            raise ProtocolError(f"compact string length {size} exceeds {MAX_STRING_BYTES}")
        return self._decode_utf8(size)

    # Bytes -------------------------------------------------------------------------------------------------

    def read_bytes(self) -> bytes:
        size = self.read_int32()
        if size < 0:
            raise ProtocolError(f"non-nullable bytes have length {size} at offset {self.pos - 4}")
        return bytes(self.read_raw(size))

    def read_nullable_bytes(self) -> bytes | None:
        size = self.read_int32()
        if size == -1:
            return None
        return bytes(self.read_raw(size))

    def read_compact_bytes(self) -> bytes:
        size = self._compact_length()
        if size < 0:
            raise ProtocolError(f"non-nullable compact bytes are null at offset {self.pos - 1}")
        return bytes(self.read_raw(size))

    def read_compact_nullable_bytes(self) -> bytes | None:
        size = self._compact_length()
        if size < 0:
            return None
        return bytes(self.read_raw(size))

    def read_nullable_bytes_view(self) -> memoryview | None:
        """Like :meth:`read_nullable_bytes` without the copy: a view into the frame (record batches)."""
        size = self.read_int32()
        if size == -1:
            return None
        return self.read_raw(size)

    def read_compact_nullable_bytes_view(self) -> memoryview | None:
        size = self._compact_length()
        if size < 0:
            return None
        return self.read_raw(size)

    # Arrays and tagged fields ------------------------------------------------------------------------------

    def _check_count(self, count: int, min_item_size: int) -> int:
        # Every element takes at least min_item_size bytes, so a count the remaining bytes cannot hold is
        # refused before the caller builds a list that size.
        if count * max(min_item_size, 1) > self.end - self.pos:
            raise ProtocolError(f"array of {count} elements cannot fit in {self.end - self.pos} bytes")
        return count

    def read_array_length(self, min_item_size: int) -> int:
        """An int32 element count; -1 means a null array (the caller decides whether that is allowed)."""
        count = self.read_int32()
        if count < -1:
            raise ProtocolError(f"array has length {count} at offset {self.pos - 4}")
        return self._check_count(count, min_item_size)

    def read_compact_array_length(self, min_item_size: int) -> int:
        return self._check_count(self._compact_length(), min_item_size)

    def read_tagged_fields(self) -> dict[int, memoryview]:
        """A tagged-field section as raw values by tag (for callers that know no tags)."""
        out: dict[int, memoryview] = {}
        for _ in range(self._check_count(self.read_unsigned_varint(), 2)):
            tag = self.read_unsigned_varint()
            out[tag] = self.read_raw(self.read_unsigned_varint())
        return out

    def skip_tagged_fields(self) -> None:
        for _ in range(self._check_count(self.read_unsigned_varint(), 2)):
            self.read_unsigned_varint()
            self.skip(self.read_unsigned_varint())


class Writer:
    """Appends primitives to a bytearray; a bytes value of at least :data:`KEPT_APART` bytes (a Fetch answer's
    records) is kept as its own part instead of being copied in, for :meth:`parts` to hand to ``writelines``."""

    __slots__ = ("_first", "_parts", "_parts_size", "buf")

    def __init__(self, prefix: bytes = b"") -> None:
        self.buf = self._first = bytearray(prefix)
        self._parts: list[Buffer] = []  # what came before ``buf``: finished buffers and the values kept apart
        self._parts_size = 0

    def __len__(self) -> int:
        return self._parts_size + len(self.buf)

    def getvalue(self) -> bytes:
        return b"".join([*self._parts, self.buf]) if self._parts else bytes(self.buf)

    def parts(self) -> list[Buffer]:
        """Everything written, in order, as buffers (no copy of the values kept apart)."""
        return [*self._parts, self.buf]

    def framed_parts(self) -> list[Buffer]:
        """:meth:`parts` of a writer made with a 4-byte prefix, the size of what follows it packed into it."""
        _I32.pack_into(self._first, 0, len(self) - 4)
        return self.parts()

    def write_raw(self, data: bytes | bytearray | memoryview) -> None:
        self.buf += data

    def _write_value(self, value: Buffer, size: int) -> None:
        if size < KEPT_APART:
            self.buf += value
            return
        self._parts += (self.buf, value)
        self._parts_size += len(self.buf) + size
        self.buf = bytearray()

    # Fixed-width integers ----------------------------------------------------------------------------------

    def _pack(self, packer: struct.Struct, value: object) -> None:
        try:
            self.buf += packer.pack(value)
        except struct.error as exc:
            raise ValueError(f"{value!r} does not fit {packer.format}: {exc}") from None

    def write_int8(self, value: int) -> None:
        self._pack(_I8, value)

    def write_int16(self, value: int) -> None:
        self._pack(_I16, value)

    def write_int32(self, value: int) -> None:
        self._pack(_I32, value)

    def write_int64(self, value: int) -> None:
        self._pack(_I64, value)

    def write_uint16(self, value: int) -> None:
        self._pack(_U16, value)

    def write_uint32(self, value: int) -> None:
        self._pack(_U32, value)

    def write_float64(self, value: float) -> None:
        self._pack(_F64, value)

    def write_bool(self, value: bool) -> None:
        self.buf.append(1 if value else 0)

    def write_uuid(self, value: uuid.UUID) -> None:
        if not isinstance(value, uuid.UUID):
            raise ValueError(f"expected a UUID, got {value!r}")
        self.buf += value.bytes

    # Variable-length integers ------------------------------------------------------------------------------

    def write_unsigned_varint(self, value: int) -> None:
        if not 0 <= value <= 0xFFFFFFFF:
            raise ValueError(f"{value} does not fit an unsigned varint")
        self._write_varbits(value)

    def _write_varbits(self, value: int) -> None:
        buf = self.buf
        while value > 0x7F:
            buf.append((value & 0x7F) | 0x80)
            value >>= 7
        buf.append(value)

    def write_varint(self, value: int) -> None:
        if not -(2**31) <= value < 2**31:
            raise ValueError(f"{value} does not fit a varint")
        self._write_varbits(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)

    def write_varlong(self, value: int) -> None:
        if not -(2**63) <= value < 2**63:
            raise ValueError(f"{value} does not fit a varlong")
        self._write_varbits(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)

    # Strings -----------------------------------------------------------------------------------------------

    @staticmethod
    def _utf8(value: str) -> bytes:
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {value!r}")
        data = value.encode("utf-8")
        if len(data) > MAX_STRING_BYTES:
            raise ValueError(f"string of {len(data)} bytes exceeds {MAX_STRING_BYTES}")
        return data

    def write_string(self, value: str) -> None:
        data = self._utf8(value)
        self.buf += _I16.pack(len(data))
        self.buf += data

    def write_nullable_string(self, value: str | None) -> None:
        if value is None:
            self.buf += b"\xff\xff"
        else:
            self.write_string(value)

    def write_compact_string(self, value: str) -> None:
        data = self._utf8(value)
        self._write_varbits(len(data) + 1)
        self.buf += data

    def write_compact_nullable_string(self, value: str | None) -> None:
        if value is None:
            self.buf.append(0)
        else:
            self.write_compact_string(value)

    # Bytes -------------------------------------------------------------------------------------------------

    @staticmethod
    def _byte_count(value: bytes | bytearray | memoryview) -> int:
        if isinstance(value, bytes | bytearray):
            return len(value)
        if isinstance(value, memoryview):
            return value.nbytes
        raise ValueError(f"expected bytes, got {value!r}")

    def write_bytes(self, value: bytes | bytearray | memoryview) -> None:
        size = self._byte_count(value)
        self.buf += _I32.pack(size)
        self._write_value(value, size)

    def write_nullable_bytes(self, value: bytes | bytearray | memoryview | None) -> None:
        if value is None:
            self.buf += b"\xff\xff\xff\xff"
        else:
            self.write_bytes(value)

    def write_compact_bytes(self, value: bytes | bytearray | memoryview) -> None:
        size = self._byte_count(value)
        self.write_unsigned_varint(size + 1)
        self._write_value(value, size)

    def write_compact_nullable_bytes(self, value: bytes | bytearray | memoryview | None) -> None:
        if value is None:
            self.buf.append(0)
        else:
            self.write_compact_bytes(value)

    # Arrays and tagged fields ------------------------------------------------------------------------------

    def write_array_length(self, count: int) -> None:
        """The int32 count; -1 for a null array."""
        self._pack(_I32, count)

    def write_compact_array_length(self, count: int) -> None:
        """The count plus one as an unsigned varint; -1 (null) becomes 0."""
        self.write_unsigned_varint(count + 1)

    def write_tagged_fields(self, fields: dict[int, bytes] | None = None) -> None:
        """A tagged-field section from already-encoded values, in ascending tag order as Kafka requires."""
        if not fields:
            self.buf.append(0)
            return
        self._write_varbits(len(fields))
        for tag in sorted(fields):
            data = fields[tag]
            self.write_unsigned_varint(tag)
            self.write_unsigned_varint(len(data))
            self.buf += data
