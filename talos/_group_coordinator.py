"""The consumer's side of its group (both twins), as steps: join and heartbeat, act on a rebalance (commit,
revoke, start what was assigned), commit, retry a message, send dead letters, leave.

The coordinator grants the member partitions under time-limited locks (``talos._group``); a background
heartbeat renews them and learns of revocations, and offsets move only when the member commits (by hand,
or every ``auto_commit_interval_s``). Group calls go to any server, which forwards them to the coordinator.
What to do is decided by the consumer's state (``talos._consumer_state``); this module does the I/O.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import orjson

from talos._consumer_state import ConsumerState
from talos._errors import CommitFailedError, ConflictError, TalosError, TransportError
from talos._fetcher import Message, TopicPartition
from talos._group import GroupCall, Membership
from talos._routing import RouteTable
from talos._steps import Request, Steps, http
from talos._transport import check

__all__ = [
    "Waker",
    "commit_offsets",
    "commit_quietly",
    "hand_out",
    "heartbeat",
    "leave_group",
    "rebalance",
    "send_retry",
]

log = logging.getLogger("talos.consumer")


class Waker(Protocol):
    """A threading or an asyncio Event: the heartbeat's alarm."""

    def set(self) -> None: ...


class _Member(Protocol):
    """What the group steps read of a consumer (``talos._consumer``, which imports this module)."""

    @property
    def _routes(self) -> RouteTable: ...

    @property
    def _timeout(self) -> float: ...

    @property
    def _state(self) -> ConsumerState: ...

    @property
    def _wake(self) -> Waker: ...


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


def _call(client: _Member, call: GroupCall) -> Steps[Any]:
    try:
        return check((yield from http(Request(**_group_request(client._routes, call, client._timeout))))).json()
    except TransportError:
        client._routes.rotate()  # the next call asks another server
        raise


def heartbeat(client: _Member, *, first: bool = False) -> Steps[None]:
    membership = client._state.group()
    sent = time.monotonic()
    try:
        membership.apply((yield from _call(client, membership.next_call(sent))), sent)
    except TalosError as exc:
        if client._state.beat_failed(exc, first=first):
            client._wake.set()
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        if first:
            raise
        # An answer it cannot read (a proxy's page, a cut body): a failed beat, retried; it must not end the
        # heartbeat thread, which would leave the member holding nothing and reading nothing for good.
        log.warning("heartbeat: an answer this client cannot read (%r); retrying", exc)
    membership.expire(time.monotonic())


def rebalance(client: _Member) -> Steps[None]:
    """Act on what the heartbeats learned: revoke (commit, callback, release), start what was assigned."""
    state = client._state
    changes = state.take_changes()
    if changes is None:
        return
    if changes.revoked:
        if state.auto_commit:
            yield from commit_quietly(client, changes.revoked)
        state.revoke(changes.revoked)
        client._wake.set()  # tell the coordinator now: the new holder starts sooner
    if changes.assigned:
        state.assign(changes.assigned, (yield from _call(client, state.group().offsets_call())))


def commit_offsets(
    client: _Member, offsets: Mapping[tuple[str, int], int] | None, tps: Iterable[TopicPartition] | None = None
) -> Steps[None]:
    call, positions = client._state.commit_call(offsets, tps)
    if call is None:
        return
    try:
        yield from _call(client, call)
    except ConflictError as exc:
        raise CommitFailedError(exc.status, exc.code, exc.message, details=exc.details) from exc
    client._state.committed.update(positions)


def commit_quietly(client: _Member, tps: Iterable[TopicPartition] | None = None) -> Steps[None]:
    try:
        yield from commit_offsets(client, None, tps)
    except TalosError as exc:
        log.warning("auto-commit failed: %s", exc)


def send_retry(client: _Member, message: Message, delay: float, reason: str) -> Steps[str]:
    topic, request = client._state.retry_request(client._routes, message, delay, reason, client._timeout)
    check((yield from http(Request(**request))))
    return topic


def hand_out(client: _Member, max_messages: int, *, mark: bool) -> Steps[list[Message]]:
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


def leave_group(membership: Membership, client: _Member) -> Steps[None]:
    """Leave the group, so its partitions move at once (else they move when the session expires)."""
    leave = membership.leave_call()
    if leave is not None:
        try:
            yield from _call(client, leave)
        except TalosError as exc:
            log.info("group %s: leaving failed (%s); the session will expire", membership.group, exc)
