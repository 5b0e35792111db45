"""The schema formats the registry takes, by Confluent's ``schemaType`` name, each behind one small interface."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from server.schemas import avro, json_schema, protobuf

__all__ = ["FORMATS", "Format", "ParsedSchema"]

ParsedSchema = Any  # a format's own parsed form


@dataclass(frozen=True, slots=True)
class Format:
    name: str  # AVRO, JSON, PROTOBUF
    # (text, references: reference name → text) → the parsed schema; SchemaError for one that is not valid
    parse: Callable[[str, Mapping[str, str]], ParsedSchema]
    # the same text for the same schema, however it is written (how a schema registered again is known)
    canonical_form: Callable[[str, Mapping[str, str]], str]
    # (reader, writer) → why data written with writer cannot be read with reader
    read_problems: Callable[[ParsedSchema, ParsedSchema], list[str]]
    # the parsed schema in the format's binary form, as ``?format=serialized`` asks (Protobuf's descriptor)
    serialized: Callable[[ParsedSchema], str] | None = None
    # (text, references) → the text kept and answered, when the format keeps another form than the one given
    readable: Callable[[str, Mapping[str, str]], str] | None = None


FORMATS: dict[str, Format] = {
    # Known again by its normalized JSON, not the Parsing Canonical Form: that drops defaults and logical types.
    "AVRO": Format("AVRO", avro.parse, avro.normalized, avro.read_problems),
    "JSON": Format("JSON", json_schema.parse, json_schema.canonical_form, json_schema.read_problems),
    "PROTOBUF": Format(
        "PROTOBUF",
        protobuf.parse,
        protobuf.canonical_form,
        protobuf.read_problems,
        serialized=protobuf.serialized,
        readable=protobuf.readable,
    ),
}
