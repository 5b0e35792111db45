"""A consumer's membership of a group, as the coordinator's answers describe it (pure; both twins).

The coordinator grants each partition under a lock that lasts one session timeout past the heartbeat that
renewed it. This side counts the session from when it *sent* that heartbeat (never later than when the
coordinator got it), so it stops consuming a partition no later than the coordinator frees it: two
members never consume one partition at once. A revoked partition is released by leaving it out of the
next heartbeat, after the consumer has committed what it processed.

Retry and dead letters (JMQ): :func:`retry_record` builds the record a consumer republishes for a message
it could not process, to the group's retry topic with the time it is due, or, after ``max_retries``, to
the dead-letter topic with the reason; :func:`hold_back` keeps a retried message until it is due.
A record on the retry topic whose retry headers are not what :func:`retry_record` writes (missing, or not
numbers: :func:`retry_problem`) is a dead letter at once (:func:`dead_letter_record`): the consumer never
fails on what someone else wrote.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from talos._codec import RecordData
from talos._errors import CommitFailedError

__all__ = [
    "ATTEMPT_HEADER",
    "NOT_BEFORE_HEADER",
    "ORIGIN_HEADERS",
    "REASON_HEADER",
    "RETRY_PREFIX",
    "Changes",
    "GroupCall",
    "Membership",
    "dead_letter_record",
    "hold_back",
    "retry_problem",
    "retry_record",
]

RETRY_PREFIX = "__retry."
DEAD_LETTER_PREFIX = "__dlq."
ATTEMPT_HEADER = "talos-attempt"
NOT_BEFORE_HEADER = "talos-not-before"
REASON_HEADER = "talos-reason"
ORIGIN_HEADERS = ("talos-origin-topic", "talos-origin-partition", "talos-origin-offset")
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class GroupCall:
    method: str
    path: str
    body: dict[str, Any] | None = None


@dataclass(slots=True)
class Changes:
    """What the consumer must act on since it last looked."""

    assigned: list[TopicPartition] = field(default_factory=list)  # start consuming (from committed offsets)
    revoked: list[TopicPartition] = field(default_factory=list)  # commit, then release
    lost: list[TopicPartition] = field(default_factory=list)  # the lock expired: stop, do not commit


def _refs(tps: Iterable[TopicPartition]) -> list[dict[str, object]]:
    return [{"topic": t, "partition": p} for t, p in sorted(tps)]


class Membership:
    def __init__(
        self, group: str, topics: Iterable[str], *, session_s: float, broadcast: bool, instance: str | None
    ) -> None:
        self.group = group
        self.topics = list(dict.fromkeys(topics))
        self.session_s = session_s
        self.broadcast = broadcast
        self.instance = instance
        self.member_id: str | None = None
        self.heartbeat_interval_s = max(session_s / 4, 0.05)
        self.retry_topic: str | None = None
        self.dead_letter_topic: str | None = None
        self.held: dict[TopicPartition, int] = {}  # partition → generation of its grant
        self.valid_until = 0.0  # monotonic: our locks end then unless a heartbeat renews them
        self._revoking: set[TopicPartition] = set()
        self._taken: set[TopicPartition] = set()  # granted and seen by the consumer (its start offset is set)
        self._changes = Changes()
        self._lock = threading.Lock()
        self._base = f"/v1/groups/{quote(group, safe='')}"

    # ---------------------------------------------------------------- requests

    def next_call(self, now: float) -> GroupCall:
        """Join when not a member (claiming what we still hold, for a new coordinator); else heartbeat."""
        with self._lock:
            owned = _refs(self.held)  # a released partition is no longer held: leaving it out releases it
            if self.member_id is None:
                body: dict[str, Any] = {
                    "topics": self.topics,
                    "session_timeout_ms": int(self.session_s * 1000),
                    "mode": "broadcast" if self.broadcast else "exclusive",
                    "owned": owned if now < self.valid_until else [],
                }
                if self.instance:
                    body["instance"] = self.instance
                return GroupCall("POST", f"{self._base}/members", body)
            path = f"{self._base}/members/{quote(self.member_id, safe='')}/heartbeat"
            return GroupCall("POST", path, {"owned": owned})

    def leave_call(self) -> GroupCall | None:
        if self.member_id is None:
            return None
        return GroupCall("DELETE", f"{self._base}/members/{quote(self.member_id, safe='')}")

    def commit_call(self, positions: Mapping[TopicPartition, int]) -> GroupCall | None:
        """The commit of ``positions`` (None: nothing to commit). Raises :class:`CommitFailedError` while this
        member is out of the group (the coordinator forgot it, e.g. after a pause past its session): a commit
        then would be silently lost, and the caller must learn that its messages will be delivered again."""
        with self._lock:
            # A partition we do not hold goes too: the coordinator refuses it, and the caller learns.
            items = [
                {"topic": t, "partition": p, "offset": offset, "generation": self.held.get((t, p))}
                for (t, p), offset in sorted(positions.items())
            ]
            if not items:
                return None
            if self.member_id is None:
                raise CommitFailedError(
                    409,
                    "UNKNOWN_MEMBER",
                    f"not a member of group {self.group!r} now (its session expired or the coordinator moved): "
                    "the messages will be delivered again",
                )
            return GroupCall("POST", f"{self._base}/offsets", {"member_id": self.member_id, "offsets": items})

    def offsets_call(self) -> GroupCall:
        suffix = f"?instance={quote(self.instance, safe='')}" if self.broadcast and self.instance else ""
        return GroupCall("GET", f"{self._base}/offsets{suffix}")

    # ---------------------------------------------------------------- answers

    def apply(self, answer: Mapping[str, Any], sent_at: float) -> None:
        """Take a join or heartbeat answer for a request sent at ``sent_at`` (monotonic)."""
        granted = {(str(a["topic"]), int(a["partition"])): int(a["generation"]) for a in answer.get("assignment", [])}
        revoke = {(str(r["topic"]), int(r["partition"])) for r in answer.get("revoke", [])}
        with self._lock:
            self.member_id = str(answer["member_id"])
            self.session_s = int(answer.get("session_timeout_ms", self.session_s * 1000)) / 1000
            self.heartbeat_interval_s = max(int(answer.get("heartbeat_interval_ms", 0)) / 1000, 0.05)
            self.retry_topic = answer.get("retry_topic")
            self.dead_letter_topic = answer.get("dead_letter_topic")
            self.valid_until = sent_at + self.session_s
            for tp in [tp for tp in self.held if tp not in granted]:
                del self.held[tp]  # the coordinator no longer counts it ours (it expired there)
                self._revoking.discard(tp)
                self._taken.discard(tp)
                self._changes.lost.append(tp)
            for tp, generation in granted.items():
                if tp not in self.held:
                    self._changes.assigned.append(tp)
                self.held[tp] = generation
            for tp in revoke - self._revoking:
                if tp in self.held:
                    self._revoking.add(tp)
                    self._changes.revoked.append(tp)

    def forget_member(self) -> None:
        """The coordinator does not know us (it moved, or our session expired there): join again."""
        with self._lock:
            self.member_id = None

    def expire(self, now: float) -> None:
        """Our locks ran out without a renewing heartbeat: everything we held is lost."""
        with self._lock:
            if now < self.valid_until or not self.held:
                return
            self._changes.lost.extend(self.held)
            self.held.clear()
            self._revoking.clear()
            self._taken.clear()

    def take_changes(self) -> Changes:
        with self._lock:
            changes, self._changes = self._changes, Changes()
            # A partition assigned and lost (or revoked) before the consumer looked: only the last word counts.
            changes.assigned = [tp for tp in changes.assigned if tp in self.held and tp not in self._revoking]
            self._taken.update(changes.assigned)
            return changes

    def release(self, tps: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in tps:
                self.held.pop(tp, None)
                self._revoking.discard(tp)
                self._taken.discard(tp)

    def active(self, now: float) -> list[TopicPartition]:
        """The partitions to consume now: held, lock valid, not being revoked, and taken by the consumer
        (so it has set where to start: a partition granted a moment ago waits for that)."""
        with self._lock:
            if now >= self.valid_until:
                return []
            return sorted(tp for tp in self.held if tp in self._taken and tp not in self._revoking)

    def holds(self, tp: TopicPartition, now: float) -> bool:
        with self._lock:
            return now < self.valid_until and tp in self.held and tp in self._taken and tp not in self._revoking


_MAX_DIGITS = 19  # an int64: a longer "number" is not one this side wrote


def _count(raw: bytes | None) -> int | None:
    """A non-negative decimal header value, or None if it is not one."""
    if raw is None or not 0 < len(raw) <= _MAX_DIGITS or not raw.isdigit():
        return None
    return int(raw)


def retry_problem(message: Any) -> str | None:
    """Why a record on a retry topic cannot be retried (its retry headers are missing or malformed), or None."""
    if _count(message.header(NOT_BEFORE_HEADER)) is None:
        return f"malformed retry record: {NOT_BEFORE_HEADER} is not a time in ms"
    attempt = _count(message.header(ATTEMPT_HEADER))
    if attempt is None or attempt < 1:
        return f"malformed retry record: {ATTEMPT_HEADER} is not a positive count"
    topic, partition, offset = (message.header(name) for name in ORIGIN_HEADERS)
    if not topic or _count(partition) is None or _count(offset) is None:
        return f"malformed retry record: {', '.join(ORIGIN_HEADERS)} do not name a message"
    return None


def dead_letter_record(message: Any, *, group: str, reason: str) -> tuple[str, RecordData]:
    """The dead-letter topic and record of a message that cannot be retried: as it came, with the reason."""
    kept = tuple((k, v) for k, v in message.headers if k != REASON_HEADER)
    headers = (*kept, (REASON_HEADER, reason.encode()))
    return DEAD_LETTER_PREFIX + group, RecordData(message.value, message.key, headers)


def hold_back(messages: list[Any], now_ms: int) -> tuple[list[Any], int | None, float]:
    """Split retried messages at the first one not due yet: (due ones, offset to resume at, seconds to wait).
    A message without a valid due time is due (it goes to the dead letters)."""
    for index, message in enumerate(messages):
        due_ms = _count(message.header(NOT_BEFORE_HEADER)) or 0
        if due_ms > now_ms:
            return messages[:index], message.offset, (due_ms - now_ms) / 1000
    return messages, None, 0.0


def retry_record(
    message: Any, *, group: str, delay_s: float, reason: str, max_retries: int, now_ms: int | None = None
) -> tuple[str, RecordData]:
    """The topic and record that retry ``message``: the retry topic while attempts remain, else dead letters."""
    attempt = message.attempt + 1
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    origin = {name: message.header(name) for name in ORIGIN_HEADERS}
    if origin["talos-origin-topic"] is None:  # first failure: the message's own coordinates
        origin = dict(zip(ORIGIN_HEADERS, (message.topic, str(message.partition), str(message.offset)), strict=True))
    kept = [(k, v) for k, v in message.headers if k not in (ATTEMPT_HEADER, NOT_BEFORE_HEADER, REASON_HEADER)]
    kept = [(k, v) for k, v in kept if k not in ORIGIN_HEADERS]
    headers: list[tuple[str, bytes | None]] = [
        *kept,
        *((k, v if isinstance(v, bytes) else str(v).encode()) for k, v in origin.items()),
        (ATTEMPT_HEADER, str(attempt).encode()),
        (REASON_HEADER, reason.encode()),
    ]
    if attempt > max_retries:
        return DEAD_LETTER_PREFIX + group, RecordData(message.value, message.key, tuple(headers))
    headers.append((NOT_BEFORE_HEADER, str(now_ms + int(delay_s * 1000)).encode()))
    return RETRY_PREFIX + group, RecordData(message.value, message.key, tuple(headers))
