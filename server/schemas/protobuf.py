"""Protobuf schemas for the schema registry: parsing (.proto text, or the base64 ``FileDescriptorProto`` that
confluent-kafka's ProtobufSerializer registers) into a ``FileDescriptorProto``, a canonical text, and whether data
written with one schema can be read with another (which the compatibility levels use).

Pure: no I/O. The parser follows the protobuf language guides (proto2, proto3) and builds what protoc would:
names fully qualified with a leading dot, a ``<Name>Entry`` nested type for each map field, a synthetic oneof for
each proto3 ``optional`` field. Custom (parenthesised) options are parsed and dropped; groups, editions and
custom option values inside descriptors are not rendered. The result is checked by building it in a protobuf
``DescriptorPool``.

The rules are Confluent Schema Registry's (its ``protobuf/diff`` package: a change not in
``SchemaDiff.COMPATIBLE_CHANGES`` is a problem), read with the writer's schema as the original and the reader's as
the update, so BACKWARD (``read_problems(new, old)``) and FORWARD (``read_problems(old, new)``) are Confluent's:
- the package may not change; each of the writer's messages (matched by name, top-level and nested) must be in
  the reader: removing a message fails BACKWARD, adding one fails FORWARD. Enums and enum values may come and go;
- which message comes first, and the order of messages, are not checked, as Confluent: a record's message
  indexes refer to the writer's schema (by its id), and confluent-kafka's deserializer reads them against that
  schema or its own generated class, not against the latest version;
- fields are matched by number: adding, removing and renaming them is fine, unless they are required (proto2);
- a field keeps its kind (scalar or enum, message, map); scalars stay in a wire-compatible group: int32, uint32,
  int64, uint64, bool and enums; sint32, sint64; fixed32, sfixed32; fixed64, sfixed64; string, bytes; float;
  double. A numeric field may not change between singular and repeated (string, bytes and message fields may);
- a message-typed field keeps its type's name (without the package), and that type is compared in turn (so are
  types from imports); map fields compare their keys and values;
- one field may move into a new oneof, not several, nor one into a oneof that had other fields; a field may not
  leave a oneof both schemas have (so removing one fails BACKWARD, adding one FORWARD).
Beyond Confluent: a field the reader requires but the writer may leave out is a problem, and a proto3 field
without a label changing to repeated counts as a label change (Confluent sees no label on it).
"""

from __future__ import annotations

import base64
import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# No stubs ship with protobuf (types-protobuf is not installed): its messages are typed as Any here.
from google.protobuf import descriptor_pb2, descriptor_pool  # type: ignore[import-untyped,unused-ignore]

from server.schemas.errors import SchemaError

__all__ = [
    "ProtobufSchema",
    "SchemaError",
    "canonical_form",
    "parse",
    "read_problems",
    "readable",
    "serialized",
    "text_of",
]

# Imported so that the default pool holds the well-known google/protobuf/*.proto files an import may name.
for _name in ("any", "api", "duration", "empty", "field_mask", "source_context", "struct", "timestamp", "type"):
    importlib.import_module(f"google.protobuf.{_name}_pb2")
importlib.import_module("google.protobuf.wrappers_pb2")

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS: dict[str, int] = {
    name.removeprefix("TYPE_").lower(): number
    for name, number in _F.Type.items()
    if name not in ("TYPE_GROUP", "TYPE_MESSAGE", "TYPE_ENUM")
}
_SCALAR_NAMES = {number: name for name, number in _SCALARS.items()}
_MAP_KEYS = {"int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64", "sfixed32", "sfixed64"}
_MAP_KEYS |= {"bool", "string"}
# Scalars that read each other's wire data (the language guide's "Updating a message type"); enums are varints.
_WIRE_GROUPS = {"varint": "int32 uint32 int64 uint64 bool enum", "zigzag": "sint32 sint64", "float": "float"}
_WIRE_GROUPS |= {"fixed32": "fixed32 sfixed32", "fixed64": "fixed64 sfixed64", "double": "double"}
_WIRE_GROUPS |= {"string or bytes": "string bytes"}
_GROUPS = {name: group for group, names in _WIRE_GROUPS.items() for name in names.split()}
_LABELS = {_F.LABEL_OPTIONAL: "optional", _F.LABEL_REQUIRED: "required", _F.LABEL_REPEATED: "repeated"}
_MAX_FIELD = 536_870_911
_MAX_ENUM = 2_147_483_647


@dataclass(eq=False)
class ProtobufSchema:
    """One parsed .proto file: its ``descriptor`` (a ``FileDescriptorProto``) and those of the files it imports
    (``dependencies``, by import path, dependencies first), with every type they define by full name."""

    descriptor: Any  # descriptor_pb2.FileDescriptorProto
    dependencies: dict[str, Any] = field(default_factory=dict)
    types: dict[str, tuple[str, Any]] = field(default_factory=dict, repr=False)  # ".pkg.Name": (package, proto)


def parse(text: str, references: Mapping[str, str] | None = None) -> ProtobufSchema:
    """The schema ``text`` (.proto source, or a base64 ``FileDescriptorProto``) describes; :class:`SchemaError`
    saying what is wrong. ``references``: by import path, the text (either form) of each file it may import."""
    loader = _Loader(references or {})
    descriptor = loader.build(text, "schema.proto")
    deps = {path: loader.files[path] for path in loader.order}
    pool = descriptor_pool.DescriptorPool()
    try:  # the runtime's own checks, for whatever the parser does not check itself
        for proto in [*deps.values(), descriptor]:
            pool.Add(proto)
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"not a valid protobuf schema: {exc}") from None
    types: dict[str, tuple[str, Any]] = {}
    for proto in [*deps.values(), descriptor]:
        _collect(proto.package, "." + proto.package if proto.package else "", proto.message_type, proto, types)
    return ProtobufSchema(descriptor, deps, types)


