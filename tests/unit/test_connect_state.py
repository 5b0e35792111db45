"""The cluster's connectors as records of ``__connectors`` (``server.connect.state``): who sees and changes what,
what a change writes, and that folding the written records gives the state the coordinator held."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.connect.state import (
    ConnectorError,
    Connectors,
    Records,
    create_or_update,
    delete,
    pause,
    restart,
)

SINK = {"connector.class": "hdfs-sink", "tasks.max": "2", "topics": "t", "namenode": "http://n:1", "path": "/p"}


def made(state: Connectors, name: str = "c", tenant: str | None = "alice", **changes: str) -> Records:
    (_, _), records = create_or_update(state, name, {**SINK, **changes}, tenant=tenant, admin=False, now_ms=1)
    for key, value in records:
        state.apply(key, value)
    return records


def test_a_connector_is_its_tenants_and_its_name_is_taken_for_everyone() -> None:
    state = Connectors()
    made(state)
    assert [c.name for c in state.visible("alice", admin=False)] == ["c"]
    assert state.visible("bob", admin=False) == []
    assert [c.tenant for c in state.visible(None, admin=True)] == ["alice"]
    with pytest.raises(ConnectorError) as hidden:
        state.get("c", "bob", admin=False)
    assert hidden.value.status == 404
    with pytest.raises(ConnectorError) as taken:
        create_or_update(state, "c", SINK, tenant="bob", admin=False, now_ms=2)
    assert (taken.value.status, taken.value.code) == (409, "CONNECTOR_EXISTS")
    for change in (
        lambda: pause(state, "c", paused=True, tenant="bob", admin=False),
        lambda: restart(state, "c", task=None, tenant="bob", admin=False),
        lambda: delete(state, "c", tenant="bob", admin=False),
    ):
        with pytest.raises(ConnectorError) as refused:
            change()
        assert refused.value.status == 404
    # The admin changes it; it stays alice's.
    (_, made_now), records = create_or_update(state, "c", {**SINK, "tasks.max": "3"}, tenant=None, admin=True, now_ms=3)
    assert not made_now and records
    for key, value in records:
        state.apply(key, value)
    assert state.by_name["c"].tenant == "alice" and state.by_name["c"].tasks == 3


def test_the_same_configuration_again_writes_nothing_and_post_refuses_an_existing_name() -> None:
    state = Connectors()
    made(state)
    assert create_or_update(state, "c", SINK, tenant="alice", admin=False, now_ms=5)[1] == []
    with pytest.raises(ConnectorError) as exists:
        create_or_update(state, "c", SINK, tenant="alice", admin=False, now_ms=5, must_be_new=True)
    assert exists.value.status == 409


def test_restarts_move_the_generations_a_task_runs_under() -> None:
    state = Connectors()
    made(state)
    before = [state.by_name["c"].task_generation(t) for t in range(2)]
    for key, value in restart(state, "c", task=1, tenant="alice", admin=False)[1]:
        state.apply(key, value)
    assert state.by_name["c"].task_generation(0) == before[0]
    assert state.by_name["c"].task_generation(1) != before[1]
    for key, value in restart(state, "c", task=None, tenant="alice", admin=False)[1]:
        state.apply(key, value)
    assert all(state.by_name["c"].task_generation(t) != before[t] for t in range(2))
    with pytest.raises(ConnectorError) as unknown:
        restart(state, "c", task=2, tenant="alice", admin=False)
    assert unknown.value.code == "TASK_NOT_FOUND"


def test_bad_names_are_refused() -> None:
    for name in ("", ".hidden", "a/b", "x" * 101, "a b"):
        with pytest.raises(ConnectorError) as bad:
            create_or_update(Connectors(), name, SINK, tenant=None, admin=True, now_ms=1)
        assert bad.value.status == 400


_operations = st.lists(
    st.tuples(
        st.sampled_from(["put", "pause", "resume", "restart", "restart-task", "delete"]),
        st.sampled_from(["a", "b"]),
        st.sampled_from(["1", "2"]),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(_operations)
def test_folding_the_written_records_gives_the_coordinators_state(operations: list[tuple[str, str, str]]) -> None:
    live, log = Connectors(), Records()
    for operation, name, tasks in operations:
        try:
            if operation == "put":
                _, records = create_or_update(
                    live, name, {**SINK, "tasks.max": tasks}, tenant="alice", admin=False, now_ms=len(log)
                )
            elif operation in ("pause", "resume"):
                _, records = pause(live, name, paused=operation == "pause", tenant="alice", admin=False)
            elif operation == "restart":
                _, records = restart(live, name, task=None, tenant="alice", admin=False)
            elif operation == "restart-task":
                _, records = restart(live, name, task=0, tenant="alice", admin=False)
            else:
                _, records = delete(live, name, tenant="alice", admin=False)
        except ConnectorError:
            continue
        for key, value in records:
            live.apply(key, value)
        log += records
    folded = Connectors()
    newest = dict(log)  # what compaction keeps: the newest record of each key
    for key, value in log:
        folded.apply(key, value)
    compacted = Connectors()
    for key, value in newest.items():
        compacted.apply(key, value)
    assert folded.by_name == live.by_name == compacted.by_name
