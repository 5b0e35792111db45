"""The group state machine and the SDK's membership, together, on a simulated clock: no partition ever has
two members that may consume it, through joins, leaves, crashes, pauses and coordinator failovers."""

from __future__ import annotations

import contextlib
import random

import pytest

from server.errors import ApiError
from server.groups.state import BROADCAST, EXCLUSIVE, GroupState
from talos import CommitFailedError
from talos._group import Membership

PARTITIONS = {"t": 6}


class Client:
    """One consumer: the SDK's real Membership, acting on the coordinator's answers."""

    def __init__(self, name: str, session_s: float) -> None:
        self.name = name
        self.membership = Membership("g", ["t"], session_s=session_s, broadcast=False, instance=name)
        self.alive = True

    def act(self) -> None:
        """What the consumer's poll does: release revoked partitions (after committing)."""
        changes = self.membership.take_changes()
        self.membership.release(changes.revoked)

    def call(self, state: GroupState, now: float) -> None:
        self.act()
        m = self.membership
        owned = [(str(o["topic"]), int(o["partition"])) for o in m.next_call(now).body["owned"]]  # type: ignore[index]
        try:
            if m.member_id is None:
                member = state.join(
                    now,
                    member_id=self.name + str(now),
                    instance=self.name,
                    topics=["t"],
                    session_s=m.session_s,
                    mode=EXCLUSIVE,
                    partitions=PARTITIONS,
                    claims=owned if now < m.valid_until else [],
                )
            else:
                member = state.heartbeat(now, m.member_id, owned, PARTITIONS)
        except ApiError as exc:
            if exc.code != "UNKNOWN_MEMBER":
                raise
            m.forget_member()
            m.expire(now)
            return
        m.apply(state.answer(member), now)
        self.act()


def settle(state: GroupState, clients: list[Client], now: float) -> None:
    """Heartbeat rounds until revocations are released and grants made (the SDK beats again at once)."""
    for _ in range(4):
        for client in clients:
            client.call(state, now)


def check_exclusive(clients: list[Client], now: float) -> None:
    consuming: dict[tuple[str, int], str] = {}
    for client in clients:
        for tp in client.membership.active(now):
            assert tp not in consuming, f"{tp} consumed by {consuming[tp]} and {client.name} at {now:.2f}"
            consuming[tp] = client.name


@pytest.mark.parametrize("seed", range(60))
def test_no_partition_ever_has_two_consumers(seed: int) -> None:
    rng = random.Random(seed)
    now = 0.0
    state = GroupState("g")
    clients: list[Client] = []
    for _step in range(400):
        op = rng.random()
        live = [c for c in clients if c.alive]
        if op < 0.08 and len(clients) < 8:
            clients.append(Client(f"c{len(clients)}", rng.choice([1.0, 2.0, 3.0])))
            clients[-1].call(state, now)
        elif op < 0.12 and live:
            rng.choice(live).alive = False  # crash or pause: it stops heartbeating, and keeps its view
        elif op < 0.15 and live:
            client = rng.choice(live)  # graceful leave: stops consuming first
            if client.membership.member_id is not None:
                client.membership.release(list(client.membership.held))
                with contextlib.suppress(ApiError):
                    state.leave(now, client.membership.member_id)
            client.alive = False
        elif op < 0.17:
            # The coordinator moves: the new one has no members and waits out the largest session.
            recovered = max((c.membership.session_s for c in clients), default=0.0)
            state = GroupState("g", generation=state.generation + 1, grace_until=now + recovered)
        elif op < 0.6 and live:
            rng.choice(live).call(state, now)
        else:
            now += rng.uniform(0.0, 0.8)
        check_exclusive(clients, now)


def test_partitions_move_to_a_new_member_only_after_the_holder_releases() -> None:
    state = GroupState("g")
    a = Client("a", 3.0)
    a.call(state, 0.0)
    assert len(a.membership.active(0.0)) == 6
    b = Client("b", 3.0)
    b.call(state, 0.1)
    assert b.membership.active(0.1) == []  # a still holds them all: revoked, not released yet
    assert sum(len(m.revoking) for m in state.members.values()) == 3
    a.call(state, 0.2)  # a learns of the revocation, commits and stops consuming three...
    assert len(a.membership.active(0.2)) == 3
    b.call(state, 0.21)
    assert b.membership.active(0.21) == []  # ...but they are not free until a says so
    a.call(state, 0.25)
    b.call(state, 0.3)
    assert len(b.membership.active(0.3)) == 3
    assert state.state(0.3) == "stable"


