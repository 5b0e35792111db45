"""The fold of ``__connect_offsets`` (``server.connect_offsets``): task records, tombstones and the snapshots of
logs written before compaction → every connector's latest checkpoints, also from what retention left of the
partition then."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.connect_offsets import ConnectorKey, ConnectorState, fold, task_key
from talos import Record, RecordData

TENANT_HEADER = "talos-tenant"


def _record(offset: int, data: RecordData) -> Record:
    return Record(offset, 1_000 + offset, data.key, data.value, tuple(data.headers))


def _task(tenant: str | None, connector: str, task: str, document: dict[str, Any] | None) -> RecordData:
    headers = [] if tenant is None else [(TENANT_HEADER, tenant.encode())]
    value = None if document is None else orjson.dumps(document)
    return RecordData(value, f"{connector}/{task}".encode(), headers)


def snapshot_record(tenant: str | None, connector: str, through: int, tasks: dict[str, dict[str, Any]]) -> RecordData:
    """A snapshot as servers wrote them before issue 37 (the fold still reads logs written then)."""
    headers: list[tuple[str, bytes | None]] = [("talos-connect", b"snapshot")]
    if tenant is not None:
        headers.append((TENANT_HEADER, tenant.encode()))
    return RecordData(orjson.dumps({"through": through, "tasks": tasks}), connector.encode(), headers)


def _log(*items: RecordData) -> list[Record]:
    return [_record(offset, data) for offset, data in enumerate(items)]


def _documents(state: dict[ConnectorKey, ConnectorState], key: ConnectorKey) -> dict[str, dict[str, Any]]:
    found = state.get(key)
    return {} if found is None else found.documents()


def test_newest_record_of_each_task_wins_and_null_removes() -> None:
    state = fold(
        _log(
            _task(None, "c", "0", {"p": 1}),
            _task(None, "c", "1", {"p": 10}),
            _task(None, "c", "0", {"p": 2}),
            _task(None, "c", "1", None),
        )
    )
    assert _documents(state, (None, "c")) == {"0": {"p": 2}}


def test_tenants_and_connectors_are_apart() -> None:
    state = fold(
        _log(
            _task("a", "c", "0", {"p": "a"}),
            _task("b", "c", "0", {"p": "b"}),
            _task(None, "c", "0", {"p": "admin"}),
            _task("a", "c2", "0", {"p": "other"}),
        )
    )
    assert _documents(state, ("a", "c")) == {"0": {"p": "a"}}
    assert _documents(state, ("b", "c")) == {"0": {"p": "b"}}
    assert _documents(state, (None, "c")) == {"0": {"p": "admin"}}
    assert _documents(state, ("a", "c2")) == {"0": {"p": "other"}}


def test_a_snapshot_replaces_the_connector_and_keeps_a_tombstone() -> None:
    log = _log(
        _task(None, "c", "0", {"p": 1}),
        _task(None, "c", "1", {"p": 1}),
        _task(None, "c", "1", None),
        snapshot_record(None, "c", 3, {"0": {"p": 1}}),
    )
    assert _documents(fold(log), (None, "c")) == {"0": {"p": 1}}
    assert _documents(fold(log[3:]), (None, "c")) == {"0": {"p": 1}}  # retention took every task record


def test_a_save_written_while_the_snapshot_was_made_beats_it() -> None:
    log = _log(
        _task(None, "c", "0", {"p": 1}),
        _task(None, "c", "1", {"p": 1}),
        _task(None, "c", "0", {"p": 2}),  # offset 2: after what the snapshot's writer had read
        _task(None, "c", "1", None),  # offset 3: likewise
        snapshot_record(None, "c", 2, {"0": {"p": 1}, "1": {"p": 1}}),
    )
    assert _documents(fold(log), (None, "c")) == {"0": {"p": 2}}


def test_a_late_snapshot_that_knew_less_is_skipped() -> None:
    log = _log(
        _task(None, "c", "0", {"p": 1}),
        _task(None, "c", "0", None),
        snapshot_record(None, "c", 2, {}),
        snapshot_record(None, "c", 1, {"0": {"p": 1}}),  # made before the tombstone, stored after
    )
    assert _documents(fold(log), (None, "c")) == {}


def test_unreadable_records_change_nothing() -> None:
    log = _log(
        _task(None, "c", "0", {"p": 1}),
        RecordData(b"{not json", b"c/0"),
        RecordData(b"{}", None),
        RecordData(b'{"tasks": {}}', b"c"),  # no snapshot header: not a snapshot
        RecordData(b"[1]", b"c", [("talos-connect", b"snapshot")]),
    )
    assert _documents(fold(log), (None, "c")) == {"0": {"p": 1}}


# ---------------------------------------------------------------- a model: any history, any lag, any retention

_TENANTS = st.sampled_from([None, "a", "b"])
_CONNECTORS = st.sampled_from(["c", "d"])
_TASKS = st.sampled_from(["0", "1", "2"])
_DOCUMENTS = st.one_of(st.none(), st.integers(0, 5).map(lambda n: {"p": n}))
_SAVE = st.tuples(st.just("save"), _TENANTS, _CONNECTORS, _TASKS, _DOCUMENTS)
_SNAPSHOT = st.tuples(st.just("snapshot"), _TENANTS, _CONNECTORS, st.integers(0, 8))  # lag: records not read yet


def _truth(saves: list[tuple[int, ConnectorKey, str, dict[str, Any] | None]], below: int) -> dict[ConnectorKey, Any]:
    latest: dict[ConnectorKey, dict[str, dict[str, Any]]] = {}
    for offset, key, task, document in saves:
        if offset >= below:
            break
        tasks = latest.setdefault(key, {})
        if document is None:
            tasks.pop(task, None)
        else:
            tasks[task] = document
    return latest


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_SAVE, _SAVE, _SNAPSHOT), max_size=40), st.integers(0, 40))
def test_fold_equals_the_newest_saves_also_after_retention(ops: list[tuple[Any, ...]], cut: int) -> None:
    """Snapshots are made from what their writer had read (up to ``lag`` saves behind, as a busy owner's
    would), stored after those saves. The whole log folds to the newest save of every task; what retention
    leaves (a prefix cut off) folds to the same for every connector a retained snapshot covers."""
    log: list[Record] = []
    saves: list[tuple[int, ConnectorKey, str, dict[str, Any] | None]] = []
    snapshots: dict[ConnectorKey, list[tuple[int, int]]] = {}  # key → (offset, through)
    for op in ops:
        offset = len(log)
        if op[0] == "save":
            _, tenant, connector, task, document = op
            saves.append((offset, (tenant, connector), task, document))
            log.append(_record(offset, _task(tenant, connector, task, document)))
        else:
            _, tenant, connector, lag = op
            through = max(0, offset - lag)
            tasks = _truth(saves, through).get((tenant, connector), {})
            log.append(_record(offset, snapshot_record(tenant, connector, through, tasks)))
            snapshots.setdefault((tenant, connector), []).append((offset, through))
    everything = _truth(saves, len(log))
    state = fold(log)
    for key in {key for _, key, _, _ in saves}:
        assert _documents(state, key) == everything.get(key, {}), key
    cut = min(cut, len(log))
    retained = fold(log[cut:])
    for key, made in snapshots.items():
        if max((through for offset, through in made if offset >= cut), default=-1) >= cut:
            assert _documents(retained, key) == everything.get(key, {}), key


@given(
    task=st.text(min_size=1, max_size=20),
    tenant=st.one_of(st.none(), st.text(alphabet="abc-_0123", min_size=1, max_size=8)),
)
def test_a_compacted_key_names_one_tenants_task_and_folds_back_to_it(task: str, tenant: str | None) -> None:
    headers = [] if tenant is None else [(TENANT_HEADER, tenant.encode())]
    keyed = RecordData(orjson.dumps({"p": 1}), task_key(tenant, "c", task), headers)
    other = RecordData(orjson.dumps({"p": 2}), task_key("someone-else", "c", task), [(TENANT_HEADER, b"someone-else")])
    assert task_key(tenant, "c", task) != task_key("someone-else", "c", task) or tenant == "someone-else"
    state = fold(_log(keyed, other))
    if tenant != "someone-else":
        assert _documents(state, (tenant, "c")) == {task: {"p": 1}}