def _collect(package: str, scope: str, messages: Any, holder: Any, types: dict[str, tuple[str, Any]]) -> None:
    for enum in holder.enum_type:
        types[f"{scope}.{enum.name}"] = (package, enum)
    for message in messages:
        types[f"{scope}.{message.name}"] = (package, message)
        _collect(package, f"{scope}.{message.name}", message.nested_type, message, types)


def canonical_form(text: str, references: Mapping[str, str] | None = None) -> str:
    """The .proto text rendered from the schema's descriptor: the same for the same schema, whether given as text
    or as a base64 descriptor, whatever its comments and white space."""
    return text_of(parse(text, references))


def readable(text: str, references: Mapping[str, str] | None = None) -> str:
    """The schema as the registry keeps and answers it: .proto text as given, a base64 descriptor (what
    Confluent's serializers register) rendered as .proto text, as Confluent answers it."""
    return text if _descriptor_bytes(text) is None else text_of(parse(text, references))


def serialized(schema: ProtobufSchema) -> str:
    """The base64 of the schema's ``FileDescriptorProto`` (what Confluent answers for ``format=serialized``)."""
    return base64.b64encode(schema.descriptor.SerializeToString(deterministic=True)).decode("ascii")


class _Loader:
    """Builds files and, first, the files they import, from the references or the well-known types."""

    def __init__(self, references: Mapping[str, str]) -> None:
        self.references = references
        self.files: dict[str, Any] = {}
        self.order: list[str] = []  # dependencies before the files importing them
        self.loading: set[str] = set()

    def build(self, text: str, name: str) -> Any:
        data = _descriptor_bytes(text)
        if data is None:
            return _TextParser(text, name, self).parse()
        proto = descriptor_pb2.FileDescriptorProto()
        proto.ParseFromString(data)
        if proto.syntax not in ("", "proto2", "proto3"):
            raise SchemaError(f"syntax {proto.syntax!r} is not supported (proto2 and proto3 are)")
        for path in proto.dependency:
            self.load(path)
        proto.ClearField("source_code_info")  # comments and positions: not the schema
        for message in _all_messages(proto.message_type):
            for f in message.field:
                if f.json_name == _json_name(f.name):  # protoc fills it for plugins; the default says the same
                    f.ClearField("json_name")
        return proto

    def load(self, path: str) -> Any:
        if path in self.files:
            return self.files[path]
        if path in self.loading:
            raise SchemaError(f"import {path!r} imports itself")
        self.loading.add(path)
        if path in self.references:
            try:
                proto = self.build(self.references[path], path)
            except SchemaError as exc:
                raise SchemaError(f"reference {path}: {exc}") from None
            proto.name = path
        else:
            try:
                found = descriptor_pool.Default().FindFileByName(path)
            except KeyError:
                raise SchemaError(f"import {path!r}: not among the references, nor a well-known type") from None
            proto = descriptor_pb2.FileDescriptorProto()
            found.CopyToProto(proto)
            for dependency in proto.dependency:
                self.load(dependency)
        self.loading.discard(path)
        self.files[path] = proto
        self.order.append(path)
        return proto

    def visible(self, path: str) -> list[Any]:
        """The file at ``path`` and, through its public imports, the files it shows to an importer."""
        proto = self.files[path]
        found = [proto]
        for index in proto.public_dependency:
            found += self.visible(proto.dependency[index])
        return found


def _descriptor_bytes(text: str) -> bytes | None:
    """The bytes of a base64 descriptor (line breaks allowed), or None for .proto text, which always holds a
    character base64 lacks (``;``, ``{``, ``"``) unless it is comments only, which do not decode to a descriptor."""
    compact = "".join(text.split())
    if not compact or not re.fullmatch(r"[A-Za-z0-9+/]+={0,2}", compact):
        return None
    try:
        data = base64.b64decode(compact, validate=True)
        descriptor_pb2.FileDescriptorProto().ParseFromString(data)
    except Exception:  # binascii.Error, or protobuf's DecodeError (not exported by type)
        return None
    return data


def _all_messages(messages: Any) -> list[Any]:
    found = []
    for message in messages:
        found += [message, *_all_messages(message.nested_type)]
    return found


def _json_name(name: str) -> str:
    parts = name.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


# ---------------------------------------------------------------------------------------------------- the parser

_TOKEN = re.compile(
    r"""(?P<space>[ \t\r\f\v]+)|(?P<newline>\n)|(?P<comment>//[^\n]*|/\*.*?\*/)
    |(?P<float>(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)|(?P<int>0[xX][0-9a-fA-F]+|\d+)
    |(?P<ident>[A-Za-z_]\w*)|(?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')|(?P<symbol>[=;{}\[\]()<>,.+\-:])""",
    re.X | re.S,
)
_ESCAPES = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92, "'": 39, '"': 34, "?": 63}


@dataclass
class _Token:
    kind: str
    text: str
    line: int


def _tokenize(text: str) -> list[_Token]:
    tokens, line, at = [], 1, 0
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None:
            raise SchemaError(f"line {line}: unexpected {text[at : at + 10]!r}")
        kind = match.lastgroup or ""
        if kind not in ("space", "newline", "comment"):
            tokens.append(_Token(kind, match.group(), line))
        line += match.group().count("\n")
        at = match.end()
    tokens.append(_Token("end", "end of text", line))
    return tokens