def test_a_crashed_members_partitions_are_freed_when_its_lock_expires() -> None:
    state = GroupState("g")
    a, b = Client("a", 2.0), Client("b", 2.0)
    settle(state, [a, b], 0.1)
    assert len(b.membership.active(0.1)) == 3
    b.call(state, 1.9)  # a crashed after 0.1: its locks end at 2.1
    assert len(b.membership.active(1.9)) == 3
    b.call(state, 2.2)
    assert len(b.membership.active(2.2)) == 6
    assert a.membership.active(2.2) == []


def test_a_stale_commit_is_fenced_by_the_grant_generation() -> None:
    state = GroupState("g")
    a = Client("a", 2.0)
    settle(state, [a], 0.0)
    member = a.membership.member_id
    grant = a.membership.held[("t", 0)]
    assert state.check_commit(0.5, member, [(("t", 0), grant)]) == ""
    with pytest.raises(ApiError) as stale:
        state.check_commit(0.5, member, [(("t", 0), grant - 1)])
    assert stale.value.code == "NOT_HOLDER"
    with pytest.raises(ApiError) as expired:
        state.check_commit(5.0, member, [(("t", 0), grant)])
    assert expired.value.code == "UNKNOWN_MEMBER"
    with pytest.raises(ApiError) as active:
        b = Client("b", 2.0)
        b.call(state, 5.0)
        state.check_commit(5.1, None, [])
    assert active.value.code == "GROUP_ACTIVE"


def test_a_new_coordinator_restores_claimed_locks_and_grants_nothing_else_during_grace() -> None:
    state = GroupState("g")
    a, b = Client("a", 2.0), Client("b", 2.0)
    settle(state, [a, b], 0.1)
    held_by_a = set(a.membership.active(0.1))
    state = GroupState("g", generation=state.generation + 1, grace_until=0.2 + 2.0)
    a.call(state, 0.5)  # unknown member: it joins again next time
    a.call(state, 0.6)
    assert set(a.membership.active(0.6)) == held_by_a  # its own, restored: nothing of b's
    assert len(state.locks) == 3
    assert len(held_by_a) == 3
    settle(state, [a, b], 3.0)  # b paused past its session: its view expired; after grace it gets some again
    check_exclusive([a, b], 3.2)
    assert len(a.membership.active(3.2)) + len(b.membership.active(3.2)) == 6


def test_broadcast_gives_every_member_every_partition_and_offsets_per_instance() -> None:
    state = GroupState("g")
    one = state.join(
        0.0, member_id="1", instance="i1", topics=["t"], session_s=2, mode=BROADCAST, partitions=PARTITIONS
    )
    two = state.join(
        0.0, member_id="2", instance="i2", topics=["t"], session_s=2, mode=BROADCAST, partitions=PARTITIONS
    )
    assert len(state.assignment(one)) == len(state.assignment(two)) == 6
    assert state.check_commit(0.1, "2", [(("t", 0), None)]) == "i2"
    with pytest.raises(ApiError) as mismatch:
        state.join(0.2, member_id="3", instance="i3", topics=["t"], session_s=2, mode=EXCLUSIVE, partitions=PARTITIONS)
    assert mismatch.value.code == "GROUP_MODE_MISMATCH"


def test_a_commit_while_the_coordinator_has_forgotten_the_member_fails_instead_of_vanishing() -> None:
    """After a pause past its session, a member's heartbeat learns that the coordinator forgot it (409
    UNKNOWN_MEMBER) before it joins again; a commit in that window used to return as if done, sending nothing."""
    state = GroupState("g")
    a = Client("a", 2.0)
    settle(state, [a], 0.0)
    assert a.membership.commit_call({("t", 0): 5}) is not None
    a.membership.forget_member()
    assert a.membership.commit_call({}) is None  # nothing to commit: nothing to refuse
    with pytest.raises(CommitFailedError) as refused:
        a.membership.commit_call({("t", 0): 5})
    assert refused.value.code == "UNKNOWN_MEMBER" and refused.value.status == 409
