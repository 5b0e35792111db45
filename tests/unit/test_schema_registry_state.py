"""The schema registry's state (``server.schemas.state``): every change as the records it appends, applied as the
coordinator applies them, and the fold of those records giving the same registry back (also after compaction,
which keeps the newest record of each key in offset order)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.schemas import state
from server.schemas.state import Records, Reference, Registry, RegistryError, decode_key


def schema(name: str, *fields: tuple[str, str]) -> str:
    return json.dumps({"type": "record", "name": name, "fields": [{"name": n, "type": t} for n, t in fields]})


USER = schema("User", ("name", "string"))
USER_AGE = schema("User", ("name", "string"), ("age", "int"))  # no default: not BACKWARD compatible


class Log:
    """A registry and every record its changes appended, in order."""

    def __init__(self) -> None:
        self.registry = Registry()
        self.records: Records = []

    def do(self, answer_and_records: tuple[object, Records]) -> object:
        answer, records = answer_and_records
        for key, value in records:
            self.registry.apply(key, value)
        self.records += records
        return answer

    def folded(self, records: Records | None = None) -> Registry:
        registry = Registry()
        for key, value in self.records if records is None else records:
            registry.apply(key, value, index=False)
        registry.reindex()
        return registry


def compacted(records: Records) -> Records:
    """What compaction keeps: the newest record of each key, in offset order (tombstones too, for a while)."""
    last = {key: index for index, (key, _value) in enumerate(records)}
    return [record for index, record in enumerate(records) if last[record[0]] == index]


def test_register_gives_one_id_per_schema_and_a_version_per_subject() -> None:
    log = Log()
    first = log.do(log.registry.register(None, "a", "AVRO", USER, ()))
    assert first == 1
    assert log.do(log.registry.register(None, "a", "AVRO", USER, ())) == 1
    assert len(log.records) == 3  # the next id, the schema and the version; registering again wrote nothing
    respelled = json.dumps(json.loads(USER), indent=4)
    assert log.do(log.registry.register(None, "b", "AVRO", respelled, ())) == 1  # same canonical form
    assert [v.version for v in log.registry.live(None, "b")] == [1]
    assert log.do(log.registry.register(None, "c", "AVRO", schema("Other", ("x", "int")), ())) == 2


def test_incompatible_schema_is_refused_at_the_subjects_level() -> None:
    log = Log()
    log.do(log.registry.register(None, "s", "AVRO", USER, ()))
    with pytest.raises(RegistryError) as refused:
        log.registry.register(None, "s", "AVRO", USER_AGE, ())
    assert (refused.value.status, refused.value.code) == (409, 409)
    assert log.registry.check(None, "s", "AVRO", USER_AGE, (), "latest")
    log.do((None, log.registry.set_level(None, "s", "FORWARD")))
    assert log.do(log.registry.register(None, "s", "AVRO", USER_AGE, ())) == 2
    assert log.registry.level(None, "s") == "FORWARD"
    assert log.registry.level(None, "other") == "BACKWARD"  # Confluent's default
    log.do((None, log.registry.set_level(None, "", "NONE")))
    assert log.registry.level(None, "other") == "NONE"  # the global level, where a subject has none


def test_soft_delete_hides_hard_delete_needs_soft_first_and_ids_are_never_given_twice() -> None:
    log = Log()
    schema_id = log.do(log.registry.register(None, "s", "AVRO", USER, ()))
    with pytest.raises(RegistryError) as not_soft:
        log.registry.delete_subject(None, "s", permanent=True)
    assert not_soft.value.code == 40405
    assert log.do(log.registry.delete_subject(None, "s", permanent=False)) == [1]
    assert log.registry.subjects(None) == []
    assert log.registry.subjects(None, deleted=True) == ["s"]
    assert log.registry.schema(schema_id).schema == USER  # a soft-deleted version's id still answers
    assert log.do(log.registry.delete_subject(None, "s", permanent=True)) == [1]
    assert log.registry.subjects(None, deleted=True) == []
    with pytest.raises(RegistryError):
        log.registry.schema(schema_id)  # no version names it: forgotten
    # after compaction too, the next schema gets a new id (even the same text: it was forgotten)
    log.registry = log.folded(compacted(log.records))
    assert schema_id not in log.registry.schemas
    again = log.do(log.registry.register(None, "s", "AVRO", USER, ()))
    assert again == schema_id + 1
    assert [v.version for v in log.registry.live(None, "s")] == [1]  # the subject starts over


def test_a_referenced_version_cannot_be_deleted() -> None:
    log = Log()
    log.do(log.registry.register(None, "address", "AVRO", schema("Address", ("street", "string")), ()))
    ref = Reference("Address", "address", 1)
    user = json.dumps({"type": "record", "name": "User", "fields": [{"name": "home", "type": "Address"}]})
    user_id = log.do(log.registry.register(None, "user", "AVRO", user, (ref,)))
    assert log.registry.referenced_by(None, "address", 1) == [user_id]
    with pytest.raises(RegistryError) as in_use:
        log.registry.delete_version(None, "address", "1", permanent=False)
    assert in_use.value.code == 42206
    with pytest.raises(RegistryError) as missing:
        log.registry.register(None, "user2", "AVRO", user, (Reference("Address", "nowhere", 1),))
    assert missing.value.code == 42201


def test_tenants_have_their_own_subjects_and_ids() -> None:
    log = Log()
    a = log.do(log.registry.register("a", "s", "AVRO", USER, ()))
    b = log.do(log.registry.register("b", "s", "AVRO", USER, ()))
    assert a != b, "the same schema of two tenants: two ids, so an id tells no tenant what another registered"
    assert log.registry.subjects("a") == log.registry.subjects("b") == ["s"]
    assert log.registry.subjects(None) == []
    log.do((None, log.registry.set_level("a", "s", "NONE")))
    assert log.registry.level("b", "s") == "BACKWARD"


def test_a_tenant_may_hold_only_so_many_schemas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state, "MAX_SCHEMAS_PER_TENANT", 2)
    log = Log()
    for i in range(2):
        log.do(log.registry.register("a", f"s{i}", "AVRO", schema(f"R{i}"), ()))
    log.do(log.registry.register("a", "s9", "AVRO", schema("R0"), ()))  # a schema it holds: no more room needed
    with pytest.raises(RegistryError) as full:
        log.registry.register("a", "s2", "AVRO", schema("R2"), ())
    assert full.value.code == 42205
    assert log.do(log.registry.register("b", "s2", "AVRO", schema("R2"), ())) > 0  # another tenant's room
    log.do(log.registry.delete_subject("a", "s1", permanent=False))
    log.do(log.registry.delete_subject("a", "s1", permanent=True))
    assert log.do(log.registry.register("a", "s2", "AVRO", schema("R2"), ())) > 0  # room again
    with pytest.raises(RegistryError) as large:
        log.registry.register("a", "big", "AVRO", " " * (state.MAX_SCHEMA_BYTES + 1), ())
    assert large.value.code == 42201


def test_modes() -> None:
    log = Log()
    log.do(log.registry.register(None, "s", "AVRO", USER, ()))
    log.do((None, log.registry.set_mode(None, "s", "READONLY")))
    with pytest.raises(RegistryError) as read_only:
        log.registry.register(None, "s", "AVRO", USER_AGE, ())
    assert read_only.value.code == 42205
    with pytest.raises(RegistryError):
        log.registry.delete_subject(None, "s", permanent=False)
    with pytest.raises(RegistryError) as existing:
        log.registry.set_mode(None, "", "IMPORT")
    assert existing.value.code == 42204
    log.do((None, log.registry.set_mode(None, "t", "IMPORT")))
    imported = log.do(log.registry.register(None, "t", "AVRO", USER_AGE, (), wanted_id=100, wanted_version=7))
    assert imported == 100
    assert [v.version for v in log.registry.live(None, "t")] == [7]
    with pytest.raises(RegistryError) as chosen:
        log.registry.register(None, "s2", "AVRO", USER, (), wanted_id=5)
    assert chosen.value.code == 42205  # an id is chosen only in IMPORT mode
    assert log.do(log.registry.register(None, "u", "AVRO", schema("U", ("x", "int")), ())) == 101


def test_bad_input_is_refused_with_confluents_codes() -> None:
    registry = Registry()
    for args, code in [
        (("s", "AVRO", "{not json", ()), 42201),
        (("s", "XML", USER, ()), 42201),
        (("", "AVRO", USER, ()), 42208),
    ]:
        with pytest.raises(RegistryError) as refused:
            registry.register(None, *args)  # type: ignore[arg-type]
        assert refused.value.code == code
    with pytest.raises(RegistryError) as level:
        registry.set_level(None, "s", "SIDEWAYS")
    assert level.value.code == 42203
    with pytest.raises(RegistryError) as version:
        registry.version(None, "s", "0")
    assert version.value.code == 40401
    with pytest.raises(RegistryError) as schema_id:
        registry.schema(7)
    assert schema_id.value.code == 40403


OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["register", "soft", "hard", "level", "mode"]),
        st.sampled_from([None, "a"]),
        st.sampled_from(["s", "t"]),
        st.integers(0, 3),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(OPERATIONS)
def test_the_fold_of_the_records_and_of_their_compaction_is_the_registry_the_changes_made(
    operations: list[tuple[str, str | None, str, int]],
) -> None:
    log = Log()
    texts = [schema(f"R{i}", *((f"f{j}", "string") for j in range(i))) for i in range(4)]
    for kind, tenant, subject, n in operations:
        registry = log.registry
        try:
            if kind == "register":
                log.do(registry.register(tenant, subject, "AVRO", texts[n], ()))
            elif kind == "soft":
                log.do(registry.delete_subject(tenant, subject, permanent=False))
            elif kind == "hard":
                log.do(registry.delete_subject(tenant, subject, permanent=True))
            elif kind == "level":
                log.do((None, registry.set_level(tenant, subject, ["NONE", "BACKWARD", "FULL", "FORWARD"][n])))
            else:
                log.do((None, registry.set_mode(tenant, subject, ["READWRITE", "READONLY", None, "READWRITE"][n])))
        except RegistryError:
            pass
    for records in (log.records, compacted(log.records)):
        folded = log.folded(records)
        assert folded.schemas == log.registry.schemas
        assert folded.versions == log.registry.versions
        assert folded.levels == log.registry.levels
        assert folded.modes == log.registry.modes
        assert folded.next_id == log.registry.next_id
    assert all(decode_key(key)[0] in ("schema", "next-id", "version", "config", "mode") for key, _ in log.records)


def test_a_default_or_a_logical_type_added_is_another_schema() -> None:
    # the Parsing Canonical Form drops both: known again by it, the change would be lost (found in review)
    log = Log()
    plain = json.dumps({"type": "record", "name": "T", "fields": [{"name": "at", "type": "long"}]})
    typed = json.dumps(
        {"type": "record", "name": "T", "fields": [{"name": "at", "type": {"type": "long", "logicalType": "x"}}]}
    )
    defaulted = json.dumps({"type": "record", "name": "T", "fields": [{"name": "at", "type": "long", "default": 0}]})
    ids = [log.do(log.registry.register(None, "s", "AVRO", text, ())) for text in (plain, typed, defaulted)]
    assert len(set(ids)) == 3
    assert [log.registry.schema(i).schema for i in ids] == [plain, typed, defaulted]
    normalized = log.do(
        log.registry.register(None, "n", "AVRO", json.dumps(json.loads(typed), indent=2), (), normalize=True)
    )
    assert normalized == ids[1] and "logicalType" in log.registry.schema(normalized).schema


def test_import_takes_only_ids_that_fit_and_were_never_given() -> None:
    log = Log()
    given = log.do(log.registry.register("a", "s", "AVRO", USER, ()))
    log.do((None, log.registry.set_mode("b", "t", "IMPORT")))
    for wanted, code in ((2**31, 42201), (0, 42201), (given, 42207)):  # too large, none, another tenant's
        with pytest.raises(RegistryError) as refused:
            log.registry.register("b", "t", "AVRO", USER, (), wanted_id=wanted)
        assert refused.value.code == code, wanted
    with pytest.raises(RegistryError) as version:
        log.registry.register("b", "t", "AVRO", USER, (), wanted_id=50, wanted_version=2**64)
    assert version.value.code == 42201
    assert log.do(log.registry.register("b", "t", "AVRO", USER, (), wanted_id=50)) == 50
    assert log.do(log.registry.register("b", "t2", "AVRO", USER, ())) == 50  # the lowest id of a text
    assert log.folded().find("b", state.FORMATS["AVRO"], USER, ()) == 50


def test_a_global_readonly_override_wins_and_stops_deletes() -> None:
    log = Log()
    log.do(log.registry.register(None, "s", "AVRO", USER, ()))
    log.do((None, log.registry.set_mode(None, "s", "READWRITE")))
    log.do((None, log.registry.set_mode(None, "", "READONLY_OVERRIDE")))
    assert log.registry.mode(None, "s") == "READONLY_OVERRIDE"
    for change in (
        lambda: log.registry.register(None, "s", "AVRO", USER_AGE, ()),
        lambda: log.registry.delete_subject(None, "s", permanent=False),
    ):
        with pytest.raises(RegistryError) as refused:
            change()
        assert refused.value.code == 42205


def test_deleting_what_is_soft_deleted_already_says_so() -> None:
    log = Log()
    log.do(log.registry.register(None, "s", "AVRO", USER, ()))
    log.do(log.registry.delete_version(None, "s", "1", permanent=False))
    with pytest.raises(RegistryError) as version:
        log.registry.delete_version(None, "s", "1", permanent=False)
    assert version.value.code == 40406
    with pytest.raises(RegistryError) as subject:
        log.registry.delete_subject(None, "s", permanent=False)
    assert subject.value.code == 40404


def test_a_tenant_may_hold_only_so_many_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state, "MAX_VERSIONS_PER_TENANT", 3)
    log = Log()
    for i in range(3):
        log.do(log.registry.register("a", f"s{i}", "AVRO", USER, ()))  # one schema, ever more versions
    with pytest.raises(RegistryError) as full:
        log.registry.register("a", "s3", "AVRO", USER, ())
    assert full.value.code == 42205
