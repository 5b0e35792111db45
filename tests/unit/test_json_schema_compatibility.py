"""JSON Schema (``server.schemas.json_schema``) under Confluent's compatibility levels
(``server.schemas.compatibility``): the matrix of changes (open, closed and partially open content models, types,
enums, bounds, combinations, $refs) at each level, references, the canonical form, what is not a JSON Schema, and
properties that hold for any schema (a schema reads itself, ``true`` reads anything, and a reader found compatible
accepts each document the writer does)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.schemas.compatibility import LEVELS, problems
from server.schemas.json_schema import JsonSchema, SchemaError, canonical_form, parse, read_problems

DRAFT7 = "http://json-schema.org/draft-07/schema#"
DRAFT2020 = "https://json-schema.org/draft/2020-12/schema"


def obj(properties: dict[str, Any], required: tuple[str, ...] = (), additional: Any = None, **extra: Any) -> str:
    node: dict[str, Any] = {"type": "object", "properties": properties, **extra}
    if required:
        node["required"] = list(required)
    if additional is not None:
        node["additionalProperties"] = additional
    return json.dumps(node)


def closed(properties: dict[str, Any], required: tuple[str, ...] = ()) -> str:
    return obj(properties, required, additional=False)


def js(**node: Any) -> str:
    return json.dumps(node)


def drafted(text: str, draft: str) -> str:
    return json.dumps({"$schema": draft, **json.loads(text)})


def allowed(level: str, new: str, *earlier: str) -> bool:
    return not problems(level, parse(new), [parse(e) for e in earlier], read_problems)


def read(reader: str, writer: str, references: dict[str, str] | None = None) -> list[str]:
    return read_problems(parse(reader, references), parse(writer, references))


NAME = {"type": "string"}
INT = {"type": "integer"}
NUM = {"type": "number"}
ADDR_V1 = {"type": "object", "properties": {"zip": {"type": "string"}}}
ADDR_V2 = {"type": "object", "properties": {"zip": {"type": "integer"}}}
TUPLE_1 = {"$schema": DRAFT2020, "type": "array", "prefixItems": [NAME], "items": False}
TUPLE_2 = {"$schema": DRAFT2020, "type": "array", "prefixItems": [NAME, INT], "items": False}


def with_age(age: dict[str, Any]) -> str:
    return js(type="object", properties={"age": {"$ref": "#/definitions/age"}}, definitions={"age": age})


# (the change, old, new, {level: allowed}) against the latest version: Confluent's JSON Schema rules ("Schema
# Evolution and Compatibility"; JsonSchemaDiff's differences), as reader-accepts-writer. BACKWARD: the new schema
# reads the old's data; FORWARD: the old reads the new's.
MATRIX = [
    (
        "add an optional property to an open content model",
        obj({"name": NAME}),
        obj({"name": NAME, "age": INT}),
        {"BACKWARD": 0, "FORWARD": 1, "FULL": 0},
    ),
    (
        "add an optional property to a closed content model",
        closed({"name": NAME}),
        closed({"name": NAME, "age": INT}),
        {"BACKWARD": 1, "FORWARD": 0, "FULL": 0},
    ),
    (
        "add a property with an empty schema to an open content model",
        obj({"name": NAME}),
        obj({"name": NAME, "extra": {}}),
        {"BACKWARD": 1, "FORWARD": 1, "FULL": 1},
    ),
    (
        "add a property a partially open content model covers",
        obj({"name": NAME}, additional=INT),
        obj({"name": NAME, "age": INT}, additional=INT),
        {"BACKWARD": 1, "FORWARD": 1, "FULL": 1},
    ),
    (
        "add a property a partially open content model does not cover",
        obj({"name": NAME}, additional=INT),
        obj({"name": NAME, "nick": NAME}, additional=INT),
        {"BACKWARD": 0, "FORWARD": 0, "FULL": 0},
    ),
    (
        "remove a property from an open content model",
        obj({"name": NAME, "age": INT}),
        obj({"name": NAME}),
        {"BACKWARD": 1, "FORWARD": 0, "FULL": 0},
    ),
    (
        "remove a property from a closed content model",
        closed({"name": NAME, "age": INT}),
        closed({"name": NAME}),
        {"BACKWARD": 0, "FORWARD": 1, "FULL": 0},
    ),
    (
        "remove a property a partially open content model covers",
        obj({"name": NAME, "age": INT}, additional=INT),
        obj({"name": NAME}, additional=INT),
        {"BACKWARD": 1, "FORWARD": 1, "FULL": 1},
    ),
    (
        "require a declared property",
        obj({"name": NAME, "age": INT}),
        obj({"name": NAME, "age": INT}, required=("age",)),
        {"BACKWARD": 0, "FORWARD": 1, "FULL": 0},
    ),
    (
        "make a required property optional",
        obj({"name": NAME}, required=("name",)),
        obj({"name": NAME}),
        {"BACKWARD": 1, "FORWARD": 0, "FULL": 0},
    ),
    ("widen integer to number", obj({"n": INT}), obj({"n": NUM}), {"BACKWARD": 1, "FORWARD": 0, "FULL": 0}),
    ("narrow number to integer", obj({"n": NUM}), obj({"n": INT}), {"BACKWARD": 0, "FORWARD": 1, "FULL": 0}),
    (
        "make a property nullable",
        obj({"name": NAME}),
        obj({"name": {"type": ["string", "null"]}}),
        {"BACKWARD": 1, "FORWARD": 0, "FULL": 0},
    ),
    ("change a type", js(type="string"), js(type="integer"), {"NONE": 1, "BACKWARD": 0, "FORWARD": 0}),
    ("add an enum value", js(enum=["R", "G"]), js(enum=["R", "G", "B"]), {"BACKWARD": 1, "FORWARD": 0, "FULL": 0}),
    ("remove an enum value", js(enum=["R", "G"]), js(enum=["R"]), {"BACKWARD": 0, "FORWARD": 1, "FULL": 0}),
    ("change a const", js(const="v1"), js(const="v2"), {"BACKWARD": 0, "FORWARD": 0, "FULL": 0}),
    ("restrict a string to an enum", js(type="string"), js(enum=["a"]), {"BACKWARD": 0, "FORWARD": 1, "FULL": 0}),
    (
        "raise maxLength",
        js(type="string", maxLength=5),
        js(type="string", maxLength=10),
        {"BACKWARD": 1, "FORWARD": 0, "FULL": 0},
    ),
    ("add a minLength", js(type="string"), js(type="string", minLength=1), {"BACKWARD": 0, "FORWARD": 1, "FULL": 0}),
    ("lower a minimum", js(type="integer", minimum=5), js(type="integer", minimum=0), {"BACKWARD": 1, "FORWARD": 0}),
    (
        "make a minimum exclusive",
        js(type="number", minimum=0),
        js(type="number", exclusiveMinimum=0),
        {"BACKWARD": 0, "FORWARD": 1, "FULL": 0},
    ),
    (
        "tighten multipleOf from 2 to 4",
        js(type="integer", multipleOf=2),
        js(type="integer", multipleOf=4),
        {"BACKWARD": 0, "FORWARD": 1, "FULL": 0},
    ),
    ("add a pattern", js(type="string"), js(type="string", pattern="^a"), {"BACKWARD": 0, "FORWARD": 1, "FULL": 0}),
    (
        "change a pattern",
        js(type="string", pattern="^a"),
        js(type="string", pattern="^b"),
        {"BACKWARD": 0, "FORWARD": 0, "FULL": 0},
    ),
    (
        "open a closed content model",
        closed({"name": NAME}),
        obj({"name": NAME}),
        {"BACKWARD": 1, "FORWARD": 0, "FULL": 0},
    ),
    (
        "close an open content model",
        obj({"name": NAME}),
        closed({"name": NAME}),
        {"BACKWARD": 0, "FORWARD": 1, "FULL": 0},
    ),
    (
        "widen array items",
        js(type="array", items=INT),
        js(type="array", items=NUM),
        {"BACKWARD": 1, "FORWARD": 0, "FULL": 0},
    ),
    ("raise maxItems", js(type="array", maxItems=2), js(type="array", maxItems=3), {"BACKWARD": 1, "FORWARD": 0}),
    ("add uniqueItems", js(type="array"), js(type="array", uniqueItems=True), {"BACKWARD": 0, "FORWARD": 1}),
    ("add a tuple position", json.dumps(TUPLE_1), json.dumps(TUPLE_2), {"BACKWARD": 1, "FORWARD": 0, "FULL": 0}),
    (
        "add an anyOf branch",
        js(anyOf=[NAME, INT]),
        js(anyOf=[NAME, INT, {"type": "null"}]),
        {"BACKWARD": 1, "FORWARD": 0, "FULL": 0},
    ),
    (
        "add a oneOf branch of another type",
        js(oneOf=[NAME, INT]),
        js(oneOf=[NAME, INT, {"type": "boolean"}]),
        {"BACKWARD": 1, "FORWARD": 0, "FULL": 0},
    ),
    (
        "add a oneOf branch overlapping another",
        js(oneOf=[NAME, INT]),
        js(oneOf=[NAME, INT, NUM]),
        {"BACKWARD": 0, "FORWARD": 0, "FULL": 0},
    ),
    ("remove a oneOf branch", js(oneOf=[NAME, INT]), js(oneOf=[NAME]), {"BACKWARD": 0, "FORWARD": 1, "FULL": 0}),
    (
        "add a not",
        js(type="string"),
        js(type="string", **{"not": {"const": ""}}),
        {"BACKWARD": 0, "FORWARD": 1, "FULL": 0},
    ),
    (
        "change a nested property's type",
        obj({"address": ADDR_V1}),
        obj({"address": ADDR_V2}),
        {"BACKWARD": 0, "FORWARD": 0, "FULL": 0},
    ),
    ("widen a referenced definition", with_age(INT), with_age(NUM), {"BACKWARD": 1, "FORWARD": 0, "FULL": 0}),
    (
        "change only title, description and default",
        obj({"name": NAME}),
        obj({"name": {"type": "string", "description": "who", "default": ""}}, title="User"),
        {"BACKWARD": 1, "FORWARD": 1, "FULL": 1},
    ),
    (
        "move to draft 2020-12, the same constraints",
        obj({"name": NAME}),
        drafted(obj({"name": NAME}), DRAFT2020),
        {"BACKWARD": 1, "FORWARD": 1, "FULL": 1},
    ),
]


@pytest.mark.parametrize(("change", "old", "new", "expected"), MATRIX, ids=[m[0] for m in MATRIX])
def test_the_documented_matrix(change: str, old: str, new: str, expected: dict[str, int]) -> None:
    assert allowed("NONE", new, old)
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
    v1 = closed({"n": NUM})
    v2 = closed({"n": INT})
    v3 = closed({"n": INT, "note": NAME})  # reads v2's integers, not v1's numbers
    assert allowed("BACKWARD", v3, v1, v2)
    assert not allowed("BACKWARD_TRANSITIVE", v3, v1, v2)
    found = problems("BACKWARD_TRANSITIVE", parse(v3), [parse(v1), parse(v2)], read_problems)
    assert len(found) == 1 and "version 1" in found[0] and "#/properties/n" in found[0], found
    assert not allowed("FORWARD_TRANSITIVE", v3, v1, v2)  # the old closed models lack note
    assert not allowed("FULL_TRANSITIVE", v3, v1, v2)
    assert allowed("BACKWARD", v1)  # the first version of a subject: nothing to be compatible with


def test_problems_say_where_and_what() -> None:
    (added,) = read(obj({"name": NAME, "age": INT}), obj({"name": NAME}))
    assert added.startswith("#/properties/age:") and "open content model" in added
    (removed,) = read(closed({"name": NAME}), closed({"name": NAME, "age": INT}))
    assert removed.startswith("#/properties/age:") and "closed" in removed
    (required,) = read(obj({"name": NAME}, required=("name",)), obj({"name": NAME}))
    assert required.startswith("#/required:") and "'name'" in required
    (nested,) = read(obj({"address": ADDR_V2}), obj({"address": ADDR_V1}))
    assert nested.startswith("#/properties/address/properties/zip:") and "string" in nested
    (value,) = read(js(enum=["R"]), js(enum=["R", "G"]))
    assert value == '#: the writer allows "G", the reader does not'


def test_refs_resolve_locally_and_to_references_and_recursion_ends() -> None:
    address = json.dumps({"type": "object", "properties": {"zip": NAME}, "$defs": {"zip": NAME}})
    user = js(
        type="object",
        properties={
            "home": {"$ref": "address.json"},
            "zip": {"$ref": "address.json#/$defs/zip"},
            "work": {"$ref": "https://acme.com/address.json"},
        },
    )
    refs = {"address.json": address, "https://acme.com/address.json": address}
    assert not read(user, user, refs)
    wider = {"address.json": json.dumps({"type": "object", "properties": {"zip": {"type": ["string", "integer"]}}})}
    changed = js(type="object", properties={"home": {"$ref": "address.json"}})
    assert not read_problems(parse(changed, wider), parse(changed, {"address.json": address}))
    assert read_problems(parse(changed, {"address.json": address}), parse(changed, wider))
    relative = js(**{"$id": "https://acme.com/user.json"}, type="object", properties={"a": {"$ref": "address.json"}})
    assert isinstance(parse(relative, {"address.json": address}), JsonSchema)  # relative to the schema's $id
    linked = js(type="object", properties={"v": INT, "next": {"$ref": "#"}})
    wide_linked = js(type="object", properties={"v": NUM, "next": {"$ref": "#"}})
    assert not read(linked, linked)
    assert not read(wide_linked, linked)
    assert read(linked, wide_linked) == ["#/properties/v: the writer allows number, the reader only integer"]
    # A recursive oneOf, and a not that refers back: the comparisons under way are assumed, so they end.
    tree = js(oneOf=[{"type": "null"}, {"type": "object", "properties": {"kid": {"$ref": "#"}}}])
    assert not read(tree, tree)
    negated = js(type="object", properties={"x": {"not": {"$ref": "#"}}})
    assert not read(negated, negated)
    defs = js(
        definitions={
            "node": {
                "type": "object",
                "properties": {"kids": {"type": "array", "items": {"$ref": "#/definitions/node"}}},
            }
        },
        **{"$ref": "#/definitions/node"},
    )
    assert not read(defs, defs)


def test_boolean_schemas() -> None:
    assert not read("true", obj({"name": NAME}))
    assert not read(obj({"name": NAME}), "false")
    assert read("false", "true") == ["#: the reader allows nothing here, the writer does"]
    assert read(js(type="string"), "true") == ["#: the writer allows any type, the reader only string"]
    assert not read("{}", "true")


def test_combinations() -> None:
    nullable = js(anyOf=[{"type": "null"}, NAME])
    assert not read(nullable, js(type="string"))
    assert read(js(type="string"), nullable)
    tagged = [
        {"type": "object", "properties": {"kind": {"const": "a"}, "x": INT}, "required": ["kind"]},
        {"type": "object", "properties": {"kind": {"const": "b"}, "y": NAME}, "required": ["kind"]},
    ]
    assert not read(js(oneOf=tagged), js(oneOf=tagged))  # a discriminator keeps the branches apart
    assert not read(js(oneOf=tagged), json.dumps(tagged[0]))
    both = js(allOf=[{"type": "object", "properties": {"a": INT}}, {"required": ["a"]}])
    assert not read(both, both)
    assert not read(obj({"a": INT}), both)  # the writer's allOf narrows it
    assert read(both, obj({"a": INT}))  # the reader's allOf requires a
    # The writer's own not keeps out what the reader's excludes.
    assert not read(js(type="string", **{"not": {"const": ""}}), js(type="string", **{"not": {"enum": ["", "x"]}}))
    assert not read(js(**{"not": {"type": "null"}}), js(type="string"))  # a type the writer never writes
    assert read(js(type="string", **{"if": {"minLength": 3}, "then": {"pattern": "^a"}}), js(type="string"))


@pytest.mark.parametrize(
    "draft",
    [
        "http://json-schema.org/draft-04/schema#",
        "http://json-schema.org/draft-06/schema#",
        DRAFT7,
        "https://json-schema.org/draft/2019-09/schema",
        DRAFT2020,
    ],
)
def test_every_draft_parses(draft: str) -> None:
    text = drafted(obj({"name": NAME, "tags": {"type": "array", "items": NAME}}, required=("name",)), draft)
    assert not read(text, text)


def test_draft_04_exclusive_bounds_are_flags() -> None:
    d4 = js(**{"$schema": "http://json-schema.org/draft-04/schema#"}, type="number", minimum=0, exclusiveMinimum=True)
    assert not read(js(type="number", minimum=0), d4)
    assert read(d4, js(type="number", minimum=0)) == ["#: the reader excludes its lower bound 0, the writer allows it"]


def test_the_schema_confluent_kafkas_json_serializer_users_register() -> None:
    user = json.dumps(
        {
            "$schema": DRAFT7,
            "title": "User",
            "description": "A Confluent Kafka Python User",
            "type": "object",
            "properties": {
                "name": {"description": "User's name", "type": "string"},
                "favorite_number": {"description": "User's favorite number", "type": "number", "exclusiveMinimum": 0},
                "favorite_color": {"description": "User's favorite color", "type": "string"},
            },
            "required": ["name", "favorite_number", "favorite_color"],
        }
    )
    simple = json.dumps(
        {
            "$schema": DRAFT7,
            "title": "User",
            "type": "object",
            "properties": {"name": {"type": "string"}, "favorite_number": {"type": "integer"}},
            "required": ["name"],
        }
    )
    for text in (user, simple):
        assert isinstance(parse(text), JsonSchema)
        assert not read(text, text)
    assert read(user, simple)  # favorite_color is required now, favorite_number a number above 0


def test_the_canonical_form() -> None:
    spaced = '{ "type" : "object",\n  "properties": {"b": {"type": "string"}, "a": {"type": "integer"}} }'
    reordered = '{"properties":{"a":{"type":"integer"},"b":{"type":"string"}},"type":"object"}'
    assert canonical_form(spaced) == canonical_form(reordered) == reordered
    assert canonical_form(" true ") == "true"
    assert canonical_form('{"title": "é"}') == '{"title":"é"}'
    with pytest.raises(SchemaError):
        canonical_form('{"type": 3}')


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("not json", "not JSON"),
        ('{"minimum": NaN}', "not JSON"),
        ("42", "object or a boolean"),
        ('{"type": "strin"}', "#/type"),
        ('{"type": "object", "properties": {"a": {"type": "text"}}}', "#/properties/a/type"),
        ('{"type": "string", "minLength": -1}', "#/minLength"),
        ('{"required": "name"}', "#/required"),
        ('{"$ref": "#/definitions/missing"}', "#/definitions/missing"),
        ('{"properties": {"a": {"$ref": "address.json"}}}', "address.json"),
        ('{"$ref": "https://example.com/elsewhere.json"}', "resolves neither"),
        ('{"$schema": "http://example.com/my-draft"}', "$schema"),
    ],
)
def test_what_is_not_a_json_schema_says_why(text: str, says: str) -> None:
    with pytest.raises(SchemaError) as raised:
        parse(text)
    assert says in str(raised.value)


def test_a_bad_reference_is_named() -> None:
    with pytest.raises(SchemaError, match=r"reference address\.json: not JSON"):
        parse('{"$ref": "address.json"}', {"address.json": "{"})


_LEAF = st.one_of(
    st.sampled_from([{"type": t} for t in ("string", "integer", "number", "boolean", "null")]),
    st.builds(lambda n: {"type": "integer", "minimum": n}, st.integers(-3, 3)),
    st.builds(lambda n: {"type": "string", "maxLength": n}, st.integers(0, 4)),
    st.builds(lambda vs: {"enum": vs}, st.lists(st.sampled_from([1, 2, "a", None, True]), min_size=1, unique=True)),
    st.sampled_from([True, False, {}]),
)
_KEYS = st.sampled_from(["a", "b", "c"])


def _objects(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.builds(
        lambda props, req, add: {
            "type": "object",
            "properties": props,
            **({"required": sorted(set(req))} if req else {}),
            **({} if add is None else {"additionalProperties": add}),
        },
        st.dictionaries(_KEYS, children, max_size=3),
        st.lists(_KEYS, max_size=2),
        st.sampled_from([None, True, False, {"type": "integer"}]),
    )


_SCHEMAS = st.recursive(
    _LEAF,
    lambda children: st.one_of(
        _objects(children),
        st.builds(lambda items: {"type": "array", "items": items}, children),
        st.builds(lambda branches: {"anyOf": branches}, st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda branches: {"oneOf": branches}, st.lists(children, min_size=1, max_size=3)),
    ),
    max_leaves=8,
)
_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from([0.5, "", "a", "abcdef"])),
    lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(_KEYS, children, max_size=3)),
    max_leaves=6,
)


@settings(max_examples=80, deadline=None)
@given(_SCHEMAS)
def test_a_schema_reads_itself_true_reads_it_and_it_reads_false(schema: Any) -> None:
    text = json.dumps(schema)
    parsed = parse(text)
    for level in LEVELS:
        assert not problems(level, parsed, [parsed], read_problems)
    assert not read_problems(parse("true"), parsed)
    assert not read_problems(parsed, parse("false"))
    assert canonical_form(json.dumps(schema, indent=2)) == canonical_form(text)


@settings(max_examples=150, deadline=None)
@given(st.data(), _SCHEMAS, st.lists(_VALUES, min_size=1, max_size=8))
def test_a_compatible_reader_accepts_what_the_writer_does(data: st.DataObject, writer: Any, values: list[Any]) -> None:
    # Readers often compatible (the writer itself, widened by anyOf, or as a oneOf branch), and any at all.
    reader = data.draw(
        st.one_of(
            st.just(writer),
            _SCHEMAS,
            st.builds(lambda other: {"anyOf": [writer, other]}, _SCHEMAS),
            st.builds(lambda other: {"oneOf": [writer, other]}, _SCHEMAS),
        )
    )
    if read_problems(parse(json.dumps(reader)), parse(json.dumps(writer))):
        return
    for value in values:
        if jsonschema.Draft7Validator(writer).is_valid(value):
            assert jsonschema.Draft7Validator(reader).is_valid(value), (reader, writer, value)