def _unescape(quoted: str, line: int) -> bytes:
    body, out, i = quoted[1:-1], bytearray(), 0
    while i < len(body):
        char = body[i]
        if char != "\\":
            out += char.encode()
            i += 1
            continue
        escape = body[i + 1]
        if escape in _ESCAPES:
            out.append(_ESCAPES[escape])
            i += 2
        elif escape in "xX" and (hexa := re.match(r"[0-9a-fA-F]{1,2}", body[i + 2 :])):
            out.append(int(hexa.group(), 16))
            i += 2 + hexa.end()
        elif octal := re.match(r"[0-7]{1,3}", body[i + 1 :]):
            out.append(int(octal.group(), 8) & 0xFF)
            i += 1 + octal.end()
        elif escape in "uU" and (
            code := re.match(r"[0-9a-fA-F]{4}" if escape == "u" else r"[0-9a-fA-F]{8}", body[i + 2 :])
        ):
            out += chr(int(code.group(), 16)).encode()
            i += 2 + code.end()
        else:
            raise SchemaError(f"line {line}: unknown escape \\{escape} in a string")
    return bytes(out)


def _c_escape(data: bytes) -> str:
    """As protoc stores a bytes field's default: printable ASCII as itself, the rest escaped."""
    special = {10: "\\n", 13: "\\r", 9: "\\t", 34: '\\"', 39: "\\'", 92: "\\\\"}
    return "".join(special.get(b) or (chr(b) if 32 <= b < 127 else f"\\{b:03o}") for b in data)


