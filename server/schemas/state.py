"""What the schema registry holds, and every change a request makes to it, as records of ``__schemas`` (pure: no
I/O, so every rule is unit-tested without a server).

The coordinator (``server.schemas.coordinator``) keeps one :class:`Registry` in memory, folded from the topic when
it takes the partition over, and turns each request into records through the functions here; the records are
made durable first, then applied to the state with :meth:`Registry.apply` — the same function the fold uses, so a
coordinator that takes over sees exactly what the previous one acknowledged.

Records (key and value JSON; the newest record of a key wins, so the topic is compacted):

- ``["schema", id]`` → ``{"tenant", "type", "schema", "references"}``: a schema by id; null once no version
  names it (hard deletes).
- ``["next-id"]`` → ``{"next"}``: the lowest id never given, so no id is given twice, whatever was deleted.
- ``["version", tenant, subject, version]`` → ``{"id", "deleted"}``; null once hard-deleted.
- ``["config", tenant, subject]`` → ``{"compatibility"}`` (subject ``""``: the tenant's global level); null: unset.
- ``["mode", tenant, subject]`` → ``{"mode"}``; null: unset.

Tenants: every subject is kept under the tenant that owns it (None with auth off, or for the admin's own).
An id belongs to one tenant: the same schema registered by two tenants gets two ids, so an id tells no tenant
what another registered.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from server.schemas.compatibility import DEFAULT_LEVEL, LEVELS, problems
from server.schemas.errors import SchemaError
from server.schemas.formats import FORMATS, Format, ParsedSchema

__all__ = [
    "MODES",
    "Reference",
    "Registry",
    "RegistryError",
    "SchemaRecord",
    "Version",
    "decode_key",
    "record",
]

MODES: Final = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
DEFAULT_MODE: Final = "READWRITE"
MAX_SUBJECT: Final = 255
# What one tenant may keep, so that no tenant fills the coordinator's memory (every schema is held there): the
# registry refuses more until some are deleted permanently.
MAX_SCHEMA_BYTES: Final = 1024 * 1024
MAX_SCHEMAS_PER_TENANT: Final = 10_000
MAX_VERSIONS_PER_TENANT: Final = 50_000
MAX_ID: Final = 2**31 - 1  # ids and versions are 4-byte signed in Confluent's framing and its Java client


class RegistryError(Exception):
    """A refusal with Confluent's error code (``status``: its HTTP status; ``code``: ``error_code``)."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(subject: str, version: object) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found for subject '{subject}'.")


def schema_not_found(what: str = "Schema not found") -> RegistryError:
    return RegistryError(404, 40403, what)


