"""Kafka's classic consumer group protocol: members, generations, the leader's assignment. No I/O.

A Kafka group is assigned by its members: every member sends JoinGroup; once all known members have
(or the rebalance timeout has passed, dropping those that did not), the generation moves on, one member
is made leader and gets everyone's subscriptions; the leader computes the assignment and sends it in its
SyncGroup, which hands each member its part. Heartbeats keep a member and tell it when to rejoin; a member
that stops (kill -9) is dropped when its session times out and the others rebalance.

The membership lives in memory at the group's coordinator (the ring owner of ``__group:<name>``, as for
Talos groups), and is recorded, as Kafka records its group metadata, in ``__consumer_offsets`` through the
Talos group coordinator each time a rebalance completes and when the last member leaves
(:meth:`KafkaGroup.membership`, :attr:`KafkaGroup.changed`). A coordinator that restarted, or that the ring
gave the group, restores those members (:meth:`KafkaGroup.restored`), each with a fresh session: a member that
comes back heartbeats and commits with its id and generation as before (Quix Streams treats a refused commit
as fatal), one that does not is dropped when its session runs out and the others rebalance. A commit carries
the member's generation, and only the current generation's members may commit: a member that was paused past
its session cannot overwrite what the partition's new holder committed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import uuid
from dataclasses import dataclass, field

from server.kafka.protocol.errors import ErrorCode

__all__ = ["JoinResult", "KafkaGroup", "Member", "Memberships"]

EMPTY = "Empty"
PREPARING = "PreparingRebalance"
COMPLETING = "CompletingRebalance"
STABLE = "Stable"


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # for the leader: (id, instance, metadata)


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_s: float
    rebalance_s: float
    protocols: list[tuple[str, bytes]]
    last_seen: float
    assignment: bytes = b""
    joining: asyncio.Future[JoinResult] | None = None
    syncing: asyncio.Future[tuple[ErrorCode, bytes]] | None = None

    def metadata(self, protocol: str) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")


@dataclass
class KafkaGroup:
    name: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    rebalance_deadline: float = 0.0
    changed: bool = False  # a rebalance completed, or the last member left, since the membership was recorded

    # ---------------------------------------------------------------- recorded membership

    def membership(self) -> dict[str, object]:
        """What a coordinator that takes the group over restores (JSON)."""
        return {
            "generation": self.generation,
            "protocol_type": self.protocol_type,
            "protocol": self.protocol,
            "leader": self.leader,
            "members": [
                {
                    "id": m.member_id,
                    "instance": m.instance_id,
                    "client_id": m.client_id,
                    "host": m.client_host,
                    "session_s": m.session_s,
                    "rebalance_s": m.rebalance_s,
                    "protocols": [[name, base64.b64encode(data).decode()] for name, data in m.protocols],
                    "assignment": base64.b64encode(m.assignment).decode(),
                }
                for m in (self.members.values() if self.state == STABLE else ())
            ],
        }

    @classmethod
    def restored(cls, name: str, doc: object, now: float) -> KafkaGroup:
        """The group as :meth:`membership` recorded it, its members' sessions starting ``now``; an empty group
        (at the recorded generation) when there were none or the record cannot be read."""
        group = cls(name)
        if not isinstance(doc, dict):
            return group
        try:
            group.generation = int(doc["generation"])
            members = {
                str(m["id"]): Member(
                    str(m["id"]),
                    None if m.get("instance") is None else str(m["instance"]),
                    str(m.get("client_id", "")),
                    str(m.get("host", "")),
                    float(m["session_s"]),
                    float(m["rebalance_s"]),
                    [(str(p), base64.b64decode(d)) for p, d in m["protocols"]],
                    now,
                    base64.b64decode(m.get("assignment", "")),
                )
                for m in doc.get("members") or []
            }
        except (KeyError, TypeError, ValueError, binascii.Error):
            return cls(name)
        if members:
            group.members = members
            group.state = STABLE
            group.protocol_type = doc.get("protocol_type")
            group.protocol = doc.get("protocol")
            group.leader = doc.get("leader") if doc.get("leader") in members else next(iter(members))
        return group

    # ---------------------------------------------------------------- join and sync

    def join(
        self,
        now: float,
        *,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        session_s: float,
        rebalance_s: float,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> asyncio.Future[JoinResult]:
        """A JoinGroup; its answer is the future, resolved once the rebalance it takes part in completes."""
        answer: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        if self.members and protocol_type != self.protocol_type:
            answer.set_result(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return answer
        names = {name for name, _ in protocols}
        if not names or any(not names & {n for n, _ in m.protocols} for m in self.members.values()):
            answer.set_result(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return answer
        if member_id and member_id not in self.members:
            answer.set_result(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id))
            return answer
        if not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
        member = self.members.get(member_id)
        if member is None:
            member = self.members[member_id] = Member(
                member_id, instance_id, client_id, client_host, session_s, rebalance_s, protocols, now
            )
        else:
            member.protocols, member.session_s, member.rebalance_s = protocols, session_s, rebalance_s
            member.last_seen = now
            if member.joining is not None and not member.joining.done():  # a resend: the new one is answered
                member.joining.set_result(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id))
        self.protocol_type = protocol_type
        member.joining = answer
        self._prepare(now)
        self._try_complete(now)
        return answer

    def _prepare(self, now: float) -> None:
        if self.state != PREPARING:
            self.state = PREPARING
            self.rebalance_deadline = now + max((m.rebalance_s for m in self.members.values()), default=0.0)
            for member in self.members.values():  # a sync in flight belongs to the old generation
                if member.syncing is not None and not member.syncing.done():
                    member.syncing.set_result((ErrorCode.REBALANCE_IN_PROGRESS, b""))
                member.syncing = None

    def _try_complete(self, now: float) -> None:
        """End the join phase once every member has joined, or the deadline has passed (dropping the rest)."""
        if self.state != PREPARING:
            return
        waiting = [m for m in self.members.values() if m.joining is None]
        if waiting and now < self.rebalance_deadline:
            return
        for member in waiting:
            del self.members[member.member_id]
        if not self.members:
            self.state, self.leader, self.protocol = EMPTY, None, None
            self.generation += 1
            self.changed = True
            return
        self.generation += 1
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        self.protocol = self._choose_protocol()
        self.state = COMPLETING
        everyone = tuple((m.member_id, m.instance_id, m.metadata(self.protocol)) for m in self.members.values())
        for member in self.members.values():
            member.last_seen = now
            future, member.joining = member.joining, None
            if future is not None and not future.done():
                future.set_result(
                    JoinResult(
                        ErrorCode.NONE,
                        self.generation,
                        self.protocol_type,
                        self.protocol,
                        self.leader or "",
                        member.member_id,
                        everyone if member.member_id == self.leader else (),
                    )
                )

    def _choose_protocol(self) -> str:
        """The protocol every member supports, by the members' preference order (Kafka's vote, simplified:
        the leader's first choice that all support)."""
        members = list(self.members.values())
        common = set.intersection(*({name for name, _ in m.protocols} for m in members))
        leader = self.members[self.leader] if self.leader in self.members else members[0]
        return next(name for name, _ in leader.protocols if name in common)

    def sync(
        self, now: float, member_id: str, generation: int, assignments: dict[str, bytes]
    ) -> asyncio.Future[tuple[ErrorCode, bytes]]:
        answer: asyncio.Future[tuple[ErrorCode, bytes]] = asyncio.get_running_loop().create_future()
        member = self.members.get(member_id)
        if member is None:
            answer.set_result((ErrorCode.UNKNOWN_MEMBER_ID, b""))
        elif generation != self.generation:
            answer.set_result((ErrorCode.ILLEGAL_GENERATION, b""))
        elif self.state == PREPARING:
            answer.set_result((ErrorCode.REBALANCE_IN_PROGRESS, b""))
        elif self.state == STABLE:
            member.last_seen = now
            answer.set_result((ErrorCode.NONE, member.assignment))
        else:  # completing: the leader's sync ends it; the others wait for it
            member.last_seen = now
            member.syncing = answer
            if member_id == self.leader:
                for each in self.members.values():
                    each.assignment = assignments.get(each.member_id, b"")
                self.state = STABLE
                self.changed = True
                for each in self.members.values():
                    waiting, each.syncing = each.syncing, None
                    if waiting is not None and not waiting.done():
                        waiting.set_result((ErrorCode.NONE, each.assignment))
        return answer

    # ---------------------------------------------------------------- liveness

    def heartbeat(self, now: float, member_id: str, generation: int) -> ErrorCode:
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        member.last_seen = now
        if self.state == PREPARING:
            return ErrorCode.REBALANCE_IN_PROGRESS
        if generation != self.generation:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def leave(self, now: float, member_id: str) -> ErrorCode:
        member = self.members.pop(member_id, None)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._drop(member)
        self._rebalance(now)
        return ErrorCode.NONE

    def expire(self, now: float) -> None:
        """Drop members whose session ran out (not those waiting in a join: the deadline decides for them);
        end a join phase whose deadline has passed."""
        gone = [m for m in self.members.values() if m.joining is None and now - m.last_seen > m.session_s]
        for member in gone:
            del self.members[member.member_id]
            self._drop(member)
        if gone:
            self._rebalance(now)
        self._try_complete(now)

    @staticmethod
    def _drop(member: Member) -> None:
        """Answer what a member that is gone still waits for."""
        if member.joining is not None and not member.joining.done():
            member.joining.set_result(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID))
        if member.syncing is not None and not member.syncing.done():
            member.syncing.set_result((ErrorCode.UNKNOWN_MEMBER_ID, b""))

    def _rebalance(self, now: float) -> None:
        if not self.members:
            self.state, self.leader, self.protocol = EMPTY, None, None
            self.generation += 1
            self.changed = True
            return
        self._prepare(now)
        self._try_complete(now)

    # ---------------------------------------------------------------- commits

    def check_commit(self, now: float, member_id: str, generation: int) -> ErrorCode:
        """Whether a commit may be stored: from a member of the current generation, or, with generation -1, for
        a group with no members (a consumer that assigns itself partitions, or an admin tool)."""
        if generation < 0 and not member_id:
            return ErrorCode.NONE if not self.members else ErrorCode.REBALANCE_IN_PROGRESS
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != self.generation:
            return ErrorCode.ILLEGAL_GENERATION
        # As Kafka's coordinator: while the group prepares a rebalance, a member of the current generation still
        # holds its partitions (and commits what it did before it revokes them); while the join completes, the
        # new assignment is not handed out yet, and a commit waits for it.
        if self.state == COMPLETING:
            return ErrorCode.REBALANCE_IN_PROGRESS
        self.members[member_id].last_seen = now
        return ErrorCode.NONE


