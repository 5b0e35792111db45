"""A small engine for Kafka's message schemas: field definitions in, per-version codecs out.

A message is a tuple of :class:`Field` as Kafka's JSON message definitions describe it (see ``messages.py``).
:func:`compile_struct` turns one (fields, version, flexible) into a :class:`StructCodec` whose decode and
encode loops only call prebuilt per-field functions: the version checks, nullability, compact-or-not and
defaults are all settled once, when the codec is built, not per message.

Decoded messages are plain dicts keyed by the snake_case field names. Every field of the definition is
present in a decoded dict; one the version does not carry (or a tagged field the peer did not send) holds
its default. On encode a key that is missing is written as its default, and keys the version does not
carry are ignored, so one dict can serve every version. ``records`` fields are returned as views into the
frame, not parsed.

Encoding follows the flexible-version rules: compact strings, bytes and arrays and a tagged-field section
after every struct; a tagged field is written only when its value differs from its default, which is also
how Kafka decides. On decode, tags this version does not know are skipped.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from server.kafka.protocol.primitives import ProtocolError, Reader, Writer

__all__ = [
    "ApiSchema",
    "Field",
    "StructCodec",
    "compile_struct",
    "decode",
    "encode",
    "in_versions",
    "parse_versions",
]

Decoder = Callable[[Reader], Any]
Encoder = Callable[[Writer, Any], None]

# The highest version "N+" reaches: API versions are int16 on the wire.
_MAX_VERSION = 0x7FFF

_EMPTY: Mapping[str, Any] = {}
_MISSING: Any = object()


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a message, as in Kafka's JSON definitions (versions as text: ``"3+"``, ``"0-7"``,
    ``"none"``). ``type`` is a primitive (``int32``, ``string``, ``records``, ...), ``[]`` + a primitive,
    or a struct name (optionally ``[]``-prefixed) whose ``fields`` are given. ``default`` is the JSON's
    default text (``"-1"``, ``"null"``, ``"true"``, ``"0x7fffffff"``)."""

    name: str
    type: str
    versions: str
    nullable_versions: str | None = None
    default: str | None = None
    tag: int | None = None
    tagged_versions: str | None = None
    fields: tuple[Field, ...] = ()


@dataclass(frozen=True, slots=True)
class ApiSchema:
    """One API: the versions served here (within the JSON's validVersions) and both message bodies."""

    api_key: int
    name: str
    versions: tuple[int, int]
    flexible_versions: str
    request: tuple[Field, ...]
    response: tuple[Field, ...]


def parse_versions(text: str) -> tuple[int, int] | None:
    """``"3+"`` -> (3, 32767), ``"0-7"`` -> (0, 7), ``"5"`` -> (5, 5), ``"none"`` -> None."""
    if text == "none":
        return None
    if text.endswith("+"):
        return int(text[:-1]), _MAX_VERSION
    low, sep, high = text.partition("-")
    return (int(low), int(high)) if sep else (int(low), int(low))


def in_versions(text: str | None, version: int) -> bool:
    if text is None:
        return False
    bounds = parse_versions(text)
    return bounds is not None and bounds[0] <= version <= bounds[1]


# Primitive types -----------------------------------------------------------------------------------------

_FIXED: dict[str, tuple[Decoder, Encoder, int]] = {
    "int8": (Reader.read_int8, Writer.write_int8, 1),
    "int16": (Reader.read_int16, Writer.write_int16, 2),
    "int32": (Reader.read_int32, Writer.write_int32, 4),
    "int64": (Reader.read_int64, Writer.write_int64, 8),
    "uint16": (Reader.read_uint16, Writer.write_uint16, 2),
    "uint32": (Reader.read_uint32, Writer.write_uint32, 4),
    "float64": (Reader.read_float64, Writer.write_float64, 8),
    "bool": (Reader.read_bool, Writer.write_bool, 1),
    "uuid": (Reader.read_uuid, Writer.write_uuid, 16),
}

