"""The consumer's fetcher (both twins): :class:`Message`, the fetch and offset requests to a partition's
owner, decoding what they answer, and where each partition is read next.

Fetches ask for raw record batches (``Accept: application/vnd.talos.batch``) and decode them here, CRC
checked, so the server never parses records on the way out either. A partition that is moving, whose owner
is down, or that is over its fetch quota is fetched again after a pause; an offset out of range moves the
position to the nearest end.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

from talos._admin import offsets_call, send
from talos._codec import decode_batches
from talos._errors import (
    BatchError,
    OffsetOutOfRangeError,
    QuotaExceededError,
    TalosError,
    TransportError,
    UnavailableError,
)
from talos._group import ATTEMPT_HEADER, Membership
from talos._routing import RouteTable, refresh_steps
from talos._steps import Request, Steps, http, pause
from talos._transport import Response, check

__all__ = ["Message", "Positions", "TopicPartition", "fetch_messages", "partitions_of", "position_of", "seek_all"]

log = logging.getLogger("talos.consumer")
_ACCEPT = {"accept": "application/vnd.talos.batch"}
TopicPartition = tuple[str, int]


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
            if not batch.header.control:  # a transaction's marker: its offset counts, it is no message
                for r in batch.records:
                    if r.offset >= position:
                        out.append(Message(topic, partition, r.offset, r.timestamp, r.key, r.value, r.headers))
            after = max(after, batch.header.next_offset)
    except BatchError as exc:  # a header that cannot be read: what follows it cannot be found
        log.warning("%s/%d: unreadable batch after offset %d: %s", topic, partition, after, exc)
    return out, after


def _fetch_request(
    routes: RouteTable,
    topic: str,
    partition: int,
    offset: int,
    max_bytes: int,
    wait_ms: int,
    timeout: float,
    committed: bool = False,
) -> dict[str, Any]:
    """Keyword arguments of the transport call for one fetch (both twins)."""
    base, route_headers = routes.target(topic, partition)
    params: dict[str, str | int] = {"offset": offset, "max_bytes": max_bytes, "wait_ms": wait_ms}
    if committed:
        params["isolation"] = "read_committed"
    return {
        "url": f"{base}/v1/topics/{quote(topic, safe='')}/partitions/{partition}/messages",
        "params": params,
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


class Positions:
    """Where each assigned partition is read next; shared by the twins."""

    def __init__(self, start: str, *, committed: bool = False) -> None:
        if start not in ("earliest", "latest"):
            raise ValueError("start must be 'earliest' or 'latest'")
        self.start = start
        self.committed = committed  # read committed: "latest" is the last stable offset
        self.next: dict[TopicPartition, int] = {}

    @property
    def latest(self) -> str:
        """The field of an offsets answer that is the end for this consumer."""
        return "last_stable" if self.committed else "latest"

    def initial(self, offsets: dict[str, int]) -> int:
        if self.start == "earliest":
            return offsets["earliest"]
        return offsets.get(self.latest, offsets["latest"])  # a server from before transactions: its latest

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
        # Past batches a read-committed fetch left out at its end (an aborted transaction's)
        onward = response.headers.get("x-talos-next-offset")
        if onward is not None and onward.isdigit():
            after = max(after, int(onward))
        self.next[key] = after
        return messages

    def reset(self, key: TopicPartition, error: OffsetOutOfRangeError) -> None:
        if key not in self.next:
            return
        target = error.earliest if self.next[key] < error.earliest else error.latest
        log.warning("offset %d of %s/%d is out of range; moving to %d", self.next[key], *key, target)
        self.next[key] = target


class _Read(Protocol):
    """What the fetch steps read of a consumer's state (``talos._consumer_state``)."""

    @property
    def positions(self) -> Positions: ...

    @property
    def membership(self) -> Membership | None: ...


class _Fetching(Protocol):
    """What the fetch steps read of a consumer (``talos._consumer``, which imports this module)."""

    @property
    def url(self) -> str: ...

    @property
    def _routes(self) -> RouteTable: ...

    @property
    def _timeout(self) -> float: ...

    @property
    def _max_bytes(self) -> int: ...

    @property
    def _state(self) -> _Read: ...

    @property
    def assignment(self) -> list[TopicPartition]: ...

    def seek(self, topic: str, partition: int, offset: int) -> None: ...


def partitions_of(client: _Fetching, topics: list[str]) -> Steps[list[TopicPartition]]:
    """Every partition of ``topics`` (explicit mode: no group assigns them)."""
    out: list[TopicPartition] = []
    for topic in topics:
        yield from refresh_steps(client._routes, topic, strict=True)
        out += [(topic, p) for p in range(client._routes.partitions[topic])]
    return out


def position_of(client: _Fetching, topic: str, partition: int) -> Steps[int]:
    positions = client._state.positions
    key = (topic, partition)
    if key not in positions.next:
        request = Request("GET", **_offsets_request(client._routes, topic, partition, client._timeout))
        initial = positions.initial(check((yield from http(request))).json())  # type: ignore[arg-type]
        # Another call (a fetch, position()) may have set it while this one asked, and read on from there since:
        # not moved back to the start.
        positions.next.setdefault(key, initial)
    return positions.next[key]


def fetch_messages(client: _Fetching, topic: str, partition: int, wait_ms: int) -> Steps[list[Message]]:
    try:
        offset = yield from position_of(client, topic, partition)
        yield from refresh_steps(client._routes, topic)
        positions = client._state.positions
        request = _fetch_request(
            client._routes,
            topic,
            partition,
            offset,
            client._max_bytes,
            wait_ms,
            client._timeout,
            positions.committed,
        )
        membership = client._state.membership
        if membership is not None and membership.member_id is not None:  # the message trace's "delivered to"
            request["params"] = {**request["params"], "group": membership.group, "member": membership.member_id}
        answer = yield from http(Request("GET", **request))
        return positions.take(topic, partition, offset, answer)
    except (UnavailableError, QuotaExceededError, TransportError) as error:
        yield from pause(_unavailable(client._routes, topic, partition, error))
        return []


def seek_all(client: _Fetching, field: str, timestamp_ms: int | None = None) -> Steps[None]:
    """Move every assigned partition to its ``earliest``, ``latest`` or first ``offset`` at a time."""
    if field == "latest":
        field = client._state.positions.latest
    for topic, partition in client.assignment:
        answer = yield from send(client.url, offsets_call(topic, partition, timestamp_ms), client._timeout)
        client.seek(topic, partition, answer[field])
