"""``Consumer`` and ``AsyncConsumer``: pull with long polls, from explicit partitions or as a group member.

Fetches ask for raw record batches (``Accept: application/vnd.talos.batch``) and decode them here, CRC
checked, so the server never parses records on the way out either.

With ``group=`` the consumer joins a consumer group: the coordinator grants it partitions under
time-limited locks (``talos._group``), a background heartbeat renews them and learns of revocations, and
offsets move only when it commits (by hand, or every ``auto_commit_interval_s``). A message handed out by
``poll`` (or the iterator) counts as processed when the next ``poll`` starts or ``commit()`` is called,
so a crash redelivers what was not committed (at least once).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from abc import abstractmethod
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, Self
from urllib.parse import quote

import orjson

from talos._admin import DEFAULT_URL, offsets_call, send
from talos._clients import Asynchronous, Blocking, ClientBase, operation
from talos._codec import RecordData, decode_batches, encode_batch
from talos._errors import (
    BatchError,
    CommitFailedError,
    ConflictError,
    OffsetOutOfRangeError,
    QuotaExceededError,
    TalosError,
    TransportError,
    UnavailableError,
)
from talos._group import (
    ATTEMPT_HEADER,
    RETRY_PREFIX,
    Changes,
    GroupCall,
    Membership,
    dead_letter_record,
    hold_back,
    retry_problem,
    retry_record,
)
from talos._routing import RouteTable, refresh_steps
from talos._steps import Request, Steps, http, pause
from talos._transport import AnyTransport, AsyncTransport, Response, Transport, check

__all__ = ["AsyncConsumer", "Consumer", "Message"]

log = logging.getLogger("talos.consumer")
_ACCEPT = {"accept": "application/vnd.talos.batch"}
_BATCH = {"content-type": "application/vnd.talos.batch"}
TopicPartition = tuple[str, int]
Callback = Callable[[list[TopicPartition]], Any]


@dataclass(frozen=True, slots=True)
class Message:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = field(default=())

    def header(self, name: str) -> bytes | None:
        """The last value of header ``name``, or None."""
        for key, value in reversed(self.headers):
            if key == name:
                return value
        return None

    @property
    def attempt(self) -> int:
        """How many times the message failed and was retried (0: the first delivery, or not a count)."""
        raw = self.header(ATTEMPT_HEADER)
        return int(raw) if raw and len(raw) < 10 and raw.isdigit() else 0


def _decode(topic: str, partition: int, data: bytes, position: int) -> tuple[list[Message], int]:
    """The messages of fetched batches from ``position``, and the position after them. A corrupt batch is
    stepped over with a warning (a crash would stop the consumer on stored data for good)."""
    out = []
    after = position
    try:
        for batch in decode_batches(data):
            if batch.error is not None:
                first, last = batch.header.base_offset, batch.header.next_offset - 1
                log.warning(
                    "%s/%d: skipping corrupt batch at offsets %d..%d: %s", topic, partition, first, last, batch.error
                )
            for r in batch.records:
                if r.offset >= position:
                    out.append(Message(topic, partition, r.offset, r.timestamp, r.key, r.value, r.headers))
            after = max(after, batch.header.next_offset)
    except BatchError as exc:  # a header that cannot be read: what follows it cannot be found
        log.warning("%s/%d: unreadable batch after offset %d: %s", topic, partition, after, exc)
    return out, after


def _fetch_request(
    routes: RouteTable, topic: str, partition: int, offset: int, max_bytes: int, wait_ms: int, timeout: float
) -> dict[str, Any]:
    """Keyword arguments of the transport call for one fetch (both twins)."""
    base, route_headers = routes.target(topic, partition)
    return {
        "url": f"{base}/v1/topics/{quote(topic, safe='')}/partitions/{partition}/messages",
        "params": {"offset": offset, "max_bytes": max_bytes, "wait_ms": wait_ms},
        "headers": {**_ACCEPT, **route_headers} if route_headers else _ACCEPT,
        "timeout": timeout + wait_ms / 1000,
    }


def _offsets_request(routes: RouteTable, topic: str, partition: int, timeout: float) -> dict[str, Any]:
    """Keyword arguments of the transport call for a partition's earliest/latest offsets (at its owner)."""
    base, route_headers = routes.target(topic, partition)
    return {
        "url": f"{base}/v1/topics/{quote(topic, safe='')}/partitions/{partition}/offsets",
        "headers": route_headers,
        "timeout": timeout,
    }


