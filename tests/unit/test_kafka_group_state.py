"""The Kafka classic group protocol's membership (``server.kafka.group_state``), without a server."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from server.kafka.group_state import COMPLETING, EMPTY, PREPARING, STABLE, KafkaGroup, Memberships
from server.kafka.protocol.errors import ErrorCode


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


def _join(group: KafkaGroup, now: float, member_id: str = "", **changes: Any) -> asyncio.Future[Any]:
    options: dict[str, Any] = {
        "member_id": member_id,
        "instance_id": None,
        "client_id": "c",
        "client_host": "h",
        "session_s": 10.0,
        "rebalance_s": 30.0,
        "protocol_type": "consumer",
        "protocols": [("range", b"meta-" + member_id.encode())],
        **changes,
    }
    return group.join(now, **options)


def test_a_lone_member_joins_leads_and_syncs_its_own_assignment() -> None:
    async def test() -> None:
        group = KafkaGroup("g")
        joined = _join(group, 0.0)
        result = joined.result()
        assert (result.error, result.generation, result.protocol) == (ErrorCode.NONE, 1, "range")
        assert result.leader == result.member_id and len(result.members) == 1
        assert group.state == COMPLETING
        synced = group.sync(0.1, result.member_id, 1, {result.member_id: b"all"})
        assert synced.result() == (ErrorCode.NONE, b"all")
        assert group.state == STABLE

    run(test)


def test_a_second_member_makes_the_first_rejoin_and_only_the_leader_gets_the_members() -> None:
    async def test() -> None:
        group = KafkaGroup("g")
        first = _join(group, 0.0).result()
        group.sync(0.0, first.member_id, 1, {first.member_id: b"all"})
        second = _join(group, 1.0)
        assert not second.done() and group.state == PREPARING
        assert group.heartbeat(1.5, first.member_id, 1) == ErrorCode.REBALANCE_IN_PROGRESS
        # the first still holds its partitions while the group prepares: it commits what it did (as Kafka)
        assert group.check_commit(1.6, first.member_id, 1) == ErrorCode.NONE
        again = _join(group, 2.0, first.member_id)
        a, b = again.result(), second.result()
        assert a.generation == b.generation == 2
        assert a.leader == first.member_id and len(a.members) == 2 and b.members == ()
        assert group.check_commit(2.1, first.member_id, 2) == ErrorCode.REBALANCE_IN_PROGRESS  # completing
        waiting = group.sync(2.2, b.member_id, 2, {})
        assert not waiting.done()  # followers wait for the leader's assignment
        group.sync(2.3, a.member_id, 2, {a.member_id: b"p0", b.member_id: b"p1"})
        assert waiting.result() == (ErrorCode.NONE, b"p1")
        assert group.check_commit(2.4, first.member_id, 1) == ErrorCode.ILLEGAL_GENERATION
        assert group.check_commit(2.4, "nobody", 2) == ErrorCode.UNKNOWN_MEMBER_ID
        assert group.check_commit(2.4, b.member_id, 2) == ErrorCode.NONE

    run(test)


def test_a_silent_member_expires_and_the_rest_rebalance_without_it() -> None:
    async def test() -> None:
        group = KafkaGroup("g")
        a = _join(group, 0.0, session_s=5.0).result()
        b_future = _join(group, 0.5, session_s=5.0)
        a = _join(group, 0.6, a.member_id, session_s=5.0).result()
        b = b_future.result()
        group.sync(0.7, a.member_id, a.generation, {a.member_id: b"x", b.member_id: b"y"})
        group.heartbeat(4.0, a.member_id, a.generation)
        group.expire(6.0)  # b was last seen at 0.7: gone; a must rejoin
        assert set(group.members) == {a.member_id} and group.state == PREPARING
        rejoined = _join(group, 6.1, a.member_id).result()
        assert rejoined.generation == a.generation + 1 and len(rejoined.members) == 1

    run(test)


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_dropped() -> None:
    async def test() -> None:
        group = KafkaGroup("g")
        a = _join(group, 0.0, rebalance_s=3.0).result()
        group.sync(0.0, a.member_id, 1, {})
        newcomer = _join(group, 1.0, rebalance_s=3.0)
        group.expire(2.0)
        assert not newcomer.done()
        group.expire(4.5)  # past the deadline (1.0 + 3.0): a never rejoined
        result = newcomer.result()
        assert result.error == ErrorCode.NONE and result.leader == result.member_id
        assert set(group.members) == {result.member_id}

    run(test)


def test_leaving_and_protocol_mismatches() -> None:
    async def test() -> None:
        group = KafkaGroup("g")
        a = _join(group, 0.0).result()
        assert _join(group, 0.1, protocol_type="connect").result().error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert _join(group, 0.1, protocols=[("sticky", b"")]).result().error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert _join(group, 0.1, "stale-member").result().error == ErrorCode.UNKNOWN_MEMBER_ID
        assert group.leave(0.2, a.member_id) == ErrorCode.NONE
        assert group.state == EMPTY and not group.members
        assert group.leave(0.3, a.member_id) == ErrorCode.UNKNOWN_MEMBER_ID
        assert group.check_commit(0.4, "", -1) == ErrorCode.NONE  # an empty group takes a standalone commit

    run(test)


def test_memberships_forget_groups_that_moved_and_answer_their_waiters() -> None:
    async def test() -> None:
        memberships = Memberships()
        group = memberships.group("moving")
        a = _join(group, 0.0).result()
        waiting = _join(group, 0.1)  # a second member waits for a to rejoin
        memberships.forget(keep=set())
        assert "moving" not in memberships.groups
        assert waiting.result().error == ErrorCode.UNKNOWN_MEMBER_ID
        assert a.error == ErrorCode.NONE

    run(test)