class _TextParser:
    def __init__(self, text: str, name: str, loader: _Loader) -> None:
        self.tokens = _tokenize(text)
        self.at = 0
        self.loader = loader
        self.file = descriptor_pb2.FileDescriptorProto(name=name)
        self.defined: dict[str, str] = {}  # ".pkg.Name": "message" or "enum"
        # Type names resolved once the whole file and its imports are known: (line, scope, name, setter).
        self.pending: list[tuple[int, str, str, Callable[[str, str], None]]] = []

    # tokens
    def peek(self, offset: int = 0) -> _Token:
        return self.tokens[min(self.at + offset, len(self.tokens) - 1)]

    def next(self) -> _Token:
        token = self.peek()
        self.at = min(self.at + 1, len(self.tokens) - 1)
        return token

    def fail(self, message: str, token: _Token | None = None) -> SchemaError:
        return SchemaError(f"line {(token or self.peek()).line}: {message}")

    def accept(self, text: str) -> bool:
        if self.peek().text == text and self.peek().kind in ("symbol", "ident"):
            self.at += 1
            return True
        return False

    def expect(self, text: str) -> None:
        if not self.accept(text):
            raise self.fail(f"expected {text!r}, found {self.peek().text!r}")

    def name(self) -> str:
        token = self.next()
        if token.kind != "ident":
            raise self.fail(f"expected a name, found {token.text!r}", token)
        return token.text

    def dotted(self) -> str:
        parts = ["." if self.accept(".") else ""]
        parts.append(self.name())
        while self.accept("."):
            parts += [".", self.name()]
        return "".join(parts)

    def string(self) -> bytes:
        token = self.next()
        if token.kind != "string":
            raise self.fail(f"expected a string, found {token.text!r}", token)
        value = _unescape(token.text, token.line)
        while self.peek().kind == "string":  # adjacent strings are one
            value += _unescape(self.next().text, token.line)
        return value

    def text_string(self) -> str:
        line = self.peek().line
        try:
            return self.string().decode()
        except UnicodeDecodeError:
            raise SchemaError(f"line {line}: a string is not UTF-8") from None

    def integer(self, signed: bool = True) -> int:
        negative = signed and self.accept("-")
        token = self.next()
        if token.kind != "int":
            raise self.fail(f"expected a whole number, found {token.text!r}", token)
        try:  # 0x1F is hexadecimal, 017 octal
            value = int(token.text, 16 if token.text[:2].lower() == "0x" else 8 if token.text[0] == "0" else 10)
        except ValueError:
            raise self.fail(f"{token.text} is not a number", token) from None
        return -value if negative else value

    def constant(self) -> tuple[str, Any]:
        """An option's value: ("ident", name), ("int", n), ("float", x), ("string", bytes), or ("aggregate", None)."""
        if self.peek().text == "{":
            depth = 0
            while True:
                token = self.next()
                depth += {"{": 1, "}": -1}.get(token.text, 0) if token.kind == "symbol" else 0
                if token.kind == "end":
                    raise self.fail("unterminated { in an option", token)
                if depth == 0:
                    return ("aggregate", None)
        if self.peek().kind == "string":
            return ("string", self.string())
        sign = -1 if self.accept("-") else 1
        token = self.next()
        if token.kind == "int":
            self.at -= 1
            return ("int", sign * self.integer(signed=False))
        if token.kind == "float" or (token.kind == "ident" and token.text in ("inf", "nan")):
            return ("float", sign * float(token.text))
        if token.kind == "ident" and sign == 1:
            return ("ident", token.text)
        raise self.fail(f"expected a value, found {token.text!r}", token)

    # the file
    def parse(self) -> Any:
        if self.accept("syntax"):
            self.expect("=")
            syntax = self.text_string()
            if syntax not in ("proto2", "proto3"):
                raise self.fail(f"syntax {syntax!r} is not supported (proto2 and proto3 are)")
            self.expect(";")
            if syntax == "proto3":
                self.file.syntax = syntax
        elif self.peek().text == "edition":
            raise self.fail("editions are not supported (proto2 and proto3 are)")
        while self.peek().kind != "end":
            token = self.peek()
            if self.accept(";"):
                continue
            if self.accept("package"):
                if self.file.HasField("package") or self.defined:
                    raise self.fail("one package, before any definition", token)
                self.file.package = self.dotted().lstrip(".")
                self.expect(";")
            elif self.accept("import"):
                kind = self.next().text if self.peek().text in ("public", "weak") else ""
                path = self.text_string()
                if kind:
                    getattr(self.file, f"{kind}_dependency").append(len(self.file.dependency))
                self.file.dependency.append(path)
                self.expect(";")
            elif self.accept("option"):
                self.option(self.file.options)
            elif self.accept("message"):
                self.message(self.file.message_type.add(), self.scope())
            elif self.accept("enum"):
                self.enum(self.file.enum_type.add(), self.scope())
            elif self.accept("service"):
                self.service()
            elif self.accept("extend"):
                self.extend(self.file, self.scope())
            else:
                raise self.fail(f"expected a definition, found {token.text!r}")
        for path in self.file.dependency:
            try:
                self.loader.load(path)
            except SchemaError as exc:
                raise SchemaError(f"import {path!r}: {exc}") from None
        self.resolve()
        return self.file

    def scope(self) -> str:
        return "." + self.file.package if self.file.package else ""

    def define(self, full: str, kind: str, token: _Token) -> None:
        if full in self.defined:
            raise self.fail(f"{full[1:]} is defined twice", token)
        self.defined[full] = kind

    def option(self, options: Any, statement: bool = True, target: Any = None) -> None:
        """``option name = value;`` (``statement``), or ``name = value`` within a field's or value's [...]; a
        field's ``default`` and ``json_name`` go to ``target``, the field."""
        token = self.peek()
        custom = self.accept("(")
        name = self.dotted()
        if custom:
            self.expect(")")
            while self.accept("."):
                self.dotted()
        self.expect("=")
        kind, value = self.constant()
        if statement:
            self.expect(";")
        if custom:
            return  # a custom option needs its extension to be encoded: dropped
        if target is not None and name in ("default", "json_name"):
            self.field_default(target, name, kind, value, token)
            return
        descriptor = options.DESCRIPTOR.fields_by_name.get(name)
        if descriptor is None or descriptor.is_repeated or descriptor.cpp_type == descriptor.CPPTYPE_MESSAGE:
            raise self.fail(f"unknown option {name!r}", token)
        try:
            if descriptor.cpp_type == descriptor.CPPTYPE_BOOL:
                if value not in ("true", "false"):
                    raise ValueError("expected true or false")
                value = value == "true"
            elif descriptor.cpp_type == descriptor.CPPTYPE_ENUM:
                value = descriptor.enum_type.values_by_name[value].number
            elif descriptor.cpp_type == descriptor.CPPTYPE_STRING:
                value = value if descriptor.type == descriptor.TYPE_BYTES else value.decode()
            setattr(options, name, value)
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            raise self.fail(f"option {name}: bad value {value!r} ({exc})", token) from None

    def options_list(self, options: Any, target: Any = None) -> None:
        if self.accept("["):
            while True:
                self.option(options, statement=False, target=target)
                if not self.accept(","):
                    break
            self.expect("]")

    def field_default(self, target: Any, name: str, kind: str, value: Any, token: _Token) -> None:
        if name == "json_name":
            if kind != "string":
                raise self.fail("json_name must be a string", token)
            target.json_name = value.decode()
            return
        if self.file.syntax == "proto3":
            raise self.fail("proto3 fields have no explicit default", token)
        scalar = _SCALAR_NAMES.get(target.type) if target.HasField("type") else None
        if scalar in ("string", "bytes") and kind == "string":
            target.default_value = value.decode() if scalar == "string" else _c_escape(value)
        elif scalar == "bool" and value in ("true", "false"):
            target.default_value = value
        elif scalar in ("float", "double") and kind in ("int", "float"):
            target.default_value = str(value) if kind == "int" else repr(value)
        elif scalar and kind == "int" and scalar not in ("string", "bytes", "bool"):
            target.default_value = str(value)
        elif scalar is None and kind == "ident":
            target.default_value = value  # an enum value, checked by the descriptor pool
        else:
            raise self.fail(f"default {value!r} does not fit the field's type", token)

    def body(self, block: Callable[[_Token], None]) -> None:
        self.expect("{")
        while not self.accept("}"):
            token = self.peek()
            if token.kind == "end":
                raise self.fail("expected '}' before the end")
            if not self.accept(";"):
                block(token)

    def message(self, message: Any, scope: str) -> None:
        token = self.peek()
        message.name = self.name()
        full = f"{scope}.{message.name}"
        self.define(full, "message", token)
        lines: dict[int, int] = {}  # field number: the line that declared it

        def statement(token: _Token) -> None:
            if self.accept("message"):
                self.message(message.nested_type.add(), full)
            elif self.accept("enum"):
                self.enum(message.enum_type.add(), full)
            elif self.accept("extend"):
                self.extend(message, full)
            elif self.accept("option"):
                self.option(message.options)
            elif self.accept("reserved"):
                self.reserved(message, _MAX_FIELD, 1)
            elif self.accept("extensions"):
                self.reserved(message, _MAX_FIELD, 1, extensions=True)
            elif self.accept("oneof"):
                index = len(message.oneof_decl)
                oneof = message.oneof_decl.add(name=self.name())
                self.body(
                    lambda t: (
                        self.option(oneof.options) if self.accept("option") else self.field(message, full, lines, index)
                    )
                )
            else:
                self.field(message, full, lines, None)

        self.body(statement)
        for f in message.field:  # protoc's synthetic oneofs for proto3 optional fields, after the real ones
            if f.proto3_optional:
                taken = {o.name for o in message.oneof_decl} | {g.name for g in message.field}
                name = "_" + f.name
                while name in taken:
                    name = "X" + name
                f.oneof_index = len(message.oneof_decl)
                message.oneof_decl.add(name=name)
        reserved_names = set(message.reserved_name)
        for f in message.field:
            where = f"line {lines[f.number]}: {full[1:]}.{f.name} = {f.number}"
            if any(r.start <= f.number < r.end for r in message.reserved_range) or f.name in reserved_names:
                raise SchemaError(f"{where}: its number or name is reserved")
            if any(r.start <= f.number < r.end for r in message.extension_range):
                raise SchemaError(f"{where}: its number is in an extensions range")

    def field(self, message: Any, scope: str, lines: dict[int, int], oneof: int | None, extendee: str = "") -> None:
        token = self.peek()
        f = (message.extension if extendee else message.field).add()
        label = self.next().text if self.peek().text in ("optional", "required", "repeated") else ""
        if self.peek().text == "group":
            raise self.fail("groups are not supported")
        proto3 = self.file.syntax == "proto3"
        if label and oneof is not None:
            raise self.fail(f"a oneof field has no label ({label})", token)
        if label == "required" and proto3:
            raise self.fail("proto3 has no required fields", token)
        if not label and not proto3 and oneof is None and self.peek().text != "map":
            raise self.fail("a proto2 field needs a label: optional, required or repeated", token)
        f.label = {"required": _F.LABEL_REQUIRED, "repeated": _F.LABEL_REPEATED}.get(label, _F.LABEL_OPTIONAL)
        if proto3 and label == "optional":
            f.proto3_optional = True
        if self.accept("map"):
            if label or oneof is not None or extendee:
                raise self.fail("a map field has no label and is in no oneof nor extension", token)
            self.expect("<")
            key = self.dotted()
            if key not in _MAP_KEYS:
                raise self.fail(f"a map's key must be an integer, bool or string type, not {key}", token)
            self.expect(",")
            value = self.dotted()
            self.expect(">")
            f.name = self.name()
            entry = message.nested_type.add(name=_map_entry_name(f.name))
            entry.options.map_entry = True
            self.define(f"{scope}.{entry.name}", "message", token)
            for number, (name, kind) in enumerate((("key", key), ("value", value)), 1):
                part = entry.field.add(name=name, number=number, label=_F.LABEL_OPTIONAL)
                self.type(part, kind, f"{scope}.{entry.name}", token)
            f.label, f.type, f.type_name = _F.LABEL_REPEATED, _F.TYPE_MESSAGE, f"{scope}.{entry.name}"
        else:
            self.type(f, self.dotted(), scope, token)
            f.name = self.name()
        self.expect("=")
        f.number = self.integer(signed=False)
        if not 1 <= f.number <= _MAX_FIELD or 19000 <= f.number <= 19999:
            raise self.fail(f"field {f.name}: number {f.number} is out of range (or reserved for protobuf)", token)
        if not extendee:
            if f.number in lines:
                raise self.fail(f"field {f.name}: number {f.number} is already used, line {lines[f.number]}", token)
            if sum(g.name == f.name for g in message.field) > 1:
                raise self.fail(f"field {f.name} is declared twice", token)
            lines[f.number] = token.line
        if oneof is not None:
            f.oneof_index = oneof
        if extendee:
            self.pending.append((token.line, scope, extendee, lambda full, kind: setattr(f, "extendee", full)))
        self.options_list(f.options, f)
        if not f.options.ListFields():
            f.ClearField("options")
        self.expect(";")

    def type(self, f: Any, name: str, scope: str, token: _Token) -> None:
        if name in _SCALARS:
            f.type = _SCALARS[name]
            return

        def resolved(full: str, kind: str) -> None:
            f.type, f.type_name = (_F.TYPE_ENUM if kind == "enum" else _F.TYPE_MESSAGE), full

        self.pending.append((token.line, scope, name, resolved))

    def enum(self, enum: Any, scope: str) -> None:
        token = self.peek()
        enum.name = self.name()
        self.define(f"{scope}.{enum.name}", "enum", token)

        def statement(token: _Token) -> None:
            if self.accept("option"):
                self.option(enum.options)
            elif self.accept("reserved"):
                self.reserved(enum, _MAX_ENUM, 0)
            else:
                value = enum.value.add(name=self.name())
                self.define(f"{scope}.{value.name}", "value", token)  # values are siblings of their enum
                self.expect("=")
                value.number = self.integer()
                self.options_list(value.options)
                if not value.options.ListFields():
                    value.ClearField("options")
                self.expect(";")

        self.body(statement)
        if not enum.value:
            raise self.fail(f"enum {enum.name} has no values", token)
        if self.file.syntax == "proto3" and enum.value[0].number != 0:
            raise self.fail(f"enum {enum.name}: a proto3 enum's first value must be 0", token)
        numbers = [v.number for v in enum.value]
        if len(set(numbers)) < len(numbers) and not enum.options.allow_alias:
            raise self.fail(f"enum {enum.name}: values share a number (option allow_alias = true allows it)", token)

    def reserved(self, holder: Any, maximum: int, end_offset: int, extensions: bool = False) -> None:
        """``reserved`` or ``extensions`` ranges (a message's end is exclusive, an enum's inclusive) or names."""
        if self.peek().kind == "string":
            while True:
                holder.reserved_name.append(self.text_string())
                if not self.accept(","):
                    break
        else:
            while True:
                start = self.integer()
                end = start
                if self.accept("to"):
                    end = maximum if self.accept("max") else self.integer()
                if end < start:
                    raise self.fail(f"range {start} to {end} is empty")
                ranges = holder.extension_range if extensions else holder.reserved_range
                ranges.add(start=start, end=end + end_offset)
                if not self.accept(","):
                    break
            if extensions and self.accept("["):  # extension range options: parsed and dropped
                while self.peek().text != "]" and self.peek().kind != "end":
                    self.next()
                self.expect("]")
        self.expect(";")

    def extend(self, holder: Any, scope: str) -> None:
        """``extend Name { fields }``: the fields go to ``holder.extension`` (a file's or a message's)."""
        extendee = self.dotted()
        self.body(lambda t: self.field(holder, scope, {}, None, extendee))

    def service(self) -> None:
        service = self.file.service.add(name=self.name())
        self.define(f"{self.scope()}.{service.name}", "service", self.peek())

        def statement(token: _Token) -> None:
            if self.accept("option"):
                self.option(service.options)
                return
            self.expect("rpc")
            method = service.method.add(name=self.name())
            for side in ("input", "output"):
                if side == "output":
                    self.expect("returns")
                self.expect("(")
                if self.peek().text == "stream" and self.peek(1).text != ")":  # else a type named stream
                    self.next()
                    setattr(method, f"{'client' if side == 'input' else 'server'}_streaming", True)
                name = self.dotted()
                self.expect(")")
                self.pending.append((token.line, self.scope(), name, _setter(method, f"{side}_type")))
            if self.peek().text == "{":
                self.body(lambda t: self.option(method.options) if self.accept("option") else self.expect("option"))
            else:
                self.expect(";")

        self.body(statement)

    def resolve(self) -> None:
        visible = dict(self.defined)
        for path in self.file.dependency:
            for proto in self.loader.visible(path):
                types: dict[str, tuple[str, Any]] = {}
                _collect(proto.package, "." + proto.package if proto.package else "", proto.message_type, proto, types)
                visible |= {name: "enum" if _is_enum(t) else "message" for name, (_, t) in types.items()}
        for line, scope, name, setter in self.pending:
            # Innermost scope first, as protoc (which, unlike this, also stops at a shadowing name's first part).
            parts = scope.split(".")
            candidates = (
                [name] if name.startswith(".") else [".".join([*parts[:i], name]) for i in range(len(parts), 0, -1)]
            )
            full = next((c for c in candidates if visible.get(c) in ("message", "enum")), None)
            if full is None:
                raise SchemaError(f"line {line}: unknown type {name!r} (not defined here nor in an import)")
            setter(full, visible[full])


