"""A Kafka group's recorded membership (``server.kafka.group_state``, ``server.groups.offsets``): what a
coordinator records after a rebalance and restores after a restart, and how the fold of ``__consumer_offsets``
carries it across the Talos coordinator's snapshots."""

from __future__ import annotations

import asyncio

from server.groups.offsets import commit_record, fold, kafka_record, snapshot_record
from server.groups.state import GroupState
from server.kafka.group_state import STABLE, KafkaGroup, Memberships
from server.kafka.protocol.errors import ErrorCode


async def stable_group() -> KafkaGroup:
    """A group of one member after its join and the leader's (its own) sync."""
    group = KafkaGroup("g")
    joined = await group.join(
        0.0,
        member_id="",
        instance_id="i-1",
        client_id="c",
        client_host="h",
        session_s=10.0,
        rebalance_s=10.0,
        protocol_type="consumer",
        protocols=[("range", b"\x00\x01meta")],
    )
    await group.sync(0.1, joined.member_id, joined.generation, {joined.member_id: b"its partitions"})
    return group


def test_a_rebalance_marks_the_group_changed_and_its_membership_restores_whole() -> None:
    group = asyncio.run(stable_group())
    assert group.state == STABLE and group.changed
    restored = KafkaGroup.restored("g", group.membership(), now=100.0)
    assert (restored.state, restored.generation, restored.leader, restored.protocol) == (
        STABLE,
        group.generation,
        group.leader,
        group.protocol,
    )
    for member_id, member in group.members.items():
        back = restored.members[member_id]
        assert (back.assignment, back.protocols, back.session_s) == (member.assignment, member.protocols, 10.0)
        assert back.last_seen == 100.0  # a fresh session
    member = next(iter(restored.members))
    assert restored.heartbeat(101.0, member, group.generation) == ErrorCode.NONE
    assert restored.check_commit(101.0, member, group.generation) == ErrorCode.NONE


def test_restored_members_that_do_not_come_back_expire_and_the_empty_group_is_recorded() -> None:
    group = asyncio.run(stable_group())
    memberships = Memberships()
    restored = memberships.restore("g", group.membership(), now=0.0)
    memberships.changed()
    memberships.tick(20.0)  # past the sessions
    assert not restored.members and restored.generation == group.generation + 1
    assert [g.name for g in memberships.changed()] == ["g"]  # recorded as empty, then forgotten
    memberships.tick(21.0)
    assert "g" not in memberships.groups


def test_a_record_that_cannot_be_read_restores_an_empty_group() -> None:
    assert not KafkaGroup.restored("g", {"generation": 3, "members": [{"id": "x"}]}, 0.0).members
    assert KafkaGroup.restored("g", None, 0.0).generation == 0


def test_the_fold_keeps_the_kafka_members_across_snapshots_and_a_deletion_clears_them() -> None:
    members = {"generation": 4, "members": []}
    state = GroupState("g", offsets={("", "t", 0): 5})
    before_kafka = snapshot_record(state)
    state.kafka = members
    records = [before_kafka, kafka_record("g", members), commit_record("g", {("", "t", 0): 9})]
    state.offsets[("", "t", 0)] = 9
    records.append(snapshot_record(state))
    recovered = fold("g", ((r.key, r.value) for r in records))
    assert recovered.kafka == members and recovered.offsets == {("", "t", 0): 9}
    state.kafka, state.offsets = None, {}
    deleted = fold("g", ((r.key, r.value) for r in [*records, snapshot_record(state)]))
    assert deleted.kafka is None and deleted.offsets == {}