def _group_request(routes: RouteTable, call: GroupCall, timeout: float) -> dict[str, Any]:
    """Keyword arguments of the transport call for a group call (any server forwards it to the coordinator)."""
    body = orjson.dumps(call.body) if call.body is not None else None
    return {
        "method": call.method,
        "url": routes.entry_point + call.path,
        "body": body,
        "headers": {"content-type": "application/json"} if body is not None else None,
        "timeout": timeout,
    }


def _produce_request(routes: RouteTable, topic: str, record: RecordData, timeout: float) -> dict[str, Any]:
    """Keyword arguments of the transport call that writes one record to a group's retry or dead-letter topic."""
    return {
        "method": "POST",
        "url": f"{routes.entry_point}/v1/topics/{quote(topic, safe='')}/partitions/0/messages",
        "body": bytes(encode_batch([record])),
        "headers": _BATCH,
        "timeout": timeout,
    }


def _unavailable(routes: RouteTable, topic: str, partition: int, error: TalosError) -> float:
    """Seconds to wait before fetching again from a partition that is moving, whose owner is down, or
    whose fetch quota is used up (429: as long as the server says)."""
    if isinstance(error, QuotaExceededError):
        return error.retry_after or 1.0
    if routes.learn(topic, partition, error):
        return 0.0  # a 421 named the owner
    log.info("%s/%d is unavailable (%s); retrying", topic, partition, error)
    hinted = error.retry_after if isinstance(error, UnavailableError) and error.retry_after else 0.0
    return min(max(hinted, 0.2), 2.0)


class _Positions:
    """Where each assigned partition is read next; shared by the twins."""

    def __init__(self, start: str) -> None:
        if start not in ("earliest", "latest"):
            raise ValueError("start must be 'earliest' or 'latest'")
        self.start = start
        self.next: dict[TopicPartition, int] = {}

    def initial(self, offsets: dict[str, int]) -> int:
        return offsets["earliest"] if self.start == "earliest" else offsets["latest"]

    def take(self, topic: str, partition: int, offset: int, response: Response) -> list[Message]:
        """The messages of a fetch answer, moving the position past them (both twins)."""
        key = (topic, partition)
        try:
            check(response)
        except OffsetOutOfRangeError as error:
            self.reset(key, error)
            return []
        if self.next.get(key) != offset:  # seeked (or released) while the fetch was in flight
            return []
        messages, after = _decode(topic, partition, response.body, offset)
        self.next[key] = after
        return messages

    def reset(self, key: TopicPartition, error: OffsetOutOfRangeError) -> None:
        if key not in self.next:
            return
        target = error.earliest if self.next[key] < error.earliest else error.latest
        log.warning("offset %d of %s/%d is out of range; moving to %d", self.next[key], *key, target)
        self.next[key] = target


class _State:
    """What a consumer knows between calls, with no I/O: positions, the buffer, and (in a group) its
    membership, processed and committed offsets, and retried partitions paused until due. Both twins."""

    def __init__(
        self,
        *,
        start: str,
        partitions: list[TopicPartition],
        membership: Membership | None,
        auto_commit: bool,
        auto_commit_interval_s: float,
        on_assign: Callback | None,
        on_revoke: Callback | None,
        on_lost: Callback | None,
        max_retries: int,
    ) -> None:
        self.positions = _Positions(start)
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


