"""Avro schemas for the schema registry: parsing (names resolved), the Parsing Canonical Form, and whether data
written with one schema can be read with another (Avro's schema resolution, which the compatibility levels use).

Pure: no I/O. Follows the Avro 1.11 specification, "Parsing Canonical Form for Schemas" and "Schema Resolution":
- primitives are read as themselves, or promoted: int to long, float or double; long to float or double; float to
  double; string to bytes and bytes to string;
- a record is read by a record of the same name (or one of the reader's aliases); each reader field is the writer
  field of its name (or one of its aliases), else the reader's default; writer fields the reader lacks are skipped;
- an enum is read by an enum of the same name whose symbols hold every writer symbol, or that has a default;
- a fixed by a fixed of the same name and size; an array by an array, a map by a map, their items or values read
  in turn;
- a writer union is read if each of its branches is; a reader union reads a writer's type if one of its branches
  does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from server.schemas.errors import SchemaError

__all__ = ["AvroSchema", "SchemaError", "canonical_form", "normalized", "parse", "read_problems"]

PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}
_NAMED = ("record", "error", "enum", "fixed")
# The attributes the canonical form keeps, in its order.
_CANONICAL_KEYS = ("name", "type", "fields", "symbols", "items", "values", "size")


@dataclass(eq=False)
class AvroSchema:
    """One parsed type. Named types are shared: a record that refers to itself holds itself."""

    type: str  # a primitive, or record, enum, fixed, array, map, union
    name: str = ""  # full name of a named type
    aliases: frozenset[str] = frozenset()  # full names
    fields: list[AvroField] = field(default_factory=list)
    symbols: tuple[str, ...] = ()
    default_symbol: str | None = None
    size: int = 0
    items: AvroSchema | None = None  # array items, map values
    branches: list[AvroSchema] = field(default_factory=list)  # union


@dataclass(eq=False)
class AvroField:
    name: str
    type: AvroSchema
    aliases: frozenset[str] = frozenset()
    has_default: bool = False


def parse(text: str, references: Mapping[str, str] | None = None) -> AvroSchema:
    """The schema ``text`` (JSON) describes; :class:`SchemaError` saying what is wrong. ``references``: the texts
    of the schemas it refers to (Confluent's schema references, by reference name, dependencies first), whose
    named types it may use."""
    parser = _Parser()
    for name, referenced in (references or {}).items():
        try:
            parser.type_of(_json(referenced), "")
        except SchemaError as exc:
            raise SchemaError(f"reference {name}: {exc}") from None
    return parser.type_of(_json(text), "")


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, TypeError) as exc:
        raise SchemaError(f"not JSON: {exc}") from None


class _Parser:
    def __init__(self) -> None:
        self.named: dict[str, AvroSchema] = {}

    def type_of(self, node: Any, namespace: str) -> AvroSchema:
        if isinstance(node, str):
            return self._reference(node, namespace)
        if isinstance(node, list):
            return self._union(node, namespace)
        if not isinstance(node, dict) or "type" not in node:
            raise SchemaError(f"a type must be a name, a list (a union) or an object with a type: {node!r:.100}")
        kind = node["type"]
        if isinstance(kind, (dict, list)):
            return self.type_of(kind, namespace)  # {"type": {...}}: the inner type
        if kind in PRIMITIVES:
            return AvroSchema(kind)
        if kind in ("record", "error"):
            return self._record(node, namespace)
        if kind == "enum":
            return self._enum(node, namespace)
        if kind == "fixed":
            size = node.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise SchemaError(f"fixed {node.get('name')!r}: size must be a whole number >= 0")
            schema = self._define(node, namespace, "fixed")
            schema.size = size
            return schema
        if kind == "array":
            return AvroSchema("array", items=self.type_of(_required(node, "items"), namespace))
        if kind == "map":
            return AvroSchema("map", items=self.type_of(_required(node, "values"), namespace))
        if isinstance(kind, str):
            return self._reference(kind, namespace)
        raise SchemaError(f"unknown type {kind!r:.100}")

    def _reference(self, name: str, namespace: str) -> AvroSchema:
        if name in PRIMITIVES:
            return AvroSchema(name)
        full = _full_name(name, namespace)
        found = self.named.get(full) or self.named.get(name)
        if found is None:
            raise SchemaError(f"unknown type {name!r} (a named type must be defined before it is used)")
        return found

    def _union(self, node: list[Any], namespace: str) -> AvroSchema:
        branches = [self.type_of(branch, namespace) for branch in node]
        seen: set[str] = set()
        for branch in branches:
            if branch.type == "union":
                raise SchemaError("a union may not hold a union")
            key = branch.name or branch.type
            if key in seen:
                raise SchemaError(f"a union holds {key} twice")
            seen.add(key)
        return AvroSchema("union", branches=branches)

    def _define(self, node: dict[str, Any], namespace: str, kind: str) -> AvroSchema:
        name = node.get("name")
        if not isinstance(name, str) or not _valid_full_name(name):
            raise SchemaError(f"a {kind} needs a name of letters, digits and _ (dotted for a namespace): {name!r}")
        space = node.get("namespace", namespace) if "." not in name else ""
        if not isinstance(space, str) or (space and not _valid_full_name(space)):
            raise SchemaError(f"{name}: bad namespace {space!r}")
        full = _full_name(name, space)
        if full in self.named or full in PRIMITIVES:
            raise SchemaError(f"{full} is defined twice")
        aliases = node.get("aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise SchemaError(f"{full}: aliases must be a list of names")
        schema = AvroSchema(kind, full, frozenset(_full_name(a, _namespace_of(full)) for a in aliases))
        self.named[full] = schema
        return schema

    def _record(self, node: dict[str, Any], namespace: str) -> AvroSchema:
        schema = self._define(node, namespace, "record")
        inner = _namespace_of(schema.name)
        fields = node.get("fields")
        if not isinstance(fields, list):
            raise SchemaError(f"record {schema.name}: fields must be a list")
        names: set[str] = set()
        for raw in fields:
            if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not _valid_name(raw["name"]):
                raise SchemaError(f"record {schema.name}: each field needs a name: {raw!r:.100}")
            if raw["name"] in names:
                raise SchemaError(f"record {schema.name}: field {raw['name']} twice")
            names.add(raw["name"])
            aliases = raw.get("aliases", [])
            if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
                raise SchemaError(f"{schema.name}.{raw['name']}: aliases must be a list of names")
            field_type = self.type_of(_required(raw, "type"), inner)
            schema.fields.append(AvroField(raw["name"], field_type, frozenset(aliases), "default" in raw))
        return schema

    def _enum(self, node: dict[str, Any], namespace: str) -> AvroSchema:
        schema = self._define(node, namespace, "enum")
        symbols = node.get("symbols")
        if not isinstance(symbols, list) or not all(isinstance(s, str) and _valid_name(s) for s in symbols):
            raise SchemaError(f"enum {schema.name}: symbols must be a list of names")
        if len(set(symbols)) != len(symbols):
            raise SchemaError(f"enum {schema.name}: a symbol appears twice")
        default = node.get("default")
        if default is not None and default not in symbols:
            raise SchemaError(f"enum {schema.name}: its default {default!r} is not one of its symbols")
        schema.symbols, schema.default_symbol = tuple(symbols), default
        return schema


def _required(node: dict[str, Any], key: str) -> Any:
    if key not in node:
        raise SchemaError(f"{node.get('type')!r} needs {key!r}")
    return node[key]


def _valid_name(name: str) -> bool:
    return bool(name) and (name[0].isalpha() or name[0] == "_") and all(c.isalnum() or c == "_" for c in name)


def _valid_full_name(name: str) -> bool:
    return all(_valid_name(part) for part in name.split("."))


def _full_name(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _namespace_of(full: str) -> str:
    return full.rpartition(".")[0]


def normalized(text: str, references: Mapping[str, str] | None = None) -> str:
    """The schema as compact JSON with its attributes in order: the same for the same schema written with other
    white space or attribute order, and different for any other change (a default, an alias, a doc, a logical
    type), which the Parsing Canonical Form would drop. What the registry knows a schema again by, as Confluent
    does."""
    parse(text, references)
    return json.dumps(_json(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_form(text: str, references: Mapping[str, str] | None = None) -> str:
    """The Parsing Canonical Form of the schema ``text`` (the same for schemas that differ only in what does not
    change how data is read or written: docs, defaults, aliases, order of attributes, white space)."""
    parse(text, references)  # only a valid schema has a canonical form
    defined: set[str] = set()
    for referenced in (references or {}).values():
        _canonical(_json(referenced), "", defined)  # their types are named, not spelled out, where used
    return _canonical(_json(text), "", defined)


def _canonical(node: Any, namespace: str, defined: set[str]) -> str:
    if isinstance(node, str):
        return json.dumps(node if node in PRIMITIVES else _full_name(node, namespace))
    if isinstance(node, list):
        return "[" + ",".join(_canonical(branch, namespace, defined) for branch in node) + "]"
    kind = node["type"]
    if isinstance(kind, (dict, list)):  # {"type": {...}}: the inner type
        return _canonical(kind, namespace, defined)
    if kind in PRIMITIVES:  # {"type": "string", "logicalType": ...} and the like: the primitive
        return json.dumps(kind)
    if kind not in (*_NAMED, "array", "map"):  # {"type": "Name"}: a reference
        return json.dumps(_full_name(kind, namespace))
    parts = []
    if kind in _NAMED:
        space = node.get("namespace", namespace) if "." not in node["name"] else ""
        full = _full_name(node["name"], space)
        if full in defined:
            return json.dumps(full)
        defined.add(full)
        namespace = _namespace_of(full)
        parts.append(f'"name":{json.dumps(full)}')
    parts.append(f'"type":{json.dumps("record" if kind == "error" else kind)}')
    if kind in ("record", "error"):
        fields = ",".join(
            "{" + f'"name":{json.dumps(f["name"])},"type":{_canonical(f["type"], namespace, defined)}' + "}"
            for f in node["fields"]
        )
        parts.append(f'"fields":[{fields}]')
    elif kind == "enum":
        parts.append(f'"symbols":{json.dumps(node["symbols"], separators=(",", ":"))}')
    elif kind == "array":
        parts.append(f'"items":{_canonical(node["items"], namespace, defined)}')
    elif kind == "map":
        parts.append(f'"values":{_canonical(node["values"], namespace, defined)}')
    elif kind == "fixed":
        parts.append(f'"size":{node["size"]}')
    return "{" + ",".join(parts) + "}"


def read_problems(reader: AvroSchema, writer: AvroSchema) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` (empty: it can), each with where it is."""
    problems: list[str] = []
    _check(reader, writer, "", problems, set())
    return problems


def _check(reader: AvroSchema, writer: AvroSchema, where: str, problems: list[str], seen: set[tuple[int, int]]) -> None:
    pair = (id(reader), id(writer))
    if pair in seen:  # a recursive type already being compared: assumed to match, as the resolution does
        return
    seen.add(pair)
    at = where or "/"
    if writer.type == "union":
        for index, branch in enumerate(writer.branches):
            _check(reader, branch, f"{where}/{index}", problems, seen)
        return
    if reader.type == "union":
        for branch in reader.branches:
            trial: list[str] = []
            _check(branch, writer, where, trial, set(seen))
            if not trial:
                return
        problems.append(f"{at}: the reader's union has no branch that reads the writer's {_label(writer)}")
        return
    if reader.type != writer.type:
        if reader.type in _PROMOTIONS.get(writer.type, ()):
            return
        problems.append(f"{at}: the reader's {_label(reader)} cannot read the writer's {_label(writer)}")
        return
    if reader.type in PRIMITIVES:
        return
    if reader.type in ("array", "map"):
        assert reader.items is not None and writer.items is not None
        _check(reader.items, writer.items, f"{where}/{'items' if reader.type == 'array' else 'values'}", problems, seen)
        return
    if not _same_name(reader, writer):
        problems.append(f"{at}: the reader's {reader.type} {reader.name} is not the writer's {writer.name}")
        return
    if reader.type == "fixed":
        if reader.size != writer.size:
            problems.append(f"{at}: fixed {reader.name} has {reader.size} bytes, the writer's {writer.size}")
    elif reader.type == "enum":
        missing = [s for s in writer.symbols if s not in reader.symbols]
        if missing and reader.default_symbol is None:
            problems.append(f"{at}: enum {reader.name} lacks the writer's symbols {missing} and has no default")
    else:
        written = {f.name: f for f in writer.fields}
        for reader_field in reader.fields:
            source = written.get(reader_field.name) or next(
                (written[a] for a in sorted(reader_field.aliases) if a in written), None
            )
            if source is None:
                if not reader_field.has_default:
                    problems.append(
                        f"{where}/{reader_field.name}: the reader's field {reader_field.name} is not written and "
                        "has no default"
                    )
                continue
            _check(reader_field.type, source.type, f"{where}/{reader_field.name}", problems, seen)


def _same_name(reader: AvroSchema, writer: AvroSchema) -> bool:
    """As Avro's own check (Java's ``SchemaCompatibility``): the same unqualified name, or the writer's full name
    among the reader's aliases."""
    return writer.name.rpartition(".")[2] == reader.name.rpartition(".")[2] or writer.name in reader.aliases


def _label(schema: AvroSchema) -> str:
    return f"{schema.type} {schema.name}" if schema.name else schema.type
