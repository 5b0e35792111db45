"""JSON Schema for the schema registry: parsing (checked against its draft's meta-schema, every ``$ref`` resolved), a
canonical form, and whether data valid under one schema is valid under another (which the compatibility levels use).

Pure: no I/O, no network. A ``$ref`` resolves within its document, to one of the schema's references (Confluent's
schema references, by name: "address.json", "https://acme.com/address.json", with or without a ``#/...`` fragment) or
to a draft's meta-schema; nothing is fetched. Drafts 4, 6, 7 (Confluent's default, so also ours), 2019-09, 2020-12.

The check asks whether the reader accepts every document the writer accepts, following Confluent's JSON Schema
compatibility (docs.confluent.io "Schema Evolution and Compatibility"; the "Understanding JSON Schema Compatibility"
post on open and closed content models; JsonSchemaDiff's kinds of difference):
- type: the reader's types hold the writer's ("integer" is read as "number"; no type is every type);
- a writer with a finite set of values (enum, const, only null and booleans) is checked value by value, exactly;
  otherwise a reader's enum or const is a problem;
- numbers: the reader's minimum, maximum, exclusive bounds and multipleOf no tighter than the writer's; strings:
  minLength and maxLength, and a pattern or format the writer does not have is a problem; arrays: minItems, maxItems,
  uniqueItems, and each position (tuples: items as a list, prefixItems) checked in turn;
- objects, property by property: each property's schema is its ``properties`` entry, else its matching
  patternProperties, else additionalProperties. So a property added to the reader while the writer's content model
  is open is a problem (the writer may have written it with any value; Confluent's
  PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL) unless the new schema accepts anything; adding it against a closed writer is
  fine; a property removed from the reader is fine while the reader's model is open and a problem when it is closed
  (PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL). The reader may not require a property the writer does not require
  (stricter than Confluent, which lets a required property in if it has a default: the data still lacks it);
- combinations: each writer anyOf/oneOf branch must be read by some reader branch (for a reader oneOf, the others
  must be disjoint from it: another branch of the writer's oneOf, other types, or another value of a property both
  require); allOf: the writer's branches narrow it, the reader's must each accept it; ``$ref`` followed, guarded
  against cycles; ``true`` accepts everything, ``false`` nothing;
- a reader's not is fine if the writer's own not excludes as much, or the writer never writes those types; what
  cannot be decided (if/then/else, contains, propertyNames, unevaluated*, dependent schemas, dynamic refs) is a
  problem unless the writer has the very same keyword and value there. The writer's own such keywords only narrow
  it, so they are left aside (conservatively).

Validation against the meta-schemas and of single values is the ``jsonschema`` package's; ``$ref``s are resolved
by its ``referencing`` package, from a registry holding only this schema, its references and the meta-schemas.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

import jsonschema  # type: ignore[import-untyped]
from jsonschema_specifications import REGISTRY as META_SCHEMAS  # type: ignore[import-untyped]
from referencing import Registry, Resource, Specification
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT4, DRAFT6, DRAFT7, DRAFT201909, DRAFT202012

from server.schemas.errors import SchemaError

if TYPE_CHECKING:
    from referencing._core import Resolver

__all__ = ["JsonSchema", "SchemaError", "canonical_form", "parse", "read_problems"]

# $schema (scheme and trailing "#" aside) to its validator and its referencing specification.
_DRAFTS: dict[str, tuple[Any, Specification[Any]]] = {
    "json-schema.org/draft-04/schema": (jsonschema.Draft4Validator, DRAFT4),
    "json-schema.org/draft-06/schema": (jsonschema.Draft6Validator, DRAFT6),
    "json-schema.org/draft-07/schema": (jsonschema.Draft7Validator, DRAFT7),
    "json-schema.org/draft/2019-09/schema": (jsonschema.Draft201909Validator, DRAFT201909),
    "json-schema.org/draft/2020-12/schema": (jsonschema.Draft202012Validator, DRAFT202012),
}
_DEFAULT_DRAFT = "json-schema.org/draft-07/schema"
_VALIDATORS = {id(spec): validator for validator, spec in _DRAFTS.values()}
_TYPES = frozenset({"null", "boolean", "object", "array", "string", "number", "integer"})
# A reader's keywords this check cannot compare by meaning: the writer must have the same one, with the same value.
# The type they apply to (None: any), so that a reader's keyword for a type the writer never writes is no problem.
_OPAQUE: dict[str, str | None] = {
    **dict.fromkeys(("if", "then", "else", "$dynamicRef", "$recursiveRef")),
    **dict.fromkeys(("pattern", "format"), "string"),
    **dict.fromkeys(("contains", "minContains", "maxContains", "unevaluatedItems"), "array"),
    **dict.fromkeys(("propertyNames", "dependentSchemas", "unevaluatedProperties"), "object"),
}


@dataclass(frozen=True, eq=False)
class JsonSchema:
    """A parsed schema: its document and what resolves its ``$ref``s (itself, its references, nothing else)."""

    document: Any  # a dict or a bool
    resolver: Resolver[Any] = field(repr=False)
    specification: Specification[Any] = field(repr=False)


@dataclass(frozen=True)
class _Node:
    """A (sub)schema where it stands: what its ``$ref``s resolve against, and the keywords already dealt with."""

    schema: Any
    resolver: Resolver[Any]
    spec: Specification[Any]
    done: frozenset[str] = frozenset()

    def child(self, sub: Any) -> _Node:
        # A subschema with its own $id is a new base for the $refs inside it.
        return _Node(sub, self.resolver.in_subresource(self.spec.create_resource(sub)), self.spec)

    def without(self, keyword: str) -> _Node:
        return replace(self, done=self.done | {keyword})

    def get(self, keyword: str, default: Any = None) -> Any:
        if keyword in self.done or not isinstance(self.schema, dict):
            return default
        return self.schema.get(keyword, default)

    def key(self) -> tuple[int, frozenset[str]]:
        return id(self.schema), self.done


def parse(text: str, references: Mapping[str, str] | None = None) -> JsonSchema:
    """The schema ``text`` (a JSON Schema document) is; :class:`SchemaError` saying what is wrong. ``references``:
    the texts of the schemas its ``$ref``s may name, by reference name."""
    document = _json(text)
    validator, spec = _draft(document, _DEFAULT_DRAFT)
    _validate(validator, document)
    named: list[tuple[str, Resource[Any]]] = []
    for name, referenced in (references or {}).items():
        try:
            ref_document = _json(referenced)
            ref_validator, ref_spec = _draft(ref_document, _dialect(spec))
            _validate(ref_validator, ref_document)
        except SchemaError as exc:
            raise SchemaError(f"reference {name}: {exc}") from None
        resource = ref_spec.create_resource(ref_document)
        named += [(name, resource)] + ([(resource.id() or "", resource)] if resource.id() else [])
    root = spec.create_resource(document)
    if root.id():  # a relative reference name is relative to the schema's own $id
        named += [(urljoin(root.id() or "", name), resource) for name, resource in named]
    # The meta-schemas are bundled; a registry without a retrieve function never goes to the network.
    registry: Registry[Any] = Registry().with_resources(named).combine(META_SCHEMAS)
    resolver = registry.resolver_with_root(root)
    _check_refs(root, resolver, "the schema")
    for name, resource in named:
        _check_refs(resource, registry.resolver(base_uri=resource.id() or name), f"reference {name}")
    return JsonSchema(document, resolver, spec)


def _json(text: str) -> Any:
    try:
        document = json.loads(text, parse_constant=_no_constant)
    except (ValueError, TypeError) as exc:
        raise SchemaError(f"not JSON: {exc}") from None
    if not isinstance(document, (dict, bool)):
        raise SchemaError(f"a JSON Schema is an object or a boolean, not {type(document).__name__}")
    return document


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _dialect(spec: Specification[Any]) -> str:
    return next(uri for uri, (_, known) in _DRAFTS.items() if known is spec)


def _draft(document: Any, default: str) -> tuple[Any, Specification[Any]]:
    uri = document.get("$schema") if isinstance(document, dict) else None
    if uri is None:
        return _DRAFTS[default]
    if not isinstance(uri, str) or uri.rstrip("#").partition("://")[2] not in _DRAFTS:
        raise SchemaError(f"$schema {uri!r}: expected draft-04, 06, 07, 2019-09 or 2020-12 of json-schema.org")
    return _DRAFTS[uri.rstrip("#").partition("://")[2]]


def _validate(validator: Any, document: Any) -> None:
    try:
        validator.check_schema(document)
    except jsonschema.exceptions.SchemaError as exc:
        where = "#" + "".join(f"/{_escape(str(p))}" for p in exc.absolute_path)
        raise SchemaError(f"not a valid JSON Schema ({validator.__name__}) at {where}: {exc.message}") from None


def _check_refs(resource: Resource[Any], resolver: Resolver[Any], what: str) -> None:
    ref = resource.contents.get("$ref") if isinstance(resource.contents, dict) else None
    if isinstance(ref, str):
        try:
            resolver.lookup(ref)
        except Unresolvable:
            raise SchemaError(
                f"{what}: $ref {ref!r} resolves neither within the schema nor to one of its references"
            ) from None
    for sub in resource.subresources():
        _check_refs(sub, resolver.in_subresource(sub), what)


def canonical_form(text: str, references: Mapping[str, str] | None = None) -> str:
    """The schema ``text`` as compact JSON with sorted keys: the same for documents that are the same JSON."""
    parse(text, references)  # only a valid schema has a canonical form
    return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def read_problems(reader: JsonSchema, writer: JsonSchema) -> list[str]:
    """Why a document valid under ``writer`` may not be valid under ``reader`` (empty: every one is), each with
    where it is."""
    checker = _Checker()
    checker.check(
        _Node(reader.document, reader.resolver, reader.specification),
        [_Node(writer.document, writer.resolver, writer.specification)],
        "#",
    )
    return list(dict.fromkeys(checker.found))


class _Checker:
    def __init__(self) -> None:
        self.found: list[str] = []
        self.seen: set[Any] = set()

    def trial(self, reader: _Node, writers: list[_Node], at: str, excluded: tuple[_Node, ...] = ()) -> list[str]:
        trial = _Checker()
        trial.seen = set(self.seen)
        trial.check(reader, writers, at, excluded)
        return trial.found

    def check(self, reader: _Node, writers: list[_Node], at: str, excluded: tuple[_Node, ...] = ()) -> None:
        """``excluded``: schemas the writer's data here is known not to match (the other branches of its oneOf)."""
        if reader.schema is True or not isinstance(reader.schema, (dict, bool)):
            return
        conj = _conjuncts(writers)
        if conj is None:  # the writer writes nothing here
            return
        for index, node in enumerate(conj):  # a writer union: each branch must be read
            for union in ("anyOf", "oneOf"):
                if isinstance(node.get(union), list):
                    others = [*conj[:index], node.without(union), *conj[index + 1 :]]
                    branches = node.get(union)
                    for taken, branch in enumerate(branches):
                        out = [node.child(b) for i, b in enumerate(branches) if i != taken and union == "oneOf"]
                        self.check(reader, [*others, node.child(branch)], at, (*excluded, *out))
                    return
        if reader.schema is False:
            self.found.append(f"{at}: the reader allows nothing here, the writer does")
            return
        key = (reader.key(), frozenset(n.key() for n in conj), frozenset(e.key() for e in excluded))
        if key in self.seen:  # being compared further up (a recursive schema): assumed to read, to end the recursion
            return
        self.seen.add(key)
        try:
            self.against(reader, conj, at, excluded)
        finally:
            self.seen.discard(key)

    def against(self, reader: _Node, conj: list[_Node], at: str, excluded: tuple[_Node, ...]) -> None:
        values = _finite(conj)
        if values is not None:  # exactly: each value the writer allows
            for value in values:
                if not _valid(reader, value):
                    self.found.append(f"{at}: the writer allows {json.dumps(value)}, the reader does not")
            return
        ref = reader.get("$ref")
        if isinstance(ref, str):
            self.check(_follow(reader, ref), conj, at, excluded)
            if reader.spec not in (DRAFT201909, DRAFT202012):  # before 2019-09, a $ref's siblings are ignored
                return
            reader = reader.without("$ref")
        for branch in reader.get("allOf", []):
            self.check(reader.child(branch), conj, at, excluded)
        for union in ("anyOf", "oneOf"):
            branches = [reader.child(b) for b in reader.get(union, [])]
            if branches and not any(
                not self.trial(b, conj, at, excluded)
                and (union == "anyOf" or all(_disjoint(o, conj, excluded, self.seen) for o in branches if o is not b))
                for b in branches
            ):
                self.found.append(f"{at}: no branch of the reader's {union} reads all the writer allows")
        self.keywords(reader, conj, at)

    def keywords(self, reader: _Node, conj: list[_Node], at: str) -> None:
        written = _types(conj)
        read = _types([reader])
        if written - read:
            self.found.append(f"{at}: the writer allows {_names(written)}, the reader only {_names(read)}")
        written &= read
        negated = reader.get("not")
        # Fine if the writer never writes what the reader excludes: it excludes as much itself, or other types.
        if negated is not None and not (
            _disjoint(reader.child(negated), conj, (), self.seen)
            or any("not" in w.schema and _reads(w.child(w.get("not")), reader.child(negated), self.seen) for w in conj)
        ):
            self.found.append(f"{at}: the reader's not excludes what the writer may allow")
        for keyword in ("enum", "const"):
            if keyword in reader.schema:
                self.found.append(f"{at}: the reader's {keyword} holds fewer values than the writer allows")
        for keyword, applies in _OPAQUE.items():
            if (
                keyword in reader.schema
                and (applies is None or applies in written)
                and not any(_same(reader.get(keyword), w.get(keyword)) for w in conj)
            ):
                self.found.append(f"{at}: the reader's {keyword} is not the writer's (it cannot be compared)")
        if written & {"number", "integer"}:
            self.numbers(reader, conj, at, written)
        if "string" in written:
            self.limit(reader, conj, at, "minLength", low=True)
            self.limit(reader, conj, at, "maxLength", low=False)
        if "array" in written:
            self.arrays(reader, conj, at)
        if "object" in written:
            self.objects(reader, conj, at)

    def limit(self, reader: _Node, conj: list[_Node], at: str, keyword: str, low: bool) -> None:
        mine = reader.get(keyword)
        if not _is_number(mine):
            return
        theirs = [w.get(keyword) for w in conj if _is_number(w.get(keyword))]
        if low:
            if mine > max(theirs, default=0):
                self.found.append(f"{at}: the reader's {keyword} {mine} is above the writer's {max(theirs, default=0)}")
        elif not theirs:
            self.found.append(f"{at}: the reader's {keyword} is {mine}, the writer has none")
        elif mine < min(theirs):
            self.found.append(f"{at}: the reader's {keyword} {mine} is below the writer's {min(theirs)}")

    def numbers(self, reader: _Node, conj: list[_Node], at: str, written: set[str]) -> None:
        for low, word in ((True, "lower"), (False, "upper")):
            mine, theirs = _bound([reader], low), _bound(conj, low)
            if mine is None:
                continue
            if theirs is None or (mine[0] > theirs[0] if low else mine[0] < theirs[0]):
                self.found.append(
                    f"{at}: the reader's {word} bound {mine[0]} is tighter than the writer's "
                    f"{'none' if theirs is None else theirs[0]}"
                )
            elif mine[0] == theirs[0] and mine[1] and not theirs[1]:
                self.found.append(f"{at}: the reader excludes its {word} bound {mine[0]}, the writer allows it")
        step = reader.get("multipleOf")
        if _is_number(step):
            divides = [w.get("multipleOf") for w in conj if _is_number(w.get("multipleOf"))]
            if written <= {"integer"}:
                divides.append(1)
            if not any(Decimal(str(d)) % Decimal(str(step)) == 0 for d in divides):
                self.found.append(f"{at}: the reader's multipleOf {step} is not a divisor of the writer's multiples")

    def arrays(self, reader: _Node, conj: list[_Node], at: str) -> None:
        self.limit(reader, conj, at, "minItems", low=True)
        self.limit(reader, conj, at, "maxItems", low=False)
        if reader.get("uniqueItems") is True and not any(w.get("uniqueItems") is True for w in conj):
            self.found.append(f"{at}: the reader wants unique items, the writer does not")
        most = min((w.get("maxItems") for w in conj if _is_number(w.get("maxItems"))), default=None)
        positions = max(len(_items(n)[0]) for n in [reader, *conj])
        tuple_word = "prefixItems" if reader.spec is DRAFT202012 else "items"
        for index in range(positions if most is None else min(positions, most)):
            self.check(_item(reader, index), [_item(w, index) for w in conj], f"{at}/{tuple_word}/{index}")
        if most is None or most > positions:
            where = "additionalItems" if isinstance(reader.get("items"), list) else "items"
            self.check(_item(reader, positions), [_item(w, positions) for w in conj], f"{at}/{where}")

    def objects(self, reader: _Node, conj: list[_Node], at: str) -> None:
        self.limit(reader, conj, at, "minProperties", low=True)
        self.limit(reader, conj, at, "maxProperties", low=False)
        required = {name for w in conj for name in w.get("required", [])}
        for name in reader.get("required", []):
            if name not in required:
                self.found.append(f"{at}/required: the reader requires {name!r}, the writer does not")
        for keyword in ("dependentRequired", "dependencies"):
            for name, needs in reader.get(keyword, {}).items():
                if isinstance(needs, list):
                    given = required | {
                        n
                        for w in conj
                        for k in ("dependentRequired", "dependencies")
                        for n in _list_of(w.get(k, {}).get(name))
                    }
                    if not set(needs) <= given:
                        self.found.append(f"{at}/{keyword}/{_escape(name)}: the reader needs more with {name!r}")
                elif not any(_same(needs, w.get(keyword, {}).get(name)) for w in conj):
                    self.found.append(f"{at}/{keyword}/{_escape(name)}: the reader's dependency is not the writer's")
        declared = {name for w in conj for name in w.get("properties", {})}
        for name in sorted(set(reader.get("properties", {})) | declared):
            where = f"{at}/properties/{_escape(name)}"
            theirs = [part for w in conj for part in _property(w, name)]
            for mine in _property(reader, name):
                found = self.trial(mine, theirs, where)
                if found and name not in declared and not theirs:
                    found = [
                        f"{where}: the reader adds {name!r}, which the writer's open content model may have "
                        "written with any value (close the writer's model: additionalProperties false)"
                    ]
                elif found and mine.schema is False and name not in reader.get("properties", {}):
                    found = [f"{where}: the writer's {name!r} is not in the reader, whose content model is closed"]
                self.found += found
        patterns = reader.get("patternProperties", {})
        for pattern, sub in patterns.items():
            theirs = []
            for w in conj:
                if pattern in w.get("patternProperties", {}):
                    theirs.append(w.child(w.get("patternProperties")[pattern]))
                elif not w.get("patternProperties") and "additionalProperties" in w.schema:
                    theirs.append(w.child(w.get("additionalProperties")))
            self.check(reader.child(sub), theirs, f"{at}/patternProperties/{_escape(pattern)}")
        if "additionalProperties" in reader.schema:
            # A name neither declares goes to the writer's additionalProperties if it matches no writer pattern.
            theirs = [
                w.child(w.get("additionalProperties"))
                for w in conj
                if "additionalProperties" in w.schema and set(w.get("patternProperties", {})) <= set(patterns)
            ]
            mine = reader.child(reader.get("additionalProperties"))
            if mine.schema is False and _conjuncts(theirs) is not None:
                self.found.append(f"{at}/additionalProperties: the reader's content model is closed, the writer's open")
            else:
                self.check(mine, theirs, f"{at}/additionalProperties")