@dataclass(frozen=True, slots=True)
class Reference:
    """A schema's use of another registered one: ``name`` as the schema names it (an import path, a ``$ref``,
    a type name), the subject and version it is registered under."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True, slots=True)
class SchemaRecord:
    id: int
    tenant: str | None
    type: str  # AVRO, JSON, PROTOBUF
    schema: str  # as first registered
    references: tuple[Reference, ...] = ()


@dataclass(frozen=True, slots=True)
class Version:
    subject: str
    version: int
    id: int
    deleted: bool = False


def record(key: Sequence[object], value: Mapping[str, object] | None) -> tuple[bytes, bytes | None]:
    """A record of ``__schemas``: its key and value as stored."""
    return orjson.dumps(list(key)), None if value is None else orjson.dumps(value)


def decode_key(key: bytes) -> list[Any]:
    found = orjson.loads(key)
    if not isinstance(found, list) or not found:
        raise ValueError(f"not a registry key: {key[:100]!r}")
    return found


Records = list[tuple[bytes, bytes | None]]


@dataclass
class Registry:
    """Every tenant's subjects, versions, schemas, levels and modes."""

    schemas: dict[int, SchemaRecord] = field(default_factory=dict)
    versions: dict[tuple[str | None, str], dict[int, Version]] = field(default_factory=dict)
    levels: dict[tuple[str | None, str], str] = field(default_factory=dict)
    modes: dict[tuple[str | None, str], str] = field(default_factory=dict)
    _by_text: dict[tuple[str | None, str, str, tuple[Reference, ...]], int] = field(default_factory=dict)
    _canonical: dict[int, str] = field(default_factory=dict)
    _next_floor: int = 1  # the ``["next-id"]`` record: ids below were given, even if their schemas are gone

    # ---------------------------------------------------------------- the fold

    def apply(self, key: bytes, value: bytes | None, *, index: bool = True) -> None:
        """One record, as a change after its append applies it; the fold passes ``index=False`` and calls
        :meth:`reindex` once at the end (compaction may have moved a referenced version after its user)."""
        parts = decode_key(key)
        doc = None if value is None else orjson.loads(value)
        kind = parts[0]
        if kind == "schema" and doc is not None:
            refs = tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"])) for r in doc["references"])
            found = SchemaRecord(int(parts[1]), doc["tenant"], doc["type"], doc["schema"], refs)
            self.schemas[found.id] = found
            if index:
                self._index(found)
        elif kind == "schema":  # no version names it any more: forgotten (its id is never given again)
            gone = self.schemas.pop(int(parts[1]), None)
            self._canonical.pop(int(parts[1]), None)
            if gone is not None and index:
                self.reindex()  # another id of the same text (IMPORT may make one) is the one found now
        elif kind == "next-id" and doc is not None:
            self._next_floor = max(self._next_floor, int(doc["next"]))
        elif kind == "version":
            _, tenant, subject, number = parts
            versions = self.versions.setdefault((tenant, subject), {})
            if doc is None:
                versions.pop(int(number), None)
                if not versions:
                    del self.versions[(tenant, subject)]
            else:
                versions[int(number)] = Version(subject, int(number), int(doc["id"]), bool(doc.get("deleted")))
        elif kind == "config":
            _set(self.levels, (parts[1], parts[2]), None if doc is None else doc["compatibility"])
        elif kind == "mode":
            _set(self.modes, (parts[1], parts[2]), None if doc is None else doc["mode"])

    def summary(self) -> str:
        return f"{len(self.schemas)} schemas, {len(self.versions)} subjects"

    def reindex(self) -> None:
        self._by_text.clear()
        for found in sorted(self.schemas.values(), key=lambda f: f.id):
            self._index(found)

    def _index(self, found: SchemaRecord) -> None:
        """Know the schema by its canonical text, so registering it again finds its id."""
        try:
            text = self.canonical(found.tenant, FORMATS[found.type], found.schema, found.references)
        except (SchemaError, RegistryError, KeyError):
            text = found.schema  # not valid by this server's rules (an older one's): known by its text alone
        self._canonical[found.id] = text
        key = (found.tenant, found.type, text, found.references)
        if found.id < self._by_text.get(key, found.id + 1):  # the lowest id of a text: the same live and folded
            self._by_text[key] = found.id

    @property
    def next_id(self) -> int:
        return max(max(self.schemas, default=0) + 1, self._next_floor)

    # ---------------------------------------------------------------- reads

    def subjects(self, tenant: str | None, *, deleted: bool = False, prefix: str = "") -> list[str]:
        return sorted(
            subject
            for (owner, subject), versions in self.versions.items()
            if owner == tenant
            and subject.startswith(prefix)
            and any(deleted or not v.deleted for v in versions.values())
        )

    def live(self, tenant: str | None, subject: str, *, deleted: bool = False) -> list[Version]:
        """The subject's versions, oldest first (soft-deleted ones only with ``deleted``)."""
        versions = self.versions.get((tenant, subject), {})
        return [v for _, v in sorted(versions.items()) if deleted or not v.deleted]

    def version(self, tenant: str | None, subject: str, version: str | int, *, deleted: bool = False) -> Version:
        """A version by number, ``latest`` or ``-1``: 40401 for an unknown subject, 40402 for an unknown version."""
        everything = self.live(tenant, subject, deleted=True)
        if not everything:
            raise subject_not_found(subject)
        shown = [v for v in everything if deleted or not v.deleted]
        if str(version) in ("latest", "-1"):
            if not shown:
                raise subject_not_found(subject)
            return shown[-1]
        number = parse_version(version)
        for found in shown:
            if found.version == number:
                return found
        raise version_not_found(subject, version)

    def schema(self, schema_id: int) -> SchemaRecord:
        found = self.schemas.get(schema_id)
        if found is None:
            raise schema_not_found(f"Schema {schema_id} not found")
        return found

    def uses_of(self, schema_id: int, *, deleted: bool = False) -> list[tuple[str | None, Version]]:
        """Every (tenant, version) registered with the id."""
        return [
            (tenant, v)
            for (tenant, _subject), versions in sorted(self.versions.items(), key=lambda kv: (str(kv[0][0]), kv[0][1]))
            for v in versions.values()
            if v.id == schema_id and (deleted or not v.deleted)
        ]

    def level(self, tenant: str | None, subject: str) -> str:
        return self.levels.get((tenant, subject)) or self.levels.get((tenant, "")) or DEFAULT_LEVEL

    def mode(self, tenant: str | None, subject: str) -> str:
        """The subject's mode, else the global one; a global READONLY_OVERRIDE wins over every subject's."""
        overall = self.modes.get((tenant, ""))
        if overall == "READONLY_OVERRIDE":
            return overall
        return self.modes.get((tenant, subject)) or overall or DEFAULT_MODE

    def referenced_by(self, tenant: str | None, subject: str, version: int) -> list[int]:
        """The ids of the tenant's schemas that refer to the version (in use: a version they refer to stays)."""
        return sorted(
            s.id
            for s in self.schemas.values()
            if s.tenant == tenant
            and any(r.subject == subject and r.version == version for r in s.references)
            and self.uses_of(s.id, deleted=True)
        )

    def find(self, tenant: str | None, fmt: Format, text: str, references: tuple[Reference, ...]) -> int | None:
        """The id the tenant already has for this schema (by its canonical text), or None."""
        return self._by_text.get((tenant, fmt.name, self.canonical(tenant, fmt, text, references), references))

    def canonical(self, tenant: str | None, fmt: Format, text: str, references: tuple[Reference, ...]) -> str:
        return fmt.canonical_form(text, self.reference_texts(tenant, references))

    def reference_texts(self, tenant: str | None, references: Iterable[Reference]) -> dict[str, str]:
        """The texts of the schemas ``references`` name, theirs first (a reference's own references come
        before it, as Avro needs its named types defined first); 42201 for one not registered."""
        out: dict[str, str] = {}
        self._gather(tenant, tuple(references), out, set())
        return out

    def _gather(
        self, tenant: str | None, references: tuple[Reference, ...], out: dict[str, str], seen: set[int]
    ) -> None:
        for ref in references:
            try:
                version = self.version(tenant, ref.subject, ref.version, deleted=True)
            except RegistryError:
                raise RegistryError(
                    422, 42201, f"Invalid schema: reference {ref.name} ({ref.subject} version {ref.version}) not found"
                ) from None
            if version.id in seen:
                continue
            seen.add(version.id)
            found = self.schemas[version.id]
            self._gather(tenant, found.references, out, seen)
            out[ref.name] = found.schema

    def parsed(self, schema_id: int) -> ParsedSchema:
        found = self.schema(schema_id)
        return FORMATS[found.type].parse(found.schema, self.reference_texts(found.tenant, found.references))

    # ---------------------------------------------------------------- changes (records to append)

    def register(
        self,
        tenant: str | None,
        subject: str,
        schema_type: str,
        text: str,
        references: tuple[Reference, ...],
        *,
        normalize: bool = False,
        wanted_id: int | None = None,
        wanted_version: int | None = None,
    ) -> tuple[int, Records]:
        """Register the schema under the subject: its id, and the records that make it so (none when the subject
        already has it). 409 (42201/409) for an incompatible one, 422 for an invalid one, 42205 in read-only mode.
        ``wanted_id`` / ``wanted_version``: IMPORT mode's, as Confluent's migration tools send them."""
        fmt = format_of(schema_type)
        check_subject(subject)
        mode = self.mode(tenant, subject)
        if mode in ("READONLY", "READONLY_OVERRIDE"):
            raise RegistryError(422, 42205, f"Subject {subject} is in read-only mode")
        if (wanted_id is not None or wanted_version is not None) and mode != "IMPORT":
            raise RegistryError(
                422, 42205, f"Subject {subject} is not in import mode: an id or version may not be chosen"
            )
        for name, chosen in (("id", wanted_id), ("version", wanted_version)):
            if chosen is not None and not 0 < chosen <= MAX_ID:
                raise RegistryError(422, 42201, f"an imported {name} is 1 to {MAX_ID}: {chosen}")
        if len(text.encode()) > MAX_SCHEMA_BYTES:
            raise RegistryError(422, 42201, f"Invalid schema: larger than {MAX_SCHEMA_BYTES} bytes")
        refs = self.reference_texts(tenant, references)
        try:
            parsed = fmt.parse(text, refs)
            canonical = fmt.canonical_form(text, refs)
        except SchemaError as exc:
            raise RegistryError(422, 42201, f"Invalid schema: {exc}") from None
        stored_text = canonical if normalize else fmt.readable(text, refs) if fmt.readable else text
        existing = self._by_text.get((tenant, fmt.name, canonical, references))
        versions = self.live(tenant, subject)
        for version in versions:
            if version.id == existing and wanted_version in (None, version.version):
                return version.id, []  # already registered: the same id, nothing written
        out: Records = []
        if existing is None or (wanted_id is not None and wanted_id != existing):
            if wanted_id is not None:
                taken = self.schemas.get(wanted_id)
                if (taken is None and wanted_id < self.next_id) or (
                    taken is not None and (taken.tenant != tenant or self._canonical.get(wanted_id) != canonical)
                ):
                    raise RegistryError(
                        422, 42207, f"Overwrite new schema with id {wanted_id} is not permitted: the id was given"
                    )
                existing = wanted_id
            else:
                existing = self.next_id
                if existing > MAX_ID:
                    raise RegistryError(422, 42205, f"every schema id up to {MAX_ID} was given")
            if existing not in self.schemas:
                self._room_for_one_more(tenant)
                out.append(record(("next-id",), {"next": max(self.next_id, existing + 1)}))
                out.append(
                    record(
                        ("schema", existing),
                        {
                            "tenant": tenant,
                            "type": fmt.name,
                            "schema": stored_text,
                            "references": [r.to_json() for r in references],
                        },
                    )
                )
        self._room_for_a_version(tenant)
        if mode != "IMPORT":
            level = self.level(tenant, subject)
            against = versions if level.endswith("_TRANSITIVE") else versions[-1:]
            if any(self.schemas[v.id].type != fmt.name for v in against) and level != "NONE":
                raise RegistryError(
                    409,
                    409,
                    f"Schema being registered is incompatible with an earlier schema for subject "
                    f"'{subject}': its type {fmt.name} differs from the subject's",
                )
            earlier = [self.parsed(v.id) for v in against] if level != "NONE" else []
            found = problems(level, parsed, earlier, fmt.read_problems, numbers=[v.version for v in against])
            if found:
                raise RegistryError(
                    409,
                    409,
                    f"Schema being registered is incompatible with an earlier schema for subject '{subject}', "
                    f"details: {found}",
                )
        everything = self.versions.get((tenant, subject), {})
        number = wanted_version if wanted_version is not None else max(everything, default=0) + 1
        if number in everything:
            raise RegistryError(422, 42207, f"Version {number} of subject {subject} exists already")
        out.append(record(("version", tenant, subject, number), {"id": existing, "deleted": False}))
        return existing, out

    def check(
        self,
        tenant: str | None,
        subject: str,
        schema_type: str,
        text: str,
        references: tuple[Reference, ...],
        version: str | int | None,
    ) -> list[str]:
        """Why the schema may not be registered under the subject at its level (against ``version``, or every
        version the level names with None); empty: it may."""
        fmt = format_of(schema_type)
        try:
            parsed = fmt.parse(text, self.reference_texts(tenant, references))
        except SchemaError as exc:
            raise RegistryError(422, 42201, f"Invalid schema: {exc}") from None
        level = self.level(tenant, subject)
        if version is None:
            against = self.live(tenant, subject)
            against = against if level.endswith("_TRANSITIVE") else against[-1:]
        else:
            against = [self.version(tenant, subject, version)]
            level = level.removesuffix("_TRANSITIVE")
        if level == "NONE":
            return []
        if any(self.schemas[v.id].type != fmt.name for v in against):
            return [f"the subject's schemas are not {fmt.name}"]
        earlier = [self.parsed(v.id) for v in against]
        return problems(level, parsed, earlier, fmt.read_problems, numbers=[v.version for v in against])

    def delete_version(
        self, tenant: str | None, subject: str, version: str | int, *, permanent: bool
    ) -> tuple[int, Records]:
        """Soft delete (hidden, its id still answered) or, once soft-deleted, hard delete (gone)."""
        self._writable(tenant, subject)
        if permanent:
            found = self.version(tenant, subject, version, deleted=True)
            if not found.deleted:
                raise RegistryError(
                    404,
                    40407,
                    f"Subject '{subject}' Version {found.version} was not deleted first before being permanently "
                    "deleted",
                )
            self._not_referenced(tenant, subject, found.version)
            return found.version, self._hard_deleted(tenant, subject, [found])
        found = self.version(tenant, subject, version, deleted=True)
        if found.deleted:
            raise RegistryError(
                404,
                40406,
                f"Subject '{subject}' Version {found.version} was soft deleted. Set permanent=true to delete "
                "permanently",
            )
        self._not_referenced(tenant, subject, found.version)
        return found.version, [record(("version", tenant, subject, found.version), {"id": found.id, "deleted": True})]

    def delete_subject(self, tenant: str | None, subject: str, *, permanent: bool) -> tuple[list[int], Records]:
        self._writable(tenant, subject)
        everything = self.live(tenant, subject, deleted=True)
        if not everything:
            raise subject_not_found(subject)
        for v in everything:
            self._not_referenced(tenant, subject, v.version)
        if permanent:
            alive = [v.version for v in everything if not v.deleted]
            if alive:
                raise RegistryError(
                    404, 40405, f"Subject '{subject}' was not deleted first before being permanently deleted"
                )
            out = self._hard_deleted(tenant, subject, everything)
            out += [
                record((kind, tenant, subject), None)
                for kind, kept in (("config", self.levels), ("mode", self.modes))
                if (tenant, subject) in kept
            ]
            return [v.version for v in everything], out
        shown = [v for v in everything if not v.deleted]
        if not shown:
            raise RegistryError(
                404, 40404, f"Subject '{subject}' was soft deleted. Set permanent=true to delete permanently"
            )
        out = [record(("version", tenant, subject, v.version), {"id": v.id, "deleted": True}) for v in shown]
        return [v.version for v in shown], out

    def set_level(self, tenant: str | None, subject: str, level: str | None) -> Records:
        if level is not None and level not in LEVELS:
            raise RegistryError(
                422, 42203, f"Invalid compatibility level {level!r}: expected one of {', '.join(LEVELS)}"
            )
        if subject:
            check_subject(subject)
        return [record(("config", tenant, subject), None if level is None else {"compatibility": level})]

    def set_mode(self, tenant: str | None, subject: str, mode: str | None, *, force: bool = False) -> Records:
        if mode is not None and mode not in MODES:
            raise RegistryError(422, 42204, f"Invalid mode {mode!r}: expected one of {', '.join(MODES)}")
        if subject:
            check_subject(subject)
        if mode == "IMPORT" and not force:
            has = (
                self.live(tenant, subject)
                if subject
                else [v for (t, _), vs in self.versions.items() if t == tenant for v in vs.values()]
            )
            if has:
                raise RegistryError(
                    422, 42204, "Cannot import since found existing subjects (set ?force=true to import anyway)"
                )
        return [record(("mode", tenant, subject), None if mode is None else {"mode": mode})]

    def _hard_deleted(self, tenant: str | None, subject: str, versions: list[Version]) -> Records:
        """The records that delete ``versions`` for good, and forget each schema no other version names."""
        out = [record(("version", tenant, subject, v.version), None) for v in versions]
        removed = {(subject, v.version) for v in versions}
        for schema_id in sorted({v.id for v in versions}):
            others = [
                (owner, v)
                for owner, v in self.uses_of(schema_id, deleted=True)
                if owner != tenant or (v.subject, v.version) not in removed
            ]
            if not others:
                out.append(record(("schema", schema_id), None))
        return out

    def _room_for_a_version(self, tenant: str | None) -> None:
        """42205 once the tenant's subjects hold :data:`MAX_VERSIONS_PER_TENANT` versions (soft-deleted ones too)."""
        if tenant is None:
            return
        held = sum(len(versions) for (owner, _), versions in self.versions.items() if owner == tenant)
        if held >= MAX_VERSIONS_PER_TENANT:
            raise RegistryError(
                422,
                42205,
                f"tenant {tenant} holds {held} versions, the most a tenant may: delete some permanently first",
            )

    def _room_for_one_more(self, tenant: str | None) -> None:
        """42205 once the tenant holds :data:`MAX_SCHEMAS_PER_TENANT` schemas."""
        if tenant is None:
            return  # the admin's, or every schema with auth off: the operator's own to bound
        held = sum(1 for found in self.schemas.values() if found.tenant == tenant)
        if held >= MAX_SCHEMAS_PER_TENANT:
            raise RegistryError(
                422,
                42205,
                f"tenant {tenant} holds {held} schemas, the most a tenant may: delete some permanently first",
            )

    def _writable(self, tenant: str | None, subject: str) -> None:
        if self.mode(tenant, subject) in ("READONLY", "READONLY_OVERRIDE"):
            raise RegistryError(422, 42205, f"Subject {subject} is in read-only mode")

    def _not_referenced(self, tenant: str | None, subject: str, version: int) -> None:
        users = self.referenced_by(tenant, subject, version)
        if users:
            raise RegistryError(
                422,
                42206,
                f"One or more references exist to the schema {{subject={subject},version={version}}}: ids {users}",
            )