# (type, flexible, nullable) -> codec; the non-compact forms have a fixed-size length prefix.
_VARIABLE: dict[tuple[str, bool, bool], tuple[Decoder, Encoder, int]] = {
    ("string", False, False): (Reader.read_string, Writer.write_string, 2),
    ("string", False, True): (Reader.read_nullable_string, Writer.write_nullable_string, 2),
    ("string", True, False): (Reader.read_compact_string, Writer.write_compact_string, 1),
    ("string", True, True): (Reader.read_compact_nullable_string, Writer.write_compact_nullable_string, 1),
    ("bytes", False, False): (Reader.read_bytes, Writer.write_bytes, 4),
    ("bytes", False, True): (Reader.read_nullable_bytes, Writer.write_nullable_bytes, 4),
    ("bytes", True, False): (Reader.read_compact_bytes, Writer.write_compact_bytes, 1),
    ("bytes", True, True): (Reader.read_compact_nullable_bytes, Writer.write_compact_nullable_bytes, 1),
    ("records", False, True): (Reader.read_nullable_bytes_view, Writer.write_nullable_bytes, 4),
    ("records", True, True): (Reader.read_compact_nullable_bytes_view, Writer.write_compact_nullable_bytes, 1),
}

_ZERO: dict[str, Any] = {
    "int8": 0,
    "int16": 0,
    "int32": 0,
    "int64": 0,
    "uint16": 0,
    "uint32": 0,
    "float64": 0.0,
    "bool": False,
    "uuid": uuid.UUID(int=0),
    "string": "",
    "bytes": b"",
    "records": b"",
}


def _is_array(field: Field) -> bool:
    return field.type.startswith("[]")


def _is_struct(field: Field) -> bool:
    return bool(field.fields)


def _explicit_default(field: Field) -> Any:
    """The JSON default parsed for the field's type (only called when one is given)."""
    text = field.default
    assert text is not None
    if text == "null":
        if field.nullable_versions is None:
            raise ValueError(f"{field.name}: null default on a field that is never nullable")
        return None
    if _is_array(field) or _is_struct(field):
        raise ValueError(f"{field.name}: only null defaults are supported for arrays and structs")
    kind = field.type
    if kind in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return int(text, 0)
    if kind == "float64":
        return float(text)
    if kind == "bool":
        if text not in ("true", "false"):
            raise ValueError(f"{field.name}: bad bool default {text!r}")
        return text == "true"
    if kind == "string":
        return text
    raise ValueError(f"{field.name}: defaults are not supported for type {kind}")


def _default_factory(field: Field) -> Callable[[], Any] | None:
    """A factory for a field whose default is mutable (a list or a struct dict), else None."""
    if field.default is not None or field.nullable_versions is not None:
        return None
    if _is_array(field):
        return list
    if _is_struct(field):
        subfields = field.fields
        return lambda: _default_struct(subfields)
    return None


def _absent_default(field: Field) -> Any:
    """The value a decoded dict holds for a field the version does not carry (or a tag not sent).

    The JSON default if there is one; None for a field that is nullable in some version (so "not sent"
    reads as null); otherwise the type's zero."""
    if field.default is not None:
        return _explicit_default(field)
    if field.nullable_versions is not None:
        return None
    if _is_array(field):
        return []
    if _is_struct(field):
        return _default_struct(field.fields)
    return _ZERO[field.type]


def _default_struct(fields: Sequence[Field]) -> dict[str, Any]:
    return {field.name: _absent_default(field) for field in fields}


def _encode_default(field: Field, nullable: bool) -> Any:
    """The value written for a key missing from the dict at a version where the field is ``nullable`` or
    not; never mutated, so it can be shared. A null default where null cannot be written becomes the zero."""
    if field.default is not None:
        value = _explicit_default(field)
        if value is not None or nullable:
            return value
    elif nullable:
        return None
    if _is_array(field):
        return ()
    if _is_struct(field):
        return _EMPTY
    return _ZERO[field.type]


def _default_test(default: Any) -> Callable[[Any], bool]:
    """Whether a tagged field's value equals its default (then it is not written, as Kafka does)."""
    if isinstance(default, dict):
        # A partial struct counts as its defaults plus what it sets.
        return lambda value: isinstance(value, Mapping) and {**default, **value} == default
    if isinstance(default, list):
        return lambda value: value is not None and len(value) == 0
    if default is None:
        return lambda value: value is None
    return lambda value: bool(value == default)


# Codecs -------------------------------------------------------------------------------------------------