def _membership(
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


class _Waker(Protocol):
    def set(self) -> None: ...


def _partitions_of(client: _Consumer[Any], topics: list[str]) -> Steps[list[TopicPartition]]:
    """Every partition of ``topics`` (explicit mode: no group assigns them)."""
    out: list[TopicPartition] = []
    for topic in topics:
        yield from refresh_steps(client._routes, topic, strict=True)
        out += [(topic, p) for p in range(client._routes.partitions[topic])]
    return out


def _call(client: _Consumer[Any], call: GroupCall) -> Steps[Any]:
    try:
        return check((yield from http(Request(**_group_request(client._routes, call, client._timeout))))).json()
    except TransportError:
        client._routes.rotate()  # the next call asks another server
        raise


def _beat(client: _Consumer[Any], *, first: bool = False) -> Steps[None]:
    membership = client._state.group()
    sent = time.monotonic()
    try:
        membership.apply((yield from _call(client, membership.next_call(sent))), sent)
    except TalosError as exc:
        if client._state.beat_failed(exc, first=first):
            client._wake.set()
    membership.expire(time.monotonic())


def _rebalance(client: _Consumer[Any]) -> Steps[None]:
    """Act on what the heartbeats learned: revoke (commit, callback, release), start what was assigned."""
    state = client._state
    changes = state.take_changes()
    if changes is None:
        return
    if changes.revoked:
        if state.auto_commit:
            yield from _commit_quietly(client, changes.revoked)
        state.revoke(changes.revoked)
        client._wake.set()  # tell the coordinator now: the new holder starts sooner
    if changes.assigned:
        state.assign(changes.assigned, (yield from _call(client, state.group().offsets_call())))


def _commit(
    client: _Consumer[Any], offsets: Mapping[tuple[str, int], int] | None, tps: Iterable[TopicPartition] | None = None
) -> Steps[None]:
    call, positions = client._state.commit_call(offsets, tps)
    if call is None:
        return
    try:
        yield from _call(client, call)
    except ConflictError as exc:
        raise CommitFailedError(exc.status, exc.code, exc.message, details=exc.details) from exc
    client._state.committed.update(positions)


def _commit_quietly(client: _Consumer[Any], tps: Iterable[TopicPartition] | None = None) -> Steps[None]:
    try:
        yield from _commit(client, None, tps)
    except TalosError as exc:
        log.warning("auto-commit failed: %s", exc)


def _retry(client: _Consumer[Any], message: Message, delay: float, reason: str) -> Steps[str]:
    topic, request = client._state.retry_request(client._routes, message, delay, reason, client._timeout)
    check((yield from http(Request(**request))))
    return topic


def _position(client: _Consumer[Any], topic: str, partition: int) -> Steps[int]:
    positions = client._state.positions
    key = (topic, partition)
    if key not in positions.next:
        request = Request("GET", **_offsets_request(client._routes, topic, partition, client._timeout))
        positions.next[key] = positions.initial(check((yield from http(request))).json())  # type: ignore[arg-type]
    return positions.next[key]


def _fetch(client: _Consumer[Any], topic: str, partition: int, wait_ms: int) -> Steps[list[Message]]:
    try:
        offset = yield from _position(client, topic, partition)
        yield from refresh_steps(client._routes, topic)
        request = _fetch_request(client._routes, topic, partition, offset, client._max_bytes, wait_ms, client._timeout)
        membership = client._state.membership
        if membership is not None and membership.member_id is not None:  # the message trace's "delivered to"
            request["params"] = {**request["params"], "group": membership.group, "member": membership.member_id}
        answer = yield from http(Request("GET", **request))
        return client._state.positions.take(topic, partition, offset, answer)
    except (UnavailableError, QuotaExceededError, TransportError) as error:
        yield from pause(_unavailable(client._routes, topic, partition, error))
        return []


def _hand_out(client: _Consumer[Any], max_messages: int, *, mark: bool) -> Steps[list[Message]]:
    """What ``poll`` returns; the messages that ran out of retries go to the dead-letter topic first."""
    state = client._state
    out = state.hand_out(max_messages, mark=mark)
    for message, reason in state.take_dead_letters():
        request = state.dead_letter_request(client._routes, message, reason, client._timeout)
        try:
            check((yield from http(Request(**request))))
        except TalosError as exc:  # poll never fails on a record someone else wrote
            state.dead_lettered(message, reason, exc)
        else:
            state.dead_lettered(message, reason, None)
    return out


def _leave(membership: Membership, client: _Consumer[Any]) -> Steps[None]:
    """Leave the group, so its partitions move at once (else they move when the session expires)."""
    leave = membership.leave_call()
    if leave is not None:
        try:
            yield from _call(client, leave)
        except TalosError as exc:
            log.info("group %s: leaving failed (%s); the session will expire", membership.group, exc)


class _Consumer(ClientBase[AnyTransport]):
    """What both consumers are: settings, state and the group calls; the twins add how they wait."""

    _transport: AnyTransport
    _wake: _Waker  # a threading or an asyncio Event: the heartbeat's alarm

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        topics: Iterable[str] = (),
        partitions: Iterable[tuple[str, int]] = (),
        group: str | None = None,
        start: str = "earliest",
        auto_commit: bool = True,
        auto_commit_interval_s: float = 5.0,
        session_timeout_s: float = 10.0,
        on_assign: Callback | None = None,
        on_revoke: Callback | None = None,
        on_lost: Callback | None = None,
        broadcast: bool = False,
        instance: str | None = None,
        max_retries: int = 3,
        max_bytes: int = 1024 * 1024,
        wait_ms: int = 500,
        request_timeout_s: float = 30.0,
        route_to_owner: bool = True,
        transport: AnyTransport | None = None,
        token: str | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._topics, assigned = list(topics), list(partitions)
        membership = _membership(
            group,
            self._topics,
            assigned,
            session_timeout_s=session_timeout_s,
            broadcast=broadcast,
            instance=instance,
        )
        self._transport = self._connect(transport, token, request_timeout_s, 32)
        self._routes = RouteTable(self.url, direct=route_to_owner)
        self._max_bytes = max_bytes
        self._wait_ms = wait_ms
        self._timeout = request_timeout_s
        self._state = _State(
            start=start,
            partitions=assigned,
            membership=membership,
            auto_commit=auto_commit,
            auto_commit_interval_s=auto_commit_interval_s,
            on_assign=on_assign,
            on_revoke=on_revoke,
            on_lost=on_lost,
            max_retries=max_retries,
        )
        self._closed = False
        self._begin()

    @abstractmethod
    def _begin(self) -> None:
        """What the twin does once constructed (the blocking one joins now, the asyncio one on first use)."""

    # ---------------------------------------------------------------- group membership

    @operation
    def commit(self, offsets: Mapping[tuple[str, int], int] | None = None) -> Steps[None]:
        """Commit what ``poll`` handed out (or ``offsets``: partition → next offset to read).

        Raises :class:`CommitFailedError` if this member no longer holds a partition (revoked, or its lock
        expired): those messages will be delivered again to the partition's next holder."""
        return _commit(self, offsets)

    @operation
    def retry(self, message: Message, *, delay: float = 0.0, reason: str = "") -> Steps[str]:
        """Redeliver ``message`` to this group after ``delay`` seconds (through the group's retry topic);
        after ``max_retries`` retries it goes to the dead-letter topic instead. Returns the topic used."""
        return _retry(self, message, delay, reason)

    # ---------------------------------------------------------------- positions

    @property
    def assignment(self) -> list[tuple[str, int]]:
        return self._state.assignment(time.monotonic())

    @operation
    def position(self, topic: str, partition: int) -> Steps[int]:
        return _position(self, topic, partition)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self._state.seek((topic, partition), offset)

    @operation
    def seek_to_timestamp(self, timestamp_ms: int) -> Steps[None]:
        return _seek_all(self, "offset", timestamp_ms)


def _seek_all(client: _Consumer[Any], field: str, timestamp_ms: int | None = None) -> Steps[None]:
    """Move every assigned partition to its ``earliest``, ``latest`` or first ``offset`` at a time."""
    for topic, partition in client.assignment:
        answer = yield from send(client.url, offsets_call(topic, partition, timestamp_ms), client._timeout)
        client.seek(topic, partition, answer[field])


class Consumer(Blocking, _Consumer[Transport]):
    """Read topics (all their partitions), explicit ``(topic, partition)`` pairs, or as a group member.

    >>> with Consumer("http://127.0.0.1:8080", group="billing", topics=["orders"]) as consumer:
    ...     for message in consumer:
    ...         print(message.offset, message.value)
    ...         consumer.commit()

    Group options: ``auto_commit`` (every ``auto_commit_interval_s``, on revocation and on close),
    ``session_timeout_s`` (locks expire this long after the last heartbeat), ``on_assign``/``on_revoke``/
    ``on_lost`` (called from ``poll`` with the partitions; lost: the lock expired before a heartbeat could
    renew it, so committing is no longer possible), ``broadcast`` (every member gets every partition; offsets
    are kept per ``instance``), ``max_retries`` (for :meth:`retry`).

    ``token=`` is the bearer token for servers with auth on (default: ``TALOS_TOKEN``). A partition over
    its fetch quota is read again after the wait the 429 names.
    """

    def _begin(self) -> None:
        state = self._state
        if state.membership is None:
            state.static += self._run(_partitions_of(self, self._topics))
        self._pool = concurrent.futures.ThreadPoolExecutor(max(len(state.static), 8), thread_name_prefix="talos-fetch")
        self._inflight: dict[TopicPartition, concurrent.futures.Future[list[Message]]] = {}
        self._wake: threading.Event = threading.Event()
        self._heartbeats: threading.Thread | None = None
        if state.membership is not None:
            self._beat(first=True)  # join now: a bad group name or topic fails here, not later
            self._heartbeats = threading.Thread(target=self._heartbeat_loop, name="talos-heartbeat", daemon=True)
            self._heartbeats.start()

    # ---------------------------------------------------------------- group membership

    def _beat(self, *, first: bool = False) -> None:
        self._run(_beat(self, first=first))

    def _heartbeat_loop(self) -> None:
        membership = self._state.membership
        assert membership is not None
        while not self._closed:
            self._wake.wait(membership.heartbeat_interval_s)
            self._wake.clear()
            if not self._closed:
                self._beat()

    # ---------------------------------------------------------------- positions

    @operation
    def seek_to_beginning(self) -> Steps[None]:
        return _seek_all(self, "earliest")

    @operation
    def seek_to_end(self) -> Steps[None]:
        return _seek_all(self, "latest")

    # ---------------------------------------------------------------- fetching

    def _fetch(self, topic: str, partition: int, wait_ms: int) -> list[Message]:
        return self._run(_fetch(self, topic, partition, wait_ms))

    def poll(self, timeout: float = 1.0, *, max_messages: int = 500) -> list[Message]:
        """Messages from any assigned partition, waiting up to ``timeout`` seconds for some to arrive."""
        return self._poll(timeout, max_messages, mark=True)

    def _poll(self, timeout: float, max_messages: int, *, mark: bool) -> list[Message]:
        state = self._state
        if state.commit_due():
            self._run(_commit_quietly(self))
        self._run(_rebalance(self))
        deadline = time.monotonic() + timeout
        while not state.buffer:
            now = time.monotonic()
            remaining = deadline - now
            wait_ms = state.hint_wait(now, max(0, min(self._wait_ms, int(remaining * 1000))))
            for key in state.to_fetch(now):  # a fetch per partition in flight; long polls end when data comes
                if key not in self._inflight:
                    self._inflight[key] = self._pool.submit(self._fetch, key[0], key[1], wait_ms)
            if not self._inflight:
                time.sleep(min(max(remaining, 0), 0.1))  # nothing assigned yet (or all paused)
            else:
                done, _ = concurrent.futures.wait(
                    self._inflight.values(),
                    timeout=max(min(remaining, 0.5), 0),
                    return_when=concurrent.futures.FIRST_COMPLETED,
                )
                for key, future in list(self._inflight.items()):
                    if future in done:
                        del self._inflight[key]
                        state.received(key, future.result())
            self._run(_rebalance(self))
            if state.buffer or time.monotonic() >= deadline:
                break
        return self._run(_hand_out(self, max_messages, mark=mark))

    def __iter__(self) -> Iterator[Message]:
        # Checked per message: a partition revoked or expired while the loop body ran is not handed out.
        while not self._closed:
            for message in self._poll(1.0, 500, mark=False):
                if self._state.deliver(message):
                    yield message

    def close(self) -> None:
        """Commit (with auto-commit), leave the group (its partitions move at once), stop fetching."""
        if self._closed:
            return
        membership = self._state.membership
        if membership is not None:
            if self._state.auto_commit:
                self._run(_commit_quietly(self))
            self._closed = True
            self._wake.set()
            if self._heartbeats is not None:
                self._heartbeats.join(timeout=self._timeout)
            self._run(_leave(membership, self))
        self._closed = True
        self._pool.shutdown(wait=True)  # in-flight long polls end within wait_ms
        self._transport.close()


class AsyncConsumer(Asynchronous, _Consumer[AsyncTransport]):
    """The asyncio twin of :class:`Consumer`: ``await consumer.poll()`` or ``async for message in consumer``."""

    def _begin(self) -> None:
        self._started = False
        self._inflight: dict[TopicPartition, asyncio.Task[list[Message]]] = {}
        self._wake: asyncio.Event = asyncio.Event()
        self._heartbeats: asyncio.Task[None] | None = None

    async def _start(self) -> None:
        """Resolve topics (explicit mode) or join the group, on first use."""
        if self._started:
            return
        self._started = True
        if self._state.membership is None:
            self._state.static += await self._run(_partitions_of(self, self._topics))
            return
        await self._beat(first=True)
        self._heartbeats = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    # ---------------------------------------------------------------- group membership

    async def _beat(self, *, first: bool = False) -> None:
        await self._run(_beat(self, first=first))

    async def _heartbeat_loop(self) -> None:
        membership = self._state.membership
        assert membership is not None
        while not self._closed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), membership.heartbeat_interval_s)
            self._wake.clear()
            if not self._closed:
                await self._beat()

    # ---------------------------------------------------------------- fetching

    async def _fetch(self, topic: str, partition: int, wait_ms: int) -> list[Message]:
        return await self._run(_fetch(self, topic, partition, wait_ms))

    async def poll(self, timeout: float = 1.0, *, max_messages: int = 500) -> list[Message]:
        return await self._poll(timeout, max_messages, mark=True)

    async def _poll(self, timeout: float, max_messages: int, *, mark: bool) -> list[Message]:
        await self._start()
        state = self._state
        if state.commit_due():
            await self._run(_commit_quietly(self))
        await self._run(_rebalance(self))
        deadline = time.monotonic() + timeout
        loop = asyncio.get_running_loop()
        while not state.buffer:
            now = time.monotonic()
            remaining = deadline - now
            wait_ms = state.hint_wait(now, max(0, min(self._wait_ms, int(remaining * 1000))))
            for key in state.to_fetch(now):
                if key not in self._inflight:
                    self._inflight[key] = loop.create_task(self._fetch(key[0], key[1], wait_ms))
            if not self._inflight:
                await asyncio.sleep(min(max(remaining, 0), 0.1))
            else:
                done, _ = await asyncio.wait(
                    self._inflight.values(), timeout=max(min(remaining, 0.5), 0), return_when=asyncio.FIRST_COMPLETED
                )
                for key, task in list(self._inflight.items()):
                    if task in done:
                        del self._inflight[key]
                        state.received(key, task.result())
            await self._run(_rebalance(self))
            if state.buffer or time.monotonic() >= deadline:
                break
        return await self._run(_hand_out(self, max_messages, mark=mark))

    async def __aiter__(self) -> AsyncIterator[Message]:
        while not self._closed:
            for message in await self._poll(1.0, 500, mark=False):
                if self._state.deliver(message):
                    yield message

    async def close(self) -> None:
        if self._closed:
            return
        membership = self._state.membership
        if membership is not None and self._started:
            if self._state.auto_commit:
                await self._run(_commit_quietly(self))
            self._closed = True
            if self._heartbeats is not None:
                self._heartbeats.cancel()
                await asyncio.gather(self._heartbeats, return_exceptions=True)
            await self._run(_leave(membership, self))
        self._closed = True
        for task in self._inflight.values():
            task.cancel()
        await asyncio.gather(*self._inflight.values(), return_exceptions=True)
        await self._transport.close()

    async def __aenter__(self) -> Self:
        await self._start()
        return self
