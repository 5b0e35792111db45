"""Protobuf schemas (``server.schemas.protobuf``) under Confluent's compatibility levels: the matrix of changes
Confluent's Protobuf rules allow or refuse at each level, .proto text and base64 descriptors (as confluent-kafka's
ProtobufSerializer registers them) alike, imports through references and well-known types, the canonical text, a
round trip through the protobuf runtime, and texts that are not Protobuf."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from google.protobuf import (  # type: ignore[import-untyped,unused-ignore]
    descriptor_pb2,
    descriptor_pool,
    message_factory,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from server.schemas.compatibility import LEVELS, problems
from server.schemas.protobuf import (
    ProtobufSchema,
    SchemaError,
    canonical_form,
    parse,
    read_problems,
    serialized,
    text_of,
)


def proto(body: str, package: str = "acme", syntax: str = "proto3") -> str:
    return f'syntax = "{syntax}";\npackage {package};\n{body}\n'


def allowed(level: str, new: str, *earlier: str) -> bool:
    return not problems(level, parse(new), [parse(e) for e in earlier], read_problems)


USER = "message User { string name = 1; int32 age = 2; }"
ADDRESS = "message Address { string street = 1; }"
COLOR = "enum Color { RED = 0; GREEN = 1; }"

# (the change, old, new, {level: allowed}), as Confluent's Protobuf rules (its schema registry's protobuf diff:
# the changes in SchemaDiff.COMPATIBLE_CHANGES pass, the others fail) judge them.
MATRIX: list[tuple[str, str, str, dict[str, int]]] = [
    (
        "add a field",
        proto(USER),
        proto("message User { string name = 1; int32 age = 2; string email = 3; }"),
        {"BACKWARD": 1, "FORWARD": 1, "FULL": 1},
    ),
    (
        "remove a field",
        proto(USER),
        proto("message User { string name = 1; }"),
        {"BACKWARD": 1, "FORWARD": 1, "FULL": 1},
    ),
    (
        "rename a field",
        proto(USER),
        proto("message User { string full_name = 1; int32 age = 2; }"),
        {"BACKWARD": 1, "FORWARD": 1, "FULL": 1},
    ),
    (
        "reorder fields and add comments",
        proto(USER),
        proto("message User {\n  // years\n  int32 age = 2;\n  /* who */ string name = 1;\n}"),
        {"BACKWARD": 1, "FORWARD": 1, "FULL": 1},
    ),
    ("add an enum value", proto(COLOR), proto("enum Color { RED = 0; GREEN = 1; BLUE = 2; }"), {"FULL": 1}),
    ("remove an enum value", proto(COLOR), proto("enum Color { RED = 0; }"), {"FULL": 1}),
    (
        "int32 to int64 (both varints)",
        proto(USER),
        proto("message User { string name = 1; int64 age = 2; }"),
        {"BACKWARD": 1, "FORWARD": 1, "FULL": 1},
    ),
    (
        "int32 to sint32 (zigzag)",
        proto(USER),
        proto("message User { string name = 1; sint32 age = 2; }"),
        {"BACKWARD": 0, "FORWARD": 0, "FULL": 0},
    ),
    (
        "fixed32 to sfixed32",
        proto("message M { fixed32 a = 1; }"),
        proto("message M { sfixed32 a = 1; }"),
        {"FULL": 1},
    ),
    (
        "float to double",
        proto("message M { float a = 1; }"),
        proto("message M { double a = 1; }"),
        {"BACKWARD": 0, "FORWARD": 0},
    ),
    (
        "string to bytes",
        proto(USER),
        proto("message User { bytes name = 1; int32 age = 2; }"),
        {"BACKWARD": 1, "FORWARD": 1, "FULL": 1},
    ),
    (
        "int32 to string",
        proto(USER),
        proto("message User { string name = 1; string age = 2; }"),
        {"BACKWARD": 0, "FORWARD": 0, "FULL": 0},
    ),
    (
        "an enum field to int32",
        proto(f"{COLOR} message M {{ Color c = 1; }}"),
        proto(f"{COLOR} message M {{ int32 c = 1; }}"),
        {"FULL": 1},
    ),
    (
        "a scalar field to a message",
        proto(f"{ADDRESS} message User {{ string home = 1; }}"),
        proto(f"{ADDRESS} message User {{ Address home = 1; }}"),
        {"BACKWARD": 0, "FORWARD": 0},
    ),
    (
        "a message field to another message type",
        proto(f"{ADDRESS} message Place {{ string street = 1; }} message User {{ Address home = 1; }}"),
        proto(f"{ADDRESS} message Place {{ string street = 1; }} message User {{ Place home = 1; }}"),
        {"BACKWARD": 0, "FORWARD": 0},
    ),
    (
        "change a field of a message used by a field",
        proto(f"message User {{ Address home = 1; }} {ADDRESS}"),
        proto("message User { Address home = 1; } message Address { int64 street = 1; }"),
        {"BACKWARD": 0, "FORWARD": 0},
    ),
    ("change the package", proto(USER), proto(USER, package="other"), {"NONE": 1, "BACKWARD": 0, "FORWARD": 0}),
    ("remove a message", proto(f"{USER} {ADDRESS}"), proto(USER), {"BACKWARD": 0, "FORWARD": 1, "FULL": 0}),
    ("add a message", proto(USER), proto(f"{USER} {ADDRESS}"), {"BACKWARD": 1, "FORWARD": 0, "FULL": 0}),
    ("move the first message", proto(f"{USER} {ADDRESS}"), proto(f"{ADDRESS} {USER}"), {"FULL": 1}),
    ("add an enum", proto(USER), proto(f"{USER} {COLOR}"), {"FULL": 1}),
    (
        "add a required field",
        proto("message M { optional string a = 1; }", syntax="proto2"),
        proto("message M { optional string a = 1; required int32 b = 2; }", syntax="proto2"),
        {"BACKWARD": 0, "FORWARD": 0, "FULL": 0},
    ),
    (
        "remove a required field",
        proto("message M { optional string a = 1; required int32 b = 2; }", syntax="proto2"),
        proto("message M { optional string a = 1; }", syntax="proto2"),
        {"BACKWARD": 0, "FORWARD": 0},
    ),
    (
        "make an optional field required",
        proto("message M { optional string a = 1; }", syntax="proto2"),
        proto("message M { required string a = 1; }", syntax="proto2"),
        {"BACKWARD": 0, "FORWARD": 1, "FULL": 0},
    ),
    (
        "make a numeric field repeated",
        proto(USER),
        proto("message User { string name = 1; repeated int32 age = 2; }"),
        {"BACKWARD": 0, "FORWARD": 0},
    ),
    (
        "make a string field repeated",
        proto(USER),
        proto("message User { repeated string name = 1; int32 age = 2; }"),
        {"FULL": 1},
    ),
    (
        "make a message field repeated",
        proto(f"{ADDRESS} message User {{ Address home = 1; }}"),
        proto(f"{ADDRESS} message User {{ repeated Address home = 1; }}"),
        {"FULL": 1},
    ),
    (
        "make a field proto3 optional",
        proto(USER),
        proto("message User { optional string name = 1; int32 age = 2; }"),
        {"FULL": 1},
    ),
    (
        "move one field into a new oneof",
        proto(USER),
        proto("message User { oneof id { string name = 1; } int32 age = 2; }"),
        {"FULL": 1},
    ),
    (
        "move two fields into a new oneof",
        proto(USER),
        proto("message User { oneof id { string name = 1; int32 age = 2; } }"),
        {"BACKWARD": 0, "FORWARD": 1, "FULL": 0},
    ),
    (
        "move a field into an existing oneof",
        proto("message User { oneof id { string name = 1; } int32 age = 2; }"),
        proto("message User { oneof id { string name = 1; int32 age = 2; } }"),
        {"BACKWARD": 0, "FORWARD": 1},
    ),
    (
        "remove a oneof's field",
        proto("message User { oneof id { string name = 1; int32 age = 2; } }"),
        proto("message User { oneof id { string name = 1; } }"),
        {"BACKWARD": 0, "FORWARD": 1, "FULL": 0},
    ),
    (
        "add a field to a oneof",
        proto("message User { oneof id { string name = 1; } }"),
        proto("message User { oneof id { string name = 1; int32 age = 3; } }"),
        {"BACKWARD": 1, "FORWARD": 0, "FULL": 0},  # old readers would see the oneof unset
    ),
    (
        "change a map's value type",
        proto("message M { map<string, int32> counts = 1; }"),
        proto("message M { map<string, string> counts = 1; }"),
        {"BACKWARD": 0, "FORWARD": 0},
    ),
    (
        "widen a map's value within its group",
        proto("message M { map<string, int32> counts = 1; }"),
        proto("message M { map<string, uint64> counts = 1; }"),
        {"FULL": 1},
    ),
    (
        "a map to a repeated message",
        proto("message M { map<string, int32> counts = 1; }"),
        proto("message M { repeated E counts = 1; message E { string key = 1; int32 value = 2; } }"),
        {"BACKWARD": 0, "FORWARD": 0},
    ),
    ("anything, unchecked", proto(USER), proto("message User { bytes age = 2; }", package="x"), {"NONE": 1}),
]


@pytest.mark.parametrize(("change", "old", "new", "expected"), MATRIX, ids=[m[0] for m in MATRIX])
def test_the_confluent_matrix(change: str, old: str, new: str, expected: dict[str, int]) -> None:
    for level, ok in expected.items():
        assert allowed(level, new, old) is bool(ok), (
            change,
            level,
            problems(level, parse(new), [parse(old)], read_problems),
        )
        if level != "NONE":  # against one earlier version, transitive and not are the same
            assert allowed(f"{level}_TRANSITIVE", new, old) is bool(ok), (change, level)
    # The same verdicts whichever form the schemas come in.
    for level, ok in expected.items():
        assert allowed(level, serialized(parse(new)), serialized(parse(old))) is bool(ok), (change, level)


def test_transitive_levels_check_every_earlier_version() -> None:
    v1 = proto("message M { int32 a = 1; }")
    v2 = proto("message M { }")  # a removed
    v3 = proto("message M { string a = 1; }")  # its number reused, as a string
    assert allowed("BACKWARD", v2, v1) and allowed("BACKWARD", v3, v2)
    assert allowed("BACKWARD", v3, v1, v2)
    assert not allowed("BACKWARD_TRANSITIVE", v3, v1, v2)
    found = problems("BACKWARD_TRANSITIVE", parse(v3), [parse(v1), parse(v2)], read_problems)
    assert len(found) == 1 and "version 1" in found[0], found
    assert not allowed("FULL_TRANSITIVE", v3, v1, v2)


def test_problems_say_which_message_and_field() -> None:
    old = parse(proto("message User { message Address { string street = 1; } Address home = 1; int32 age = 2; }"))
    new = parse(proto("message User { message Address { int32 street = 1; } Address home = 1; string age = 2; }"))
    found = read_problems(new, old)
    assert "User.age (2): int32 cannot be read as string" in found
    assert "User.Address.street (1): string cannot be read as int32" in found
    assert any("User.home (1)" in p and "User.Address" in p for p in found), found
    assert read_problems(parse(proto(USER, package="b")), parse(proto(USER))) == [
        "the package changed from 'acme' to 'b'"
    ]
    assert read_problems(parse(proto(USER)), parse(proto(f"{USER} {ADDRESS}"))) == [
        "message Address was removed: the reader lacks it"
    ]


def test_recursive_messages_compare_and_end() -> None:
    tree = proto("message Node { int32 value = 1; repeated Node children = 2; }")
    wider = proto("message Node { int64 value = 1; repeated Node children = 2; }")
    narrower = proto("message Node { string value = 1; repeated Node children = 2; }")
    assert not read_problems(parse(wider), parse(tree))
    assert read_problems(parse(narrower), parse(tree))


RICH = """
syntax = "proto3";
package acme.v1;