def _conjuncts(writers: Iterable[_Node]) -> list[_Node] | None:
    """The writer's schemas here, all of which its data matches ($refs followed, allOf spread); None if it has no
    data here (a ``false``)."""
    found: list[_Node] = []
    visited: set[Any] = set()
    stack = list(writers)
    while stack:
        node = stack.pop()
        if node.schema is False:
            return None
        if not isinstance(node.schema, dict) or node.key() in visited:
            continue
        visited.add(node.key())
        ref = node.get("$ref")
        if isinstance(ref, str):
            stack.append(_follow(node, ref))
            if node.spec not in (DRAFT201909, DRAFT202012):
                continue
        stack += [node.child(branch) for branch in node.get("allOf", [])]
        found.append(node.without("$ref").without("allOf"))
    return found


def _follow(node: _Node, ref: str) -> _Node:
    resolved = node.resolver.lookup(ref)  # parse saw that every $ref resolves
    return _Node(resolved.contents, resolved.resolver, node.spec)


def _finite(conj: list[_Node]) -> list[Any] | None:
    """Every value the writer allows, if they are few; else None."""
    candidates: list[Any] | None = None
    for node in conj:
        if isinstance(node.schema, dict) and "const" in node.schema:
            candidates = [node.schema["const"]]
        elif isinstance(node.get("enum"), list):
            candidates = node.schema["enum"]
    if candidates is None and _types(conj) <= {"null", "boolean"}:
        candidates = [None, False, True]
    return None if candidates is None else [v for v in candidates if all(_valid(n, v) for n in conj)]