def _array_codec(
    name: str, item: tuple[Decoder, Encoder, int], flexible: bool, nullable: bool
) -> tuple[Decoder, Encoder, int]:
    item_decode, item_encode, item_size = item

    if flexible:

        def decode_array(reader: Reader) -> list[Any] | None:
            count = reader.read_compact_array_length(item_size)
            if count < 0:
                if nullable:
                    return None
                raise ProtocolError(f"{name}: null for a non-nullable array")
            return [item_decode(reader) for _ in range(count)]

        def encode_array(writer: Writer, value: Sequence[Any] | None) -> None:
            if value is None:
                if not nullable:
                    raise ValueError(f"{name}: None for a non-nullable array")
                writer.write_compact_array_length(-1)
                return
            writer.write_compact_array_length(len(value))
            for element in value:
                item_encode(writer, element)

        return decode_array, encode_array, 1

    def decode_legacy_array(reader: Reader) -> list[Any] | None:
        count = reader.read_array_length(item_size)
        if count < 0:
            if nullable:
                return None
            raise ProtocolError(f"{name}: null for a non-nullable array")
        return [item_decode(reader) for _ in range(count)]

    def encode_legacy_array(writer: Writer, value: Sequence[Any] | None) -> None:
        if value is None:
            if not nullable:
                raise ValueError(f"{name}: None for a non-nullable array")
            writer.write_array_length(-1)
            return
        writer.write_array_length(len(value))
        for element in value:
            item_encode(writer, element)

    return decode_legacy_array, encode_legacy_array, 4


def _checked_not_null(name: str, codec: tuple[Decoder, Encoder, int]) -> tuple[Decoder, Encoder, int]:
    """Wraps a nullable codec for a type that has no non-nullable reader of its own (records)."""
    inner_decode, inner_encode, size = codec

    def decode_value(reader: Reader) -> Any:
        value = inner_decode(reader)
        if value is None:
            raise ProtocolError(f"{name}: null for a non-nullable field")
        return value

    def encode_value(writer: Writer, value: Any) -> None:
        if value is None:
            raise ValueError(f"{name}: None for a non-nullable field")
        inner_encode(writer, value)

    return decode_value, encode_value, size


def _field_codec(field: Field, version: int, flexible: bool) -> tuple[Decoder, Encoder, int]:
    """Decoder, encoder and minimum encoded size of one field at one version."""
    nullable = in_versions(field.nullable_versions, version)
    if _is_struct(field):
        if nullable and not _is_array(field):
            raise ValueError(f"{field.name}: nullable structs are not supported")
        struct_codec = StructCodec(field.fields, version, flexible)
        item = (struct_codec.decode, struct_codec.encode, struct_codec.min_size)
        return _array_codec(field.name, item, flexible, nullable) if _is_array(field) else item
    if _is_array(field):
        return _array_codec(field.name, _primitive_codec(field.type[2:], flexible, False), flexible, nullable)
    if field.type == "records" and not nullable:
        return _checked_not_null(field.name, _primitive_codec("records", flexible, True))
    return _primitive_codec(field.type, flexible, nullable)


def _primitive_codec(kind: str, flexible: bool, nullable: bool) -> tuple[Decoder, Encoder, int]:
    fixed = _FIXED.get(kind)
    if fixed is not None:
        return fixed
    variable = _VARIABLE.get((kind, flexible, nullable))
    if variable is None:
        raise ValueError(f"unsupported field type {kind!r} (nullable={nullable})")
    return variable