import "google/protobuf/timestamp.proto";
option java_package = "com.acme.v1";

// Someone.
message User {
  string name = 1 [json_name = "fullName", deprecated = true];
  optional int32 age = 2;
  repeated int64 ids = 3 [packed = true];
  map<string, Address> homes = 4;
  oneof contact {
    string email = 5;
    string phone = 6;
  }
  google.protobuf.Timestamp created = 7;
  Color color = 8;
  reserved 9, 11 to 13, 100 to max;
  reserved "old";
  message Address { string street = 1; }
}

enum Color {
  option allow_alias = true;
  RED = 0;
  CRIMSON = 0;
  GREEN = 1 [deprecated = true];
  reserved 5 to 7;
  reserved "BLUE";
}

service Users {
  rpc Get (User) returns (stream User);
}
"""


def test_the_descriptor_is_what_protoc_would_build() -> None:
    d = parse(RICH).descriptor
    assert (d.syntax, d.package, list(d.dependency)) == ("proto3", "acme.v1", ["google/protobuf/timestamp.proto"])
    user = d.message_type[0]
    by_name = {f.name: f for f in user.field}
    F = descriptor_pb2.FieldDescriptorProto
    assert by_name["homes"].type_name == ".acme.v1.User.HomesEntry"
    assert (by_name["homes"].label, by_name["homes"].type) == (F.LABEL_REPEATED, F.TYPE_MESSAGE)
    entry = next(n for n in user.nested_type if n.name == "HomesEntry")
    assert entry.options.map_entry and [f.name for f in entry.field] == ["key", "value"]
    assert entry.field[1].type_name == ".acme.v1.User.Address"
    assert by_name["created"].type_name == ".google.protobuf.Timestamp"
    assert (by_name["color"].type, by_name["color"].type_name) == (F.TYPE_ENUM, ".acme.v1.Color")
    assert by_name["email"].oneof_index == by_name["phone"].oneof_index == 0
    assert by_name["age"].proto3_optional and user.oneof_decl[by_name["age"].oneof_index].name == "_age"
    assert by_name["name"].json_name == "fullName" and by_name["name"].options.deprecated
    assert by_name["ids"].options.packed
    assert [(r.start, r.end) for r in user.reserved_range] == [(9, 10), (11, 14), (100, 536870912)]
    assert list(user.reserved_name) == ["old"]
    assert d.enum_type[0].options.allow_alias and [(r.start, r.end) for r in d.enum_type[0].reserved_range] == [(5, 7)]
    assert d.service[0].method[0].server_streaming and d.service[0].method[0].input_type == ".acme.v1.User"
    assert d.options.java_package == "com.acme.v1"


def test_proto2_labels_defaults_and_extensions() -> None:
    text = r"""
        syntax = "proto2";
        package p;
        message A {
          required string s = 1 [default = "a\"b\n"];
          optional bytes b = 2 [default = "\001x"];
          optional double d = 3 [default = -inf];
          optional E e = 4 [default = Y];
          repeated int32 many = 5 [packed = true];
          extensions 100 to 199;
        }
        enum E { X = 1; Y = 2; }
        extend A { optional int32 more = 100; }
    """
    d = parse(text).descriptor
    fields = {f.name: f for f in d.message_type[0].field}
    assert fields["s"].default_value == 'a"b\n' and fields["b"].default_value == "\\001x"
    assert fields["d"].default_value == "-inf" and fields["e"].default_value == "Y"
    assert d.extension[0].extendee == ".p.A" and d.extension[0].number == 100
    assert canonical_form(text_of(parse(text))) == canonical_form(text)


def test_the_canonical_form_is_the_same_for_text_and_descriptor_whatever_the_layout() -> None:
    canonical = canonical_form(RICH)
    assert canonical == text_of(parse(RICH))
    assert canonical_form(serialized(parse(RICH))) == canonical
    squeezed = " ".join(line.split("//")[0] for line in RICH.splitlines())
    assert canonical_form("/* a header */" + squeezed) == canonical
    assert canonical_form(canonical) == canonical
    assert "message User {" in canonical and "map<string, .acme.v1.User.Address> homes = 4;" in canonical
    assert "optional int32 age = 2;" in canonical and "oneof contact {" in canonical


def test_serialized_loads_into_the_protobuf_runtime() -> None:
    schema = parse(RICH)
    pool = descriptor_pool.DescriptorPool()
    for dependency in schema.dependencies.values():
        pool.Add(dependency)
    file = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized(schema)))
    pool.Add(file)
    user_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("acme.v1.User"))
    user = user_class(name="Ada", age=36, ids=[1, 2], email="ada@example.org", color=1)
    user.homes["home"].street = "Main St"
    user.created.seconds = 1_700_000_000
    again = user_class.FromString(user.SerializeToString())
    assert again == user and again.homes["home"].street == "Main St"
    assert again.HasField("age") and again.WhichOneof("contact") == "email"


def confluent_registered() -> tuple[str, Any]:
    """A schema as confluent-kafka's ProtobufSerializer registers it: the base64 of the generated module's
    serialized FileDescriptorProto (``_schema_to_str``), its imports as references by file name."""
    file = descriptor_pb2.FileDescriptorProto(name="orders/order.proto", package="orders", syntax="proto3")
    file.dependency.append("google/protobuf/timestamp.proto")
    order = file.message_type.add(name="Order")
    F = descriptor_pb2.FieldDescriptorProto
    order.field.add(name="id", number=1, label=F.LABEL_OPTIONAL, type=F.TYPE_STRING, json_name="id")
    order.field.add(name="cents", number=2, label=F.LABEL_OPTIONAL, type=F.TYPE_INT64, json_name="cents")
    order.field.add(
        name="placed_at",
        number=3,
        label=F.LABEL_OPTIONAL,
        type=F.TYPE_MESSAGE,
        type_name=".google.protobuf.Timestamp",
        json_name="placedAt",
    )
    order.field.add(name="lines", number=4, label=F.LABEL_REPEATED, type=F.TYPE_MESSAGE, type_name=".orders.Line")
    line = file.message_type.add(name="Line")
    line.field.add(name="sku", number=1, label=F.LABEL_OPTIONAL, type=F.TYPE_STRING)
    return base64.b64encode(file.SerializeToString()).decode(), file


def test_a_schema_as_confluent_kafka_registers_it() -> None:
    registered, file = confluent_registered()
    schema = parse(registered)
    assert schema.descriptor.name == "orders/order.proto"
    assert [m.name for m in schema.descriptor.message_type] == ["Order", "Line"]
    as_text = """syntax = "proto3"; package orders; import "google/protobuf/timestamp.proto";
        message Order { string id = 1; int64 cents = 2; google.protobuf.Timestamp placed_at = 3;
                        repeated Line lines = 4; }
        message Line { string sku = 1; }"""
    assert canonical_form(registered) == canonical_form(as_text)
    assert not read_problems(parse(as_text), schema) and not read_problems(schema, parse(as_text))
    wrapped = "\n".join(registered[i : i + 76] for i in range(0, len(registered), 76))  # as base64 tools wrap it
    assert canonical_form(wrapped) == canonical_form(registered)
    # Answered as text by default: that text parses to the same schema.
    assert canonical_form(text_of(schema)) == canonical_form(registered)
    del file.dependency[:]
    with pytest.raises(SchemaError, match="Timestamp"):
        parse(base64.b64encode(file.SerializeToString()).decode())  # the import it needs, missing


def test_imports_resolve_through_references_and_well_known_types() -> None:
    money = 'syntax = "proto3"; package money; message Amount { int64 cents = 1; string currency = 2; }'
    shared = 'syntax = "proto3"; package shared; import public "money.proto"; enum Tier { FREE = 0; PAID = 1; }'
    main = """syntax = "proto3"; package shop;
        import "shared.proto";
        import "google/protobuf/timestamp.proto";
        import "google/protobuf/wrappers.proto";
        message Cart { shared.Tier tier = 1; .money.Amount total = 2; money.Amount tax = 3;
                       google.protobuf.Timestamp at = 4; google.protobuf.StringValue note = 5; }"""
    references = {"shared.proto": shared, "money.proto": money}
    schema = parse(main, references)
    types = {f.name: f.type_name for f in schema.descriptor.message_type[0].field}
    assert types == {
        "tier": ".shared.Tier",
        "total": ".money.Amount",
        "tax": ".money.Amount",
        "at": ".google.protobuf.Timestamp",
        "note": ".google.protobuf.StringValue",
    }
    assert list(schema.dependencies)[:2] == ["money.proto", "shared.proto"]  # dependencies first
    # A reference may itself be a base64 descriptor.
    as_descriptor = {"shared.proto": shared, "money.proto": serialized(parse(money))}
    assert canonical_form(main, as_descriptor) == canonical_form(main, references)
    # A changed referenced message is compared through the field that uses it.
    changed = {**references, "money.proto": money.replace("int64 cents", "string cents")}
    found = read_problems(parse(main, changed), schema)
    assert any("Cart.total (2)" in p for p in found) and any("Amount.cents (1)" in p for p in found), found
    with pytest.raises(SchemaError, match=r"shared\.proto"):
        parse(main, {"money.proto": money})
    with pytest.raises(SchemaError, match=r"line 5: unknown type '\.money\.Amount'"):  # no longer imported publicly
        parse(main, references | {"shared.proto": shared.replace("public ", "")})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (proto("message M { int32 a = 1 }"), "line 3: expected ';'"),
        ('syntax = "proto3";\n\nmessage M {\n  int32 a = 1;\n  int32 b = 1;\n}', "line 5: .*number 1 is already used"),
        (proto("message M {\n  Missing a = 1;\n}"), "line 4: unknown type 'Missing'"),
        (proto('import "nowhere.proto";\nmessage M { int32 a = 1; }'), "nowhere.proto"),
        ('syntax = "proto4";', "syntax"),
        (proto("message M { int32 a = 1; string a = 2; }"), "declared twice"),
        (proto("message M { required int32 a = 1; }"), "no required"),
        (proto("message M { int32 a = 0; }"), "out of range"),
        (proto("message M { int32 a = 09; }"), "not a number"),
        (proto("message M { int32 a = 19000; }"), "out of range"),
        (proto("message M { int32 a = 2; reserved 2; }"), "reserved"),
        (proto('message M { int32 a = 2; reserved "a"; }'), "reserved"),
        (proto("message M { map<double, string> m = 1; }"), "key"),
        (proto("enum E { A = 1; }"), "must be 0"),
        (proto("enum E { A = 0; B = 0; }"), "allow_alias"),
        (proto("message M {} message M {}"), "defined twice"),
        (proto("message M { int32 a = 1 [packd = true]; }"), "unknown option"),
        (proto("message M { int32 a = 1; /* unterminated }"), "line 3"),
        (proto("message M { int32 a = 1;", syntax="proto2"), "label"),
        (proto("message M { optional int32 a = 1;"), "expected '}'"),
        (proto('message M { string s = 1 [default = "x"]; }'), "default"),
        (proto("message M { optional group G = 1 { } }", syntax="proto2"), "groups"),
        ("bm90IGEgZGVzY3JpcHRvcg==", "line 1"),  # base64, but not of a descriptor: read as (bad) text
    ],
)
def test_what_is_not_protobuf_says_why(text: str, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        parse(text)


def test_options_comments_strings_and_services_parse() -> None:
    text = r"""
        syntax = "proto3";  // trailing
        package a.b;
        import weak "google/protobuf/empty.proto";
        option go_package = "example.com/a" "/b";
        option optimize_for = SPEED;
        option (my.custom).thing = { deep: { x: 1 } };
        message M {
          option deprecated = true;
          string s = 1 [(custom) = "dropped", json_name = 'é\x41\u00e9'];
          reserved "x", "y";
          enum Inner { option deprecated = true; ZERO = 0; MINUS = -1; }
          Inner inner = 2;
          repeated .a.b.M children = 3;
          ;
        }
        service S {
          option deprecated = true;
          rpc Ping (google.protobuf.Empty) returns (M) { option deprecated = true; }
          rpc Stream (stream M) returns (stream M);
        }
    """
    schema = parse(text)
    d = schema.descriptor
    assert d.options.go_package == "example.com/a/b" and d.options.optimize_for == d.options.SPEED
    assert list(d.weak_dependency) == [0]
    assert d.message_type[0].field[0].json_name == "éAé"
    assert d.message_type[0].field[1].type_name == ".a.b.M.Inner"
    assert d.service[0].method[1].client_streaming and d.service[0].method[1].server_streaming
    assert d.service[0].method[0].input_type == ".google.protobuf.Empty"
    assert canonical_form(text_of(schema)) == text_of(schema)


# Generated schemas: one message of scalar, enum, nested-message, map and oneof fields, in proto2 or proto3.
_SCALAR = st.sampled_from(["int32", "int64", "uint32", "sint64", "fixed32", "sfixed64", "bool", "string", "bytes"])
# Unique by their JSON names too, as protoc requires: "a_" and "a" are both "a" in JSON.
_NAMES = st.lists(
    st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True),
    min_size=1,
    max_size=6,
    unique_by=lambda name: name.replace("_", "").lower(),
)


@st.composite
def schemas(draw: st.DrawFn) -> str:
    syntax = draw(st.sampled_from(["proto2", "proto3"]))
    names = draw(_NAMES)
    numbers = draw(st.lists(st.integers(1, 2000), min_size=len(names), max_size=len(names), unique=True))
    labels = ["optional", "repeated"] + (["required"] if syntax == "proto2" else ["", ""])
    lines, oneof = [], []
    for name, number in zip(names, numbers, strict=True):
        kind = draw(st.one_of(_SCALAR, st.sampled_from(["Color", "Inner", "map<string, Inner>", "oneof"])))
        if kind == "oneof":
            oneof.append(f"{draw(_SCALAR)} {name} = {number};")
        elif kind.startswith("map"):
            lines.append(f"{kind} {name} = {number};")
        else:
            lines.append(f"{draw(st.sampled_from(labels))} {kind} {name} = {number};".strip())
    if oneof:
        lines.append("oneof choice { " + " ".join(oneof) + " }")
    comment = draw(st.sampled_from(["", "// note\n", "/* note */ "]))
    return (
        f'syntax = "{syntax}";\npackage gen;\n{comment}enum Color {{ RED = 0; GREEN = 1; }}\n'
        f"message Outer {{\n  message Inner {{ optional string s = 1; }}\n  " + "\n  ".join(lines) + "\n}\n"
    )


@settings(max_examples=60, deadline=None)
@given(schemas())
def test_a_schema_reads_itself_and_keeps_its_canonical_form(text: str) -> None:
    schema = parse(text)
    for level in LEVELS:
        assert not problems(level, schema, [schema], read_problems)
    canonical = canonical_form(text)
    assert canonical_form(serialized(schema)) == canonical
    assert canonical_form(text_of(schema)) == canonical  # the rendered text is the same schema
    assert parse(serialized(schema)).descriptor == schema.descriptor
    assert isinstance(parse(canonical), ProtobufSchema)