def _valid(node: _Node, value: Any) -> bool:
    return bool(_VALIDATORS[id(node.spec)](node.schema, _resolver=node.resolver).is_valid(value))


def _reads(reader: _Node, writer: _Node, seen: set[Any]) -> bool:
    checker = _Checker()
    checker.seen = set(seen)  # the comparisons under way go on being assumed, so that a recursion ends
    checker.check(reader, [writer], "#")
    return not checker.found


def _disjoint(branch: _Node, conj: list[_Node], excluded: tuple[_Node, ...], seen: set[Any]) -> bool:
    """Whether no data of the writer's matches ``branch`` (so a reader's oneOf cannot match it twice), as far as
    cheaply told: a branch the writer's own oneOf excluded, other types, or a property both require with other
    values (a discriminator)."""
    if any(_reads(other, branch, seen) for other in excluded):  # inside a branch the writer's data is not in
        return True
    while isinstance(branch.get("$ref"), str):
        branch = _follow(branch, branch.get("$ref"))
    mine = _conjuncts([branch])
    if mine is None or not (_types(mine) & _types(conj)):
        return True
    both = {n for w in mine for n in w.get("required", [])} & {n for w in conj for n in w.get("required", [])}
    for name in both:
        ours = _conjuncts([p for w in mine for p in _property(w, name)])
        their = _conjuncts([p for w in conj for p in _property(w, name)])
        if ours is None or their is None:  # a property required and never allowed: no data at all
            return True
        values, theirs = _finite(ours), _finite(their)
        if values is not None and theirs is not None and not {_dump(v) for v in values} & {_dump(v) for v in theirs}:
            return True
    return False