def _is_enum(proto: Any) -> bool:
    return bool(proto.DESCRIPTOR.name == "EnumDescriptorProto")


def _setter(target: Any, attribute: str) -> Callable[[str, str], None]:
    return lambda full, kind: setattr(target, attribute, full)


def _map_entry_name(field_name: str) -> str:
    parts = field_name.split("_")
    return "".join(p[:1].upper() + p[1:] for p in parts) + "Entry"


# -------------------------------------------------------------------------------------------------- the renderer


def text_of(schema: ProtobufSchema) -> str:
    """.proto source rendered from the schema's descriptor: type names fully qualified (with a leading dot),
    definitions in the descriptor's order, standard options only."""
    proto = schema.descriptor
    out = [f'syntax = "{proto.syntax or "proto2"}";']
    if proto.package:
        out.append(f"package {proto.package};")
    for index, path in enumerate(proto.dependency):
        kind = "public " if index in proto.public_dependency else "weak " if index in proto.weak_dependency else ""
        out.append(f"import {kind}{_quote(path)};")
    out += [f"option {option};" for option in _options(proto.options)]
    scope = "." + proto.package if proto.package else ""
    for message in proto.message_type:
        out += _message(message, proto, "", scope)
    for enum in proto.enum_type:
        out += _enum(enum, "")
    out += _extensions(proto.extension, proto, "")
    for service in proto.service:
        out.append(f"service {service.name} {{")
        out += [f"  option {option};" for option in _options(service.options)]
        for method in service.method:
            ins = f"{'stream ' if method.client_streaming else ''}{method.input_type}"
            outs = f"{'stream ' if method.server_streaming else ''}{method.output_type}"
            options = _options(method.options)
            body = " {" + "".join(f" option {o};" for o in options) + " }" if options else ";"
            out.append(f"  rpc {method.name} ({ins}) returns ({outs}){body}")
        out.append("}")
    return "\n".join(out) + "\n"