def _set(table: dict[tuple[str | None, str], str], key: tuple[str | None, str], value: str | None) -> None:
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value


def format_of(schema_type: str | None) -> Format:
    fmt = FORMATS.get((schema_type or "AVRO").upper())
    if fmt is None:
        raise RegistryError(422, 42201, f"Invalid schema type {schema_type!r}: expected AVRO, JSON or PROTOBUF")
    return fmt


def check_subject(subject: str) -> str:
    if not subject or len(subject) > MAX_SUBJECT or not subject.isprintable():
        raise RegistryError(422, 42208, f"Invalid subject {subject[:100]!r}: 1-{MAX_SUBJECT} printable characters")
    return subject


def parse_version(version: str | int) -> int:
    try:
        number = int(version)
    except (TypeError, ValueError):
        number = 0
    if not 0 < number <= 2**31 - 1:
        raise RegistryError(
            422,
            42202,
            f"The specified version '{version}' is not a valid version id. Allowed values are between "
            '[1, 2^31-1] and the string "latest"',
        )
    return number


def with_schema(version: Version, found: SchemaRecord) -> dict[str, object]:
    """A version as Confluent answers it."""
    out: dict[str, object] = {"subject": version.subject, "version": version.version, "id": found.id}
    if found.type != "AVRO":
        out["schemaType"] = found.type
    if found.references:
        out["references"] = [r.to_json() for r in found.references]
    out["schema"] = found.schema
    return out
