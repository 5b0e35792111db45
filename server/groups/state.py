"""One consumer group's membership and partition locks (Hippo): pure logic, the clock passed in.

Exclusive mode. Every partition of the group's topics is held by at most one member at a time, under a
**lock** that each heartbeat renews for the member's session timeout. A lock that is not renewed expires
and frees the partition; the member's SDK stops consuming it by then on its own clock (it counts the
session from when it *sent* its last good heartbeat, which is never later than when the coordinator got
it). A membership change computes a sticky target (:func:`assign`) and bumps the generation. Partitions
whose lock is held by another member than the target are **revoked**: the holder is told in its next
heartbeat, commits, and releases by leaving the partition out of its next heartbeat's ``owned``. Only then
(or when the lock expires) is the partition granted to its new member. So there is never a moment when
two members may consume one partition.

Each grant carries the generation it was made in; a commit names that generation, so a member that lost
a partition (even one that got it back later) cannot move its offset with a stale commit.

After a coordinator takes a group over, it does not know which locks the old coordinator handed out. For
one session timeout (``grace_until``) it grants a partition only to a member that says it holds it
(``owned``); after that, every lock handed out before the takeover has expired.

Broadcast mode. Every member gets every partition; there are no locks, and each member's offsets are its
own (keyed by its ``instance`` name).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from server.errors import ApiError
from server.groups.assignment import TopicPartition, assign

__all__ = ["BROADCAST", "EXCLUSIVE", "GroupState", "Lock", "Member", "OffsetKey", "tp_json", "unknown_member"]

EXCLUSIVE = "exclusive"
BROADCAST = "broadcast"
OffsetKey = tuple[str, str, int]  # (instance, topic, partition); instance is "" in exclusive mode


@dataclass(slots=True)
class Lock:
    member: str
    generation: int
    expires: float


@dataclass(slots=True)
class Member:
    member_id: str
    instance: str
    topics: tuple[str, ...]
    session_s: float
    deadline: float
    revoking: set[TopicPartition] = field(default_factory=set)


def tp_json(tp: TopicPartition) -> dict[str, object]:
    return {"topic": tp[0], "partition": tp[1]}


def unknown_member(group: str, member_id: str) -> ApiError:
    return ApiError(
        409,
        "UNKNOWN_MEMBER",
        f"member {member_id!r} is not in group {group!r} (its session expired, or the coordinator moved): join again",
        retriable=True,
    )


class GroupState:
    def __init__(
        self,
        name: str,
        *,
        generation: int = 0,
        mode: str | None = None,
        offsets: Mapping[OffsetKey, int] | None = None,
        grace_until: float = 0.0,
        kafka: dict[str, object] | None = None,
    ) -> None:
        self.name = name
        self.generation = generation
        self.mode = mode
        self.offsets: dict[OffsetKey, int] = dict(offsets or {})
        self.grace_until = grace_until
        # The group's Kafka members as last recorded (``server.kafka.group_state``), opaque here: a coordinator
        # that takes the group over restores them, as Kafka's does from its group metadata.
        self.kafka = kafka
        self.members: dict[str, Member] = {}
        self.locks: dict[TopicPartition, Lock] = {}
        self.target: dict[TopicPartition, str] = {}
        self.partitions: dict[str, int] = {}  # topic → partition count the target was computed for

    # ---------------------------------------------------------------- what the group reads

    def topics(self) -> set[str]:
        """Topics some member subscribes to."""
        return {t for m in self.members.values() for t in m.topics}

    def max_session_s(self) -> float:
        return max((m.session_s for m in self.members.values()), default=0.0)

    def _in_grace(self, now: float) -> bool:
        return now < self.grace_until

    # ---------------------------------------------------------------- membership

    def join(
        self,
        now: float,
        *,
        member_id: str,
        instance: str,
        topics: Collection[str],
        session_s: float,
        mode: str,
        partitions: Mapping[str, int],
        claims: Iterable[TopicPartition] = (),
    ) -> Member:
        self.expire(now)
        if self.members and mode != self.mode:
            raise ApiError(409, "GROUP_MODE_MISMATCH", f"group {self.name!r} is in {self.mode} mode, not {mode}")
        self.mode = mode
        member = Member(member_id, instance, tuple(sorted(set(topics))), session_s, now + session_s)
        self.members[member_id] = member
        self._rebalance(partitions)
        self._renew(member, now, claims)
        return member

    def heartbeat(
        self, now: float, member_id: str, owned: Iterable[TopicPartition], partitions: Mapping[str, int]
    ) -> Member:
        self.expire(now)
        member = self.members.get(member_id)
        if member is None:
            raise unknown_member(self.name, member_id)
        held = set(owned)
        for tp in [tp for tp in member.revoking if tp not in held]:  # released: free for its new member
            member.revoking.discard(tp)
            lock = self.locks.get(tp)
            if lock is not None and lock.member == member_id:
                del self.locks[tp]
        if dict(partitions) != self.partitions:  # a topic grew, or was created or deleted
            self._rebalance(partitions)
        self._renew(member, now, held)
        return member

    def leave(self, now: float, member_id: str) -> None:
        """The member stopped consuming (and committed): its partitions are free at once."""
        self.expire(now)
        if self.members.pop(member_id, None) is None:
            raise unknown_member(self.name, member_id)
        self._drop_locks(member_id)
        self._rebalance(self.partitions)

    def expire(self, now: float) -> bool:
        """Remove members whose session ran out (their locks with them); True if any did."""
        gone = [m.member_id for m in self.members.values() if m.deadline <= now]
        for member_id in gone:
            del self.members[member_id]
            self._drop_locks(member_id)
        for tp in [tp for tp, lock in self.locks.items() if lock.expires <= now]:
            del self.locks[tp]
        if gone:
            self._rebalance(self.partitions)
        return bool(gone)

    def _drop_locks(self, member_id: str) -> None:
        for tp in [tp for tp, lock in self.locks.items() if lock.member == member_id]:
            del self.locks[tp]

    def _rebalance(self, partitions: Mapping[str, int]) -> None:
        self.partitions = dict(partitions)
        self.generation += 1
        if self.mode == BROADCAST:
            return
        subscriptions = {m.member_id: m.topics for m in self.members.values()}
        self.target = assign({t: n for t, n in partitions.items() if n > 0}, subscriptions, self.target)
        for tp, lock in self.locks.items():
            holder = self.members.get(lock.member)
            if holder is None:
                continue
            if self.target.get(tp) == lock.member:
                holder.revoking.discard(tp)  # moved back before it was released
            else:
                holder.revoking.add(tp)

    def _renew(self, member: Member, now: float, claims: Iterable[TopicPartition]) -> None:
        """Extend the member's session and locks; grant it the free partitions the target gives it."""
        member.deadline = now + member.session_s
        if self.mode == BROADCAST:
            return
        for lock in self.locks.values():
            if lock.member == member.member_id:
                lock.expires = member.deadline
        claimed = set(claims)
        grace = self._in_grace(now)
        if grace:  # restore what members still hold from before the takeover, whatever the target says
            for tp in claimed:
                if tp not in self.locks and tp[0] in self.partitions and tp[1] < self.partitions[tp[0]]:
                    self.locks[tp] = Lock(member.member_id, self.generation, member.deadline)
                    if self.target.get(tp) != member.member_id:
                        member.revoking.add(tp)
        for tp, owner in self.target.items():
            if owner != member.member_id or tp in self.locks:
                continue
            if grace and tp not in claimed:
                continue  # the old coordinator may have given it to someone who has not come back yet
            self.locks[tp] = Lock(member.member_id, self.generation, member.deadline)

    # ---------------------------------------------------------------- answers and commits

    def assignment(self, member: Member) -> list[tuple[TopicPartition, int]]:
        """The partitions the member may consume now, each with the generation of its grant."""
        if self.mode == BROADCAST:
            return [((t, p), self.generation) for t in member.topics for p in range(self.partitions.get(t, 0))]
        held = [(tp, lock.generation) for tp, lock in self.locks.items() if lock.member == member.member_id]
        return sorted(held)

    def answer(self, member: Member) -> dict[str, object]:
        """The answer to a member's join or heartbeat."""
        return {
            "group": self.name,
            "member_id": member.member_id,
            "instance": member.instance,
            "generation": self.generation,
            "mode": self.mode,
            "session_timeout_ms": int(member.session_s * 1000),
            "heartbeat_interval_ms": max(int(member.session_s * 1000 / 4), 50),
            "assignment": [{**tp_json(tp), "generation": g} for tp, g in self.assignment(member)],
            "revoke": [tp_json(tp) for tp in sorted(member.revoking)],
        }

    def check_commit(
        self, now: float, member_id: str | None, items: Iterable[tuple[TopicPartition, int | None]]
    ) -> str:
        """The instance the offsets are stored under, or an error if the member may not commit them."""
        self.expire(now)
        if member_id is None:
            if self.members:
                raise ApiError(
                    409,
                    "GROUP_ACTIVE",
                    f"group {self.name!r} has {len(self.members)} active member(s): only they can commit",
                )
            return ""
        member = self.members.get(member_id)
        if member is None:
            raise unknown_member(self.name, member_id)
        if self.mode == BROADCAST:
            return member.instance
        for tp, generation in items:
            lock = self.locks.get(tp)
            if lock is None or lock.member != member_id or (generation is not None and generation != lock.generation):
                raise ApiError(
                    409,
                    "NOT_HOLDER",
                    f"member {member_id!r} does not hold {tp[0]}/{tp[1]}"
                    + (f" at generation {generation}" if generation is not None else "")
                    + ": it was revoked or its lock expired; the offset was not committed",
                )
        return ""

    def state(self, now: float) -> str:
        if not self.members:
            return "empty"
        if self.mode == EXCLUSIVE:
            if self._in_grace(now) or any(m.revoking for m in self.members.values()):
                return "rebalancing"
            if any(tp not in self.locks for tp in self.target):
                return "rebalancing"
        return "stable"