def _message(message: Any, proto: Any, indent: str, scope: str) -> list[str]:
    out = [f"{indent}message {message.name} {{"]
    inner = indent + "  "
    out += [f"{inner}option {option};" for option in _options(message.options)]
    full = f"{scope}.{message.name}"
    entries = {f"{full}.{n.name}": n for n in message.nested_type if n.options.map_entry}
    written: set[int] = set()
    for f in message.field:
        oneof = f.oneof_index if f.HasField("oneof_index") and not f.proto3_optional else None
        if oneof is None:
            out.append(inner + _field(f, proto, entries))
        elif oneof not in written:
            written.add(oneof)
            decl = message.oneof_decl[oneof]
            out.append(f"{inner}oneof {decl.name} {{")
            out += [f"{inner}  option {option};" for option in _options(decl.options)]
            members = [g for g in message.field if g.HasField("oneof_index") and g.oneof_index == oneof]
            out += [inner + "  " + _field(g, proto, entries, in_oneof=True) for g in members]
            out.append(f"{inner}}}")
    for r in message.extension_range:
        out.append(f"{inner}extensions {_range(r.start, r.end - 1, _MAX_FIELD)};")
    if message.reserved_range:
        out.append(
            f"{inner}reserved {', '.join(_range(r.start, r.end - 1, _MAX_FIELD) for r in message.reserved_range)};"
        )
    if message.reserved_name:
        out.append(f"{inner}reserved {', '.join(_quote(n) for n in message.reserved_name)};")
    for nested in message.nested_type:
        if not nested.options.map_entry:
            out += _message(nested, proto, inner, full)
    for enum in message.enum_type:
        out += _enum(enum, inner)
    out += _extensions(message.extension, proto, inner)
    return [*out, f"{indent}}}"]