class StructCodec:
    """The compiled plan of one struct at one version: decode bytes to a dict, encode a mapping."""

    __slots__ = (
        "_decoders",
        "_encoders",
        "_factories",
        "_flexible",
        "_tag_decoders",
        "_tag_encoders",
        "_template",
        "min_size",
    )

    def __init__(self, fields: Sequence[Field], version: int, flexible: bool) -> None:
        decoders: list[tuple[str, Decoder]] = []
        encoders: list[tuple[str, Any, Encoder]] = []
        template: dict[str, Any] = {}
        factories: list[tuple[str, Callable[[], Any]]] = []
        tag_decoders: dict[int, tuple[str, Decoder]] = {}
        tag_encoders: list[tuple[int, str, Callable[[Any], bool], Encoder]] = []
        min_size = 1 if flexible else 0  # the tagged-field count
        for field in fields:
            if field.tag is not None and field.tagged_versions != field.versions:
                raise ValueError(f"{field.name}: a field tagged in only some of its versions is not supported")
            present = in_versions(field.versions, version)
            tagged = present and field.tag is not None
            if tagged and not flexible:
                raise ValueError(f"{field.name}: tagged field in a non-flexible version {version}")
            # Every key goes into the template, in definition order (a decoded field then overwrites its
            # slot); absent fields and tags the peer may leave out keep their default.
            template[field.name] = None
            if tagged or not present:
                factory = _default_factory(field)
                if factory is None:
                    template[field.name] = _absent_default(field)
                else:
                    factories.append((field.name, factory))
            if not present:
                continue
            decode_field, encode_field, size = _field_codec(field, version, flexible)
            if tagged:
                assert field.tag is not None
                tag_decoders[field.tag] = (field.name, decode_field)
                tag_encoders.append((field.tag, field.name, _default_test(_absent_default(field)), encode_field))
            else:
                decoders.append((field.name, decode_field))
                nullable = in_versions(field.nullable_versions, version)
                encoders.append((field.name, _encode_default(field, nullable), encode_field))
                min_size += size
        self._decoders = tuple(decoders)
        self._encoders = tuple(encoders)
        self._template = template
        self._factories = tuple(factories)
        self._flexible = flexible
        self._tag_decoders = tag_decoders
        self._tag_encoders = tuple(sorted(tag_encoders, key=lambda entry: entry[0]))
        self.min_size = min_size

    def decode(self, reader: Reader) -> dict[str, Any]:
        out = self._template.copy()
        for name, factory in self._factories:
            out[name] = factory()
        for name, decode_field in self._decoders:
            out[name] = decode_field(reader)
        if self._flexible:
            self._decode_tags(reader, out)
        return out

    def _decode_tags(self, reader: Reader, out: dict[str, Any]) -> None:
        pos = reader.pos
        if pos < reader.end and reader.buf[pos] == 0:
            # The usual empty section.
            reader.pos = pos + 1
            return
        count = reader.read_unsigned_varint()
        known = self._tag_decoders
        for _ in range(count):
            tag = reader.read_unsigned_varint()
            size = reader.read_unsigned_varint()
            entry = known.get(tag)
            if entry is None:
                reader.skip(size)
                continue
            start = reader.pos
            if size > reader.end - start:
                raise ProtocolError(f"tagged field {tag} of {size} bytes overruns the frame")
            # Confine the value to its declared size, then continue after it whatever the value used.
            outer_end = reader.end
            reader.end = start + size
            try:
                out[entry[0]] = entry[1](reader)
            finally:
                reader.end = outer_end
            reader.pos = start + size

    def encode(self, writer: Writer, value: Mapping[str, Any]) -> None:
        try:
            get = value.get
        except AttributeError:
            raise ValueError(f"expected a mapping for a struct, got {value!r}") from None
        for name, default, encode_field in self._encoders:
            encode_field(writer, get(name, default))
        if self._flexible:
            if self._tag_encoders:
                self._encode_tags(writer, value)
            else:
                writer.buf.append(0)

    def _encode_tags(self, writer: Writer, value: Mapping[str, Any]) -> None:
        encoded: dict[int, bytes] = {}
        for tag, name, is_default, encode_field in self._tag_encoders:
            field_value = value.get(name, _MISSING)
            if field_value is _MISSING or is_default(field_value):
                continue
            part = Writer()
            encode_field(part, field_value)
            encoded[tag] = part.getvalue()
        writer.write_tagged_fields(encoded)


# Built plans by the identity of their field tuple; the tuple is kept alive with the plan so its id
# cannot be reused by another tuple.
_PLANS: dict[tuple[int, int, bool], tuple[Sequence[Field], StructCodec]] = {}


def compile_struct(fields: Sequence[Field], version: int, flexible: bool) -> StructCodec:
    """The (cached) codec of ``fields`` at ``version``."""
    key = (id(fields), version, flexible)
    cached = _PLANS.get(key)
    if cached is not None and cached[0] is fields:
        return cached[1]
    codec = StructCodec(fields, version, flexible)
    _PLANS[key] = (fields, codec)
    return codec


def decode(
    fields: Sequence[Field], version: int, flexible: bool, data: bytes | bytearray | memoryview
) -> dict[str, Any]:
    """Decodes a whole struct; bytes left over after it are an error."""
    reader = Reader(data)
    value = compile_struct(fields, version, flexible).decode(reader)
    if reader.pos != reader.end:
        raise ProtocolError(f"{reader.end - reader.pos} trailing bytes")
    return value


def encode(fields: Sequence[Field], version: int, flexible: bool, value: Mapping[str, Any]) -> bytes:
    writer = Writer()
    compile_struct(fields, version, flexible).encode(writer, value)
    return writer.getvalue()