class Memberships:
    """The Kafka groups this server coordinates."""

    def __init__(self) -> None:
        self.groups: dict[str, KafkaGroup] = {}

    def group(self, name: str) -> KafkaGroup:
        group = self.groups.get(name)
        if group is None:
            group = self.groups[name] = KafkaGroup(name)
        return group

    def restore(self, name: str, recorded: object, now: float) -> KafkaGroup:
        """The group, restored from its recorded membership unless another call restored or made it meanwhile."""
        group = self.groups.get(name)
        if group is None:
            group = self.groups[name] = KafkaGroup.restored(name, recorded, now)
        return group

    def changed(self) -> list[KafkaGroup]:
        """Groups whose membership is to be recorded (each taken once)."""
        out = [group for group in self.groups.values() if group.changed]
        for group in out:
            group.changed = False
        return out

    def tick(self, now: float) -> None:
        for name, group in list(self.groups.items()):
            group.expire(now)
            if group.state == EMPTY and not group.members and not group.changed:
                del self.groups[name]

    def forget(self, keep: set[str]) -> None:
        """Drop groups another server coordinates now (the ring moved them)."""
        for name in list(self.groups):
            if name not in keep:
                group = self.groups.pop(name)
                for member in group.members.values():
                    KafkaGroup._drop(member)