def _field(f: Any, proto: Any, entries: Mapping[str, Any], in_oneof: bool = False) -> str:
    entry = entries.get(f.type_name) if f.label == _F.LABEL_REPEATED else None
    if entry is not None:
        key, value = (_type_of(g) for g in entry.field)
        head = f"map<{key}, {value}> {f.name}"
    else:
        if in_oneof:
            label = ""
        elif proto.syntax == "proto3":
            label = "repeated " if f.label == _F.LABEL_REPEATED else "optional " if f.proto3_optional else ""
        else:
            label = _LABELS[f.label] + " "
        head = f"{label}{_type_of(f)} {f.name}"
    options = []
    if f.HasField("default_value"):
        text = f.default_value
        if f.type == _F.TYPE_STRING:
            text = _quote(text)
        elif f.type == _F.TYPE_BYTES:
            text = f'"{text}"'  # kept C-escaped, as protoc stores it
        options.append(f"default = {text}")
    if f.HasField("json_name"):
        options.append(f"json_name = {_quote(f.json_name)}")
    options += _options(f.options)
    return f"{head} = {f.number}{' [' + ', '.join(options) + ']' if options else ''};"


def _type_of(f: Any) -> str:
    return str(f.type_name) if f.type in (_F.TYPE_MESSAGE, _F.TYPE_ENUM, _F.TYPE_GROUP) else _SCALAR_NAMES[f.type]


def _enum(enum: Any, indent: str) -> list[str]:
    out = [f"{indent}enum {enum.name} {{"]
    out += [f"{indent}  option {option};" for option in _options(enum.options)]
    for value in enum.value:
        options = _options(value.options)
        out.append(f"{indent}  {value.name} = {value.number}{' [' + ', '.join(options) + ']' if options else ''};")
    if enum.reserved_range:
        out.append(f"{indent}  reserved {', '.join(_range(r.start, r.end, _MAX_ENUM) for r in enum.reserved_range)};")
    if enum.reserved_name:
        out.append(f"{indent}  reserved {', '.join(_quote(n) for n in enum.reserved_name)};")
    return [*out, f"{indent}}}"]


def _extensions(extensions: Any, proto: Any, indent: str) -> list[str]:
    out: list[str] = []
    for extendee in dict.fromkeys(e.extendee for e in extensions):
        out.append(f"{indent}extend {extendee} {{")
        out += [indent + "  " + _field(e, proto, {}) for e in extensions if e.extendee == extendee]
        out.append(f"{indent}}}")
    return out


def _range(start: int, last: int, maximum: int) -> str:
    return str(start) if start == last else f"{start} to {'max' if last == maximum else last}"


def _options(options: Any) -> list[str]:
    """The standard options set, in field number order (custom ones, unknown fields here, are not rendered)."""
    out = []
    for descriptor, value in options.ListFields():
        if descriptor.is_repeated or descriptor.cpp_type == descriptor.CPPTYPE_MESSAGE:
            continue
        if descriptor.cpp_type == descriptor.CPPTYPE_BOOL:
            text = "true" if value else "false"
        elif descriptor.cpp_type == descriptor.CPPTYPE_ENUM:
            text = descriptor.enum_type.values_by_number[value].name
        elif descriptor.cpp_type == descriptor.CPPTYPE_STRING:
            text = _quote(value) if isinstance(value, str) else f'"{_c_escape(value)}"'
        else:
            text = repr(value)
        out.append(f"{descriptor.name} = {text}")
    return out


def _quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return '"' + "".join(c if c.isprintable() else f"\\U{ord(c):08x}" for c in escaped) + '"'


# ------------------------------------------------------------------------------------------------- compatibility


def read_problems(reader: ProtobufSchema, writer: ProtobufSchema) -> list[str]:
    """Why data written with ``writer`` may not be read with ``reader`` (empty: it can), each saying where."""
    diff = _Diff(reader, writer)
    if reader.descriptor.package != writer.descriptor.package:
        diff.problems.append(
            f"the package changed from {writer.descriptor.package or '(none)'!r} to "
            f"{reader.descriptor.package or '(none)'!r}"
        )
    diff.messages(writer.descriptor.message_type, reader.descriptor.message_type, _scope(writer), _scope(reader))
    return diff.problems


def _scope(schema: ProtobufSchema) -> str:
    return "." + schema.descriptor.package if schema.descriptor.package else ""


