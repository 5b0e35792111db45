"""What a consumer knows between calls (both twins; no I/O): positions, the buffer of fetched messages, and
in a group its membership, processed and committed offsets, and retried partitions paused until due.

It decides what the group coordinator's steps (``talos._group_coordinator``) do: what to commit, when to
join again, what a rebalance revokes and assigns, which retried messages wait and which go to the dead
letters. A message handed out by ``poll`` counts as processed when the next ``poll`` starts or ``commit()``
is called, so a crash redelivers what was not committed (at least once).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote

from talos._codec import RecordData, encode_batch
from talos._errors import ConflictError, TalosError, TransportError, UnavailableError
from talos._fetcher import Message, Positions, TopicPartition
from talos._group import (
    RETRY_PREFIX,
    Changes,
    GroupCall,
    Membership,
    dead_letter_record,
    hold_back,
    retry_problem,
    retry_record,
)
from talos._routing import RouteTable

__all__ = ["Callback", "ConsumerState", "membership_for"]

log = logging.getLogger("talos.consumer")
_BATCH = {"content-type": "application/vnd.talos.batch"}
Callback = Callable[[list[TopicPartition]], Any]


def _produce_request(routes: RouteTable, topic: str, record: RecordData, timeout: float) -> dict[str, Any]:
    """Keyword arguments of the transport call that writes one record to a group's retry or dead-letter topic."""
    return {
        "method": "POST",
        "url": f"{routes.entry_point}/v1/topics/{quote(topic, safe='')}/partitions/0/messages",
        "body": bytes(encode_batch([record])),
        "headers": _BATCH,
        "timeout": timeout,
    }


