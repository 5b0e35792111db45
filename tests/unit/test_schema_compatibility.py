"""Avro schemas (``server.schemas.avro``) and Confluent's compatibility levels (``server.schemas.compatibility``):
the matrix of changes Confluent documents for Avro (each level against compatible and incompatible changes), the
Parsing Canonical Form, named and recursive types, and schemas that are not Avro."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.schemas.avro import AvroSchema, SchemaError, canonical_form, parse, read_problems
from server.schemas.compatibility import LEVELS, problems


def record(*fields: dict[str, Any], name: str = "User", **extra: Any) -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "acme", "fields": list(fields), **extra})


def enum(*symbols: str, default: str | None = None) -> str:
    node: dict[str, Any] = {"type": "enum", "name": "Color", "symbols": list(symbols)}
    if default is not None:
        node["default"] = default
    return json.dumps(node)


def allowed(level: str, new: str, *earlier: str) -> bool:
    return not problems(level, parse(new), [parse(e) for e in earlier], read_problems)


NAME = {"name": "name", "type": "string"}
AGE = {"name": "age", "type": "int"}
AGE_DEFAULT = {"name": "age", "type": "int", "default": 0}
AGE_LONG = {"name": "age", "type": "long"}

# (the change, old, new, {level: allowed}) for the levels against the latest version, as Confluent's documentation
# of Avro's compatibility lists them (docs.confluent.io, "Schema Evolution and Compatibility").
MATRIX = [
    ("add a field with a default", record(NAME), record(NAME, AGE_DEFAULT), {"BACKWARD": 1, "FORWARD": 1, "FULL": 1}),
    ("add a field without a default", record(NAME), record(NAME, AGE), {"BACKWARD": 0, "FORWARD": 1, "FULL": 0}),
    (
        "delete a field with a default",
        record(NAME, AGE_DEFAULT),
        record(NAME),
        {"BACKWARD": 1, "FORWARD": 1, "FULL": 1},
    ),
    ("delete a field without a default", record(NAME, AGE), record(NAME), {"BACKWARD": 1, "FORWARD": 0, "FULL": 0}),
    ("widen int to long", record(NAME, AGE), record(NAME, AGE_LONG), {"BACKWARD": 1, "FORWARD": 0, "FULL": 0}),
    ("narrow long to int", record(NAME, AGE_LONG), record(NAME, AGE), {"BACKWARD": 0, "FORWARD": 1, "FULL": 0}),
    (
        "add an enum symbol",
        enum("RED", "GREEN"),
        enum("RED", "GREEN", "BLUE"),
        {"BACKWARD": 1, "FORWARD": 0, "FULL": 0},
    ),
    (
        "add an enum symbol, the old enum having a default",
        enum("RED", "GREEN", default="RED"),
        enum("RED", "GREEN", "BLUE", default="RED"),
        {"BACKWARD": 1, "FORWARD": 1, "FULL": 1},
    ),
    ("remove an enum symbol", enum("RED", "GREEN"), enum("RED"), {"BACKWARD": 0, "FORWARD": 1, "FULL": 0}),
    (
        "rename a field, keeping the old name as an alias",
        record(NAME, AGE),
        record(NAME, {"name": "years", "type": "int", "aliases": ["age"]}),
        {"BACKWARD": 1, "FORWARD": 0, "FULL": 0},
    ),
    (
        "make a field nullable",
        record(NAME),
        record({"name": "name", "type": ["null", "string"]}),
        {"BACKWARD": 1, "FORWARD": 0, "FULL": 0},
    ),
    ("change a field's type", record(NAME), record({"name": "name", "type": "int"}), {"BACKWARD": 0, "FORWARD": 0}),
    ("change the record's name", record(NAME), record(NAME, name="Person"), {"BACKWARD": 0, "FORWARD": 0}),
    ("string to bytes", '"string"', '"bytes"', {"BACKWARD": 1, "FORWARD": 1, "FULL": 1}),
    ("int to float", '"int"', '"float"', {"BACKWARD": 1, "FORWARD": 0}),
    ("anything, unchecked", '"int"', '"string"', {"NONE": 1, "BACKWARD": 0}),
]


@pytest.mark.parametrize(("change", "old", "new", "expected"), MATRIX, ids=[m[0] for m in MATRIX])
def test_the_documented_matrix(change: str, old: str, new: str, expected: dict[str, int]) -> None:
    for level, ok in expected.items():
        assert allowed(level, new, old) is bool(ok), (
            change,
            level,
            problems(level, parse(new), [parse(old)], read_problems),
        )
        # Against one earlier version, transitive and not are the same.
        if level != "NONE":
            assert allowed(f"{level}_TRANSITIVE", new, old) is bool(ok), (change, level)


def test_transitive_levels_check_every_earlier_version() -> None:
    v1 = record(NAME)
    v2 = record(NAME, AGE_DEFAULT)
    v3 = record(NAME, AGE)  # age's default dropped: v3 reads v2's data, not v1's (no age there)
    assert allowed("BACKWARD", v3, v1, v2)
    assert not allowed("BACKWARD_TRANSITIVE", v3, v1, v2)
    found = problems("BACKWARD_TRANSITIVE", parse(v3), [parse(v1), parse(v2)], read_problems)
    assert len(found) == 1 and "version 1" in found[0] and "/age" in found[0], found
    assert allowed("FORWARD_TRANSITIVE", v3, v1, v2)
    assert not allowed("FULL_TRANSITIVE", v3, v1, v2)
    assert allowed("BACKWARD", v1)  # the first version of a subject: nothing to be compatible with
    with pytest.raises(ValueError, match="compatibility level"):
        problems("SIDEWAYS", parse(v1), [parse(v1)], read_problems)


def test_unions_read_branch_by_branch() -> None:
    nullable = json.dumps(["null", "string"])
    assert not read_problems(parse(nullable), parse('"string"'))  # a reader union: some branch reads it
    assert read_problems(parse('"string"'), parse(nullable))  # the writer's null: nothing reads it
    widened = json.dumps(["null", "long", "string"])
    assert not read_problems(parse(widened), parse(json.dumps(["null", "int"])))  # each writer branch, promoted
    assert read_problems(parse(json.dumps(["null", "int"])), parse(widened))


def test_named_types_resolve_in_their_namespace_and_may_recur() -> None:
    linked = record(
        {"name": "value", "type": "int"},
        {"name": "next", "type": ["null", "Node"], "default": None},
        name="Node",
    )
    node = parse(linked)
    assert node.name == "acme.Node"
    nested = node.fields[1].type.branches[1]
    assert nested is node  # the same type, not a copy
    assert not read_problems(node, parse(linked))
    longer = record(
        {"name": "value", "type": "long"},
        {"name": "next", "type": ["null", "Node"], "default": None},
        name="Node",
    )
    assert not read_problems(parse(longer), node)
    assert read_problems(node, parse(longer))  # a long read as an int, even down the recursion
    point = json.dumps(
        {
            "type": "record",
            "name": "Line",
            "namespace": "geo",
            "fields": [
                {"name": "a", "type": {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "int"}]}},
                {"name": "b", "type": "geo.Point"},
                {"name": "c", "type": "Point"},
            ],
        }
    )
    line = parse(point)
    assert {f.type.name for f in line.fields} == {"geo.Point"}


def test_the_parsing_canonical_form() -> None:
    written = """
        {"namespace": "acme", "type": "record", "name": "User", "doc": "someone",
         "fields": [{"name": "name", "type": {"type": "string", "avro.java.string": "String"}, "doc": "x"},
                    {"type": "int", "name": "age", "default": 1, "aliases": ["years"]},
                    {"name": "tags", "type": {"type": "array", "items": "string"}},
                    {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["R", "G"]}},
                    {"name": "again", "type": "Color"},
                    {"name": "id", "type": {"type": "fixed", "name": "Id", "namespace": "ids", "size": 16}}]}
    """
    assert canonical_form(written) == (
        '{"name":"acme.User","type":"record","fields":['
        '{"name":"name","type":"string"},{"name":"age","type":"int"},'
        '{"name":"tags","type":{"type":"array","items":"string"}},'
        '{"name":"color","type":{"name":"acme.Color","type":"enum","symbols":["R","G"]}},'
        '{"name":"again","type":"acme.Color"},'
        '{"name":"id","type":{"name":"ids.Id","type":"fixed","size":16}}]}'
    )
    assert canonical_form('{"type": "map", "values": {"type": "long"}}') == '{"type":"map","values":"long"}'
    assert canonical_form(' "string" ') == '"string"'


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "42",
        '"Undefined"',
        '{"type": "record", "name": "R"}',
        '{"type": "record", "name": "R", "fields": [{"type": "int"}]}',
        '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}, {"name": "a", "type": "int"}]}',
        '{"type": "record", "name": "1bad", "fields": []}',
        '{"type": "enum", "name": "E", "symbols": ["A", "A"]}',
        '{"type": "enum", "name": "E", "symbols": ["A"], "default": "B"}',
        '{"type": "fixed", "name": "F", "size": -1}',
        '{"type": "array"}',
        '["int", "int"]',
        '["int", ["string"]]',
        '[{"type": "record", "name": "R", "fields": []}, {"type": "record", "name": "R", "fields": []}]',
    ],
)
def test_what_is_not_avro_says_why(text: str) -> None:
    with pytest.raises(SchemaError):
        parse(text)


_PRIMITIVE = st.sampled_from(["null", "boolean", "int", "long", "float", "double", "bytes", "string"])
_FIELD_NAMES = st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), min_size=1, max_size=5, unique=True)


@st.composite
def records(draw: st.DrawFn) -> str:
    names = draw(_FIELD_NAMES)
    fields = []
    for name in names:
        kind = draw(st.one_of(_PRIMITIVE, st.builds(lambda p: ["null", p], _PRIMITIVE.filter(lambda p: p != "null"))))
        fields.append({"name": name, "type": kind})
    return record(*fields)


@settings(max_examples=60, deadline=None)
@given(records())
def test_a_schema_is_compatible_with_itself_at_every_level_and_keeps_its_canonical_form(text: str) -> None:
    schema = parse(text)
    for level in LEVELS:
        assert not problems(level, schema, [schema], read_problems)
    spaced = json.dumps(json.loads(text), indent=3)
    assert canonical_form(spaced) == canonical_form(text)
    assert isinstance(parse(canonical_form(text)), AvroSchema)