class _Diff:
    def __init__(self, reader: ProtobufSchema, writer: ProtobufSchema) -> None:
        self.reader, self.writer = reader, writer
        self.problems: list[str] = []
        self.compared: dict[tuple[str, str], bool] = {}  # (writer's, reader's) message: compatible

    def messages(self, written: Any, read: Any, writer_scope: str, reader_scope: str) -> None:
        """The writer's messages against the reader's of the same name (their order is free: message indexes
        refer to the writer's schema)."""
        readers = {m.name: m for m in read}
        for message in written:
            if message.options.map_entry:
                continue  # a map field's entry: compared as the map
            if message.name not in readers:
                where = self.local(f"{writer_scope}.{message.name}", self.writer)
                self.problems.append(f"message {where} was removed: the reader lacks it")
            else:
                self.message(f"{writer_scope}.{message.name}", f"{reader_scope}.{message.name}")

    def local(self, full: str, schema: ProtobufSchema) -> str:
        package = schema.types[full][0]
        return full[len(package) + 2 :] if package else full[1:]

    def message(self, written_name: str, read_name: str) -> bool:
        """Compares the two messages once (a recursion under way counts as compatible); False if not."""
        key = (written_name, read_name)
        if key in self.compared:
            return self.compared[key]
        self.compared[key] = True
        before = len(self.problems)
        w, r = self.writer.types[written_name][1], self.reader.types[read_name][1]
        where = self.local(written_name, self.writer)
        w_oneof, r_oneof = _oneofs(w), _oneofs(r)
        w_all, r_all = {f.number: f for f in w.field}, {f.number: f for f in r.field}
        w_top = {n: f for n, f in w_all.items() if n not in w_oneof}
        r_top = {n: f for n, f in r_all.items() if n not in r_oneof}
        for oneof in sorted(set(r_oneof.values())):
            members = sorted(n for n, o in r_oneof.items() if o == oneof)
            moved = [n for n in members if n in w_top]
            for number in moved:
                del w_top[number]  # compared below, as a field whose oneof changed
            if len(moved) > 1:
                self.problems.append(f"{where}: fields {moved} moved into oneof {oneof} (only one of them is kept)")
            elif moved and any(n in w_oneof for n in members):
                self.problems.append(f"{where}: field {moved[0]} moved into oneof {oneof}, which had other fields")
        for number in sorted(n for n, o in w_oneof.items() if o in r_oneof.values()):
            if number not in r_all:
                self.problems.append(f"{where}: oneof {w_oneof[number]}'s field {number} was removed")
        for number in sorted(w_top.keys() | r_top.keys()):
            only = w_top.get(number) if number not in r_top else r_top.get(number) if number not in w_top else None
            if only is not None and only.label == _F.LABEL_REQUIRED:
                change = "removed" if number not in r_top else "added"
                self.problems.append(f"{where}: required field {only.name} ({number}) was {change}")
        for number in sorted(w_all.keys() & r_all.keys()):  # in or out of oneofs alike
            self.field(w_all[number], r_all[number], f"{where}.{r_all[number].name} ({number})")
        self.messages(w.nested_type, r.nested_type, written_name, read_name)
        self.compared[key] = len(self.problems) == before
        return self.compared[key]

    def field(self, w: Any, r: Any, where: str, labels: bool = True) -> None:
        w_kind, r_kind = self.kind(w, self.writer), self.kind(r, self.reader)
        if w_kind != r_kind:
            self.problems.append(f"{where}: a {w_kind} field became a {r_kind} field")
        elif w_kind == "map":
            w_entry, r_entry = self.writer.types[w.type_name][1], self.reader.types[r.type_name][1]
            for w_part, r_part in zip(w_entry.field, r_entry.field, strict=True):
                self.field(w_part, r_part, f"{where} {w_part.name}", labels=False)
        elif w_kind == "scalar":
            w_type, r_type = _scalar(w), _scalar(r)
            if _GROUPS[w_type] != _GROUPS[r_type]:
                self.problems.append(f"{where}: {w_type} cannot be read as {r_type}")
            elif (
                labels
                and _GROUPS[w_type] != "string or bytes"
                and (w.label == _F.LABEL_REPEATED) != (r.label == _F.LABEL_REPEATED)
            ):
                self.problems.append(f"{where}: {_LABELS[w.label]} {w_type} became {_LABELS[r.label]} {r_type}")
        else:
            w_name, r_name = self.local(w.type_name, self.writer), self.local(r.type_name, self.reader)
            if w_name != r_name:
                self.problems.append(f"{where}: its message type changed from {w_name} to {r_name}")
            elif not self.message(w.type_name, r.type_name):
                self.problems.append(f"{where}: its message type {r_name} cannot read the writer's")
        if labels and r.label == _F.LABEL_REQUIRED and w.label != _F.LABEL_REQUIRED:
            self.problems.append(f"{where}: the reader requires a field the writer may leave out")

    def kind(self, f: Any, schema: ProtobufSchema) -> str:
        if f.type not in (_F.TYPE_MESSAGE, _F.TYPE_GROUP):
            return "scalar"  # enums too: varints on the wire
        entry = schema.types[f.type_name][1]
        return "map" if entry.options.map_entry else "message"


def _oneofs(message: Any) -> dict[int, str]:
    """Field number: its (real, not proto3 optional's synthetic) oneof's name."""
    return {
        f.number: message.oneof_decl[f.oneof_index].name
        for f in message.field
        if f.HasField("oneof_index") and not f.proto3_optional
    }


def _scalar(f: Any) -> str:
    return "enum" if f.type == _F.TYPE_ENUM else _SCALAR_NAMES[f.type]