class ConsumerState:
    """What a consumer knows between calls, with no I/O: positions, the buffer, and (in a group) its
    membership, processed and committed offsets, and retried partitions paused until due. Both twins."""

    def __init__(
        self,
        *,
        start: str,
        committed: bool = False,
        partitions: list[TopicPartition],
        membership: Membership | None,
        auto_commit: bool,
        auto_commit_interval_s: float,
        on_assign: Callback | None,
        on_revoke: Callback | None,
        on_lost: Callback | None,
        max_retries: int,
    ) -> None:
        self.positions = Positions(start, committed=committed)
        self.static = partitions
        self.membership = membership
        self.buffer: list[Message] = []
        self.consumed: dict[TopicPartition, int] = {}  # next offset after what was handed out
        self.committed: dict[TopicPartition, int] = {}
        self.paused: dict[TopicPartition, float] = {}  # retry partitions: monotonic time the head is due
        self.malformed: dict[tuple[TopicPartition, int], str] = {}  # buffered retry records that cannot be retried
        self.dead_letters: list[tuple[Message, str]] = []  # handed out, never to the caller: to send to the DLQ
        self.auto_commit = auto_commit
        self.auto_commit_interval_s = auto_commit_interval_s
        self.last_commit = time.monotonic()
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        self.on_lost = on_lost
        self.max_retries = max_retries

    def assignment(self, now: float) -> list[TopicPartition]:
        return self.membership.active(now) if self.membership is not None else list(self.static)

    def to_fetch(self, now: float) -> list[TopicPartition]:
        return [tp for tp in self.assignment(now) if self.paused.get(tp, 0.0) <= now]

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.buffer = [m for m in self.buffer if (m.topic, m.partition) != tp]
        self.positions.next[tp] = offset
        self.paused.pop(tp, None)

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        """Stop consuming: drop buffered messages and the positions (the next holder starts at the commit)."""
        gone = set(tps)
        self.buffer = [m for m in self.buffer if (m.topic, m.partition) not in gone]
        for tp in gone:
            self.positions.next.pop(tp, None)
            self.consumed.pop(tp, None)
            self.committed.pop(tp, None)
            self.paused.pop(tp, None)

    def rewind(self, tp: TopicPartition, offset: int) -> None:
        """Read ``tp`` again from ``offset``: messages from there on were not handed out. (If the partition
        is lost or revoked its position goes anyway; if the lock was only late to be renewed, nothing is
        skipped.)"""
        if self.positions.next.get(tp, -1) > offset:
            self.positions.next[tp] = offset

    def received(self, tp: TopicPartition, messages: list[Message]) -> None:
        """Buffer fetched messages; a retried message waits (and its partition pauses) until it is due."""
        if self.membership is not None and not self.membership.holds(tp, time.monotonic()):
            if messages:
                self.rewind(tp, messages[0].offset)  # revoked or expired while the fetch was in flight
            return
        if tp[0].startswith(RETRY_PREFIX):
            messages, resume, wait_s = hold_back(messages, int(time.time() * 1000))
            if resume is not None:
                self.positions.next[tp] = resume
                self.paused[tp] = time.monotonic() + wait_s
            for message in messages:
                problem = retry_problem(message)
                if problem is not None:
                    self.malformed[(tp, message.offset)] = problem
        self.buffer.extend(messages)

    def hand_out(self, max_messages: int, *, mark: bool = True) -> list[Message]:
        """The next buffered messages of partitions still held; ``mark``: count them as consumed now."""
        if self.membership is not None:
            now = time.monotonic()
            kept = []
            for message in self.buffer:
                tp = (message.topic, message.partition)
                if self.membership.holds(tp, now):
                    kept.append(message)
                else:
                    self.rewind(tp, message.offset)
            self.buffer = kept
        out, self.buffer = self.buffer[:max_messages], self.buffer[max_messages:]
        dead: set[int] = set()
        if self.malformed:
            for index, message in enumerate(out):
                problem = self.malformed.get(((message.topic, message.partition), message.offset))
                if problem is not None:
                    self.dead_letters.append((message, problem))
                    dead.add(index)
        if mark:
            for message in out:
                self.consumed[(message.topic, message.partition)] = message.offset + 1
            # A malformed retry record counts as consumed (commits move past it), but the caller never sees
            # it: it goes to the dead letters. Without ``mark``, :meth:`deliver` drops it.
            for index in dead:
                del self.malformed[((out[index].topic, out[index].partition), out[index].offset)]
            out = [m for index, m in enumerate(out) if index not in dead]
        return out

    def dead_lettered(self, message: Message, reason: str, error: TalosError | None) -> None:
        where = f"{message.topic}/{message.partition}@{message.offset}"
        if error is None:
            log.warning("group %s: %s: %s; sent to the dead letters", self.group().group, where, reason)
        else:
            log.warning(
                "group %s: %s: %s; could not send it to the dead letters: %s", self.group().group, where, reason, error
            )

    def take_dead_letters(self) -> list[tuple[Message, str]]:
        taken, self.dead_letters = self.dead_letters, []
        return taken

    def dead_letter_request(self, routes: RouteTable, message: Message, reason: str, timeout: float) -> dict[str, Any]:
        """The transport call that puts a retry record that cannot be retried into the dead-letter topic."""
        topic, record = dead_letter_record(message, group=self.group().group, reason=reason)
        return _produce_request(routes, topic, record, timeout)

    def deliver(self, message: Message) -> bool:
        """For the iterators, one message at a time: True if its partition is still ours (it then counts as
        consumed); else it is not handed out, and the partition is read again from it if it stays ours."""
        tp = (message.topic, message.partition)
        if self.membership is None or self.membership.holds(tp, time.monotonic()):
            self.consumed[tp] = message.offset + 1
            return self.malformed.pop((tp, message.offset), None) is None  # a dead letter is not handed out
        self.malformed.pop((tp, message.offset), None)
        if self.positions.next.get(tp, -1) > message.offset:
            self.seek(tp, message.offset)  # also drops the partition's buffered messages after it
        return False

    def uncommitted(self, tps: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        keys = self.consumed if tps is None else [tp for tp in tps if tp in self.consumed]
        return {tp: self.consumed[tp] for tp in keys if self.committed.get(tp) != self.consumed[tp]}

    def commit_due(self) -> bool:
        """Time to auto-commit (only a group member has anywhere to commit to)."""
        due = time.monotonic() - self.last_commit >= self.auto_commit_interval_s
        return self.membership is not None and self.auto_commit and due

    def start_from(self, assigned: list[TopicPartition], answer: object) -> None:
        """Positions of newly assigned partitions: their committed offsets (else ``start``, looked up lazily)."""
        rows = answer.get("offsets", []) if isinstance(answer, dict) else []
        committed = {(str(r["topic"]), int(r["partition"])): int(r["offset"]) for r in rows}
        for tp in assigned:
            if tp in committed:
                self.positions.next[tp] = committed[tp]
                self.committed[tp] = committed[tp]

    # ---------------------------------------------------------------- group decisions (the twins do the I/O)

    def group(self) -> Membership:
        if self.membership is None:
            raise TalosError("this needs a consumer group: Consumer(url, group=..., topics=[...])")
        return self.membership

    def beat_failed(self, error: TalosError, *, first: bool) -> bool:
        """After a failed join or heartbeat: True to beat again at once (join again). The first join's
        errors other than unavailability are raised: a bad group name or topic fails the constructor."""
        membership = self.group()
        unavailable = isinstance(error, (UnavailableError, TransportError))
        if first and not unavailable and not (isinstance(error, ConflictError) and error.code == "UNKNOWN_MEMBER"):
            raise error
        if isinstance(error, ConflictError):
            log.info("group %s: %s; joining again", membership.group, error.message)
            membership.forget_member()
            return True
        if unavailable:
            log.info("group %s: heartbeat failed (%s); retrying", membership.group, error)
        else:
            log.warning("group %s: heartbeat failed: %s", membership.group, error)
        return False

    def take_changes(self) -> Changes | None:
        """What the heartbeats learned; lost partitions are dropped here (and ``on_lost`` told)."""
        if self.membership is None:
            return None
        changes = self.membership.take_changes()
        _log_changes(self.membership.group, changes)
        self.forget(changes.lost)
        if changes.lost and self.on_lost is not None:
            self.on_lost(list(changes.lost))
        return changes

    def revoke(self, tps: list[TopicPartition]) -> None:
        """After the commit: tell ``on_revoke``, stop consuming, and release (the next heartbeat says so)."""
        if self.on_revoke is not None:
            self.on_revoke(list(tps))
        self.forget(tps)
        self.group().release(tps)

    def assign(self, tps: list[TopicPartition], committed: object) -> None:
        self.start_from(tps, committed)
        if self.on_assign is not None:
            self.on_assign(list(tps))

    def commit_call(
        self, offsets: Mapping[TopicPartition, int] | None, tps: Iterable[TopicPartition] | None
    ) -> tuple[GroupCall | None, dict[TopicPartition, int]]:
        positions = dict(offsets) if offsets is not None else self.uncommitted(tps)
        self.last_commit = time.monotonic()  # also when refused: auto-commit tries again an interval later
        return self.group().commit_call(positions), positions

    def retry_request(
        self, routes: RouteTable, message: Message, delay: float, reason: str, timeout: float
    ) -> tuple[str, dict[str, Any]]:
        """The topic a retried message goes to, and the transport call that puts it there."""
        membership = self.group()
        if membership.broadcast:
            raise TalosError("retry() needs an exclusive consumer group")
        topic, record = retry_record(
            message, group=membership.group, delay_s=delay, reason=reason, max_retries=self.max_retries
        )
        return topic, _produce_request(routes, topic, record, timeout)

    def hint_wait(self, now: float, wait_ms: int) -> int:
        """A long poll should not outlast the moment a paused retry partition is due."""
        due = [t for t in self.paused.values() if t > now]
        return min(wait_ms, int((min(due) - now) * 1000) + 1) if due else wait_ms


def membership_for(
    group: str | None,
    topics: list[str],
    partitions: list[TopicPartition],
    *,
    session_timeout_s: float,
    broadcast: bool,
    instance: str | None,
) -> Membership | None:
    if group is None:
        if not topics and not partitions:
            raise ValueError("give topics=[...] or partitions=[(topic, partition), ...]")
        return None
    if partitions or not topics:
        raise ValueError("a group member names topics=[...]; the coordinator assigns the partitions")
    return Membership(group, topics, session_s=session_timeout_s, broadcast=broadcast, instance=instance)


def _log_changes(group: str, changes: Changes) -> None:
    if changes.lost:
        log.warning("group %s: lost %s (the lock expired before a heartbeat renewed it)", group, changes.lost)
    if changes.revoked:
        log.info("group %s: revoked %s", group, changes.revoked)
    if changes.assigned:
        log.info("group %s: assigned %s", group, changes.assigned)