def _types(nodes: list[_Node]) -> set[str]:
    """The JSON types all of ``nodes`` allow ("number" with "integer" in it)."""
    allowed = set(_TYPES)
    for node in nodes:
        kind = node.get("type")
        if kind is not None:
            named = set(_list(kind))
            allowed &= named | ({"integer"} if "number" in named else set())
    return allowed


def _bound(nodes: list[_Node], low: bool) -> tuple[float, bool] | None:
    """The tightest lower (or upper) bound of ``nodes``: its value, and whether it is excluded."""
    bounds: list[tuple[float, bool]] = []
    for node in nodes:
        inclusive = node.get("minimum" if low else "maximum")
        exclusive = node.get("exclusiveMinimum" if low else "exclusiveMaximum")
        if _is_number(inclusive):
            bounds.append((inclusive, exclusive is True))  # draft-04: exclusiveMinimum is a flag on minimum
        if _is_number(exclusive):
            bounds.append((exclusive, True))
    if not bounds:
        return None
    return max(bounds) if low else min(bounds, key=lambda b: (b[0], not b[1]))


def _items(node: _Node) -> tuple[list[Any], Any]:
    """An array's schemas for its first positions (a tuple), and for the rest."""
    if node.spec is DRAFT202012:
        return node.get("prefixItems", []), node.get("items", True)
    items = node.get("items", True)
    return (items, node.get("additionalItems", True)) if isinstance(items, list) else ([], items)


def _item(node: _Node, index: int) -> _Node:
    prefix, rest = _items(node)
    return node.child(prefix[index] if index < len(prefix) else rest)


def _property(node: _Node, name: str) -> list[_Node]:
    """The schemas a property of this name matches in ``node`` (none: anything goes)."""
    if not isinstance(node.schema, dict):
        return [node] if node.schema is False else []
    found = [node.child(node.get("properties", {})[name])] if name in node.get("properties", {}) else []
    for pattern, sub in node.get("patternProperties", {}).items():
        try:
            if re.search(pattern, name):
                found.append(node.child(sub))
        except re.error:  # an ECMA 262 pattern Python's re cannot take: it may match
            found.append(node.child(sub))
    if not found and "additionalProperties" in node.schema:
        found.append(node.child(node.get("additionalProperties")))
    return found


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [] if value is None else [value]


def _list_of(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _same(a: Any, b: Any) -> bool:
    return _dump(a) == _dump(b)


def _names(types: set[str]) -> str:
    if types == _TYPES:
        return "any type"
    shown = sorted(types - {"integer"} if "number" in types else types)
    return " or ".join(shown) or "nothing"


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")
