"""``Consumer`` and ``AsyncConsumer``: pull from explicit topics or partitions, by offset, with long polls.

Fetches ask for raw record batches (``Accept: application/vnd.talos.batch``) and decode them here, CRC
checked, so the server never parses records on the way out either. (Consumer groups come with the groups
issue; this consumer is assigned partitions explicitly.)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from talos._admin import DEFAULT_URL, Admin, AsyncAdmin
from talos._codec import decode_records, iter_batches
from talos._errors import OffsetOutOfRangeError, TalosError, TransportError, UnavailableError
from talos._routing import RouteTable, refresh, refresh_async
from talos._transport import AiohttpTransport, AsyncTransport, Response, Transport, Urllib3Transport, check

__all__ = ["AsyncConsumer", "Consumer", "Message"]

log = logging.getLogger("talos.consumer")
_ACCEPT = {"accept": "application/vnd.talos.batch"}


@dataclass(frozen=True, slots=True)
class Message:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = field(default=())


def _decode(topic: str, partition: int, data: bytes, position: int) -> list[Message]:
    out = []
    for batch_start, _header in iter_batches(data):
        for r in decode_records(data, batch_start, verify=False):
            if r.offset >= position:
                out.append(Message(topic, partition, r.offset, r.timestamp, r.key, r.value, r.headers))
    return out


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


def _unavailable(routes: RouteTable, topic: str, partition: int, error: TalosError) -> float:
    """Seconds to wait before fetching again from a partition that is moving or whose owner is down."""
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
        self.next: dict[tuple[str, int], int] = {}

    def initial(self, offsets: dict[str, int]) -> int:
        return offsets["earliest"] if self.start == "earliest" else offsets["latest"]

    def advance(self, key: tuple[str, int], messages: list[Message]) -> None:
        if messages:
            self.next[key] = messages[-1].offset + 1

    def take(self, topic: str, partition: int, offset: int, response: Response) -> list[Message]:
        """The messages of a fetch answer, moving the position past them (both twins)."""
        key = (topic, partition)
        try:
            check(response)
        except OffsetOutOfRangeError as error:
            self.reset(key, error)
            return []
        if self.next.get(key) != offset:  # seeked while the fetch was in flight
            return []
        messages = _decode(topic, partition, response.body, offset)
        self.advance(key, messages)
        return messages

    def reset(self, key: tuple[str, int], error: OffsetOutOfRangeError) -> None:
        target = error.earliest if self.next[key] < error.earliest else error.latest
        log.warning("offset %d of %s/%d is out of range; moving to %d", self.next[key], *key, target)
        self.next[key] = target


class Consumer:
    """Read topics (all their partitions) or explicit ``(topic, partition)`` pairs.

    >>> with Consumer("http://127.0.0.1:8080", topics=["orders"]) as consumer:
    ...     for message in consumer:
    ...         print(message.offset, message.value)
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        topics: Iterable[str] = (),
        partitions: Iterable[tuple[str, int]] = (),
        start: str = "earliest",
        max_bytes: int = 1024 * 1024,
        wait_ms: int = 500,
        request_timeout_s: float = 30.0,
        route_to_owner: bool = True,
        transport: Transport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._transport = transport or Urllib3Transport(pool_size=32, timeout=request_timeout_s)
        self._admin = Admin(self.url, transport=self._transport, timeout=request_timeout_s)
        self._routes = RouteTable(self.url, direct=route_to_owner)
        self._positions = _Positions(start)
        self._max_bytes = max_bytes
        self._wait_ms = wait_ms
        self._timeout = request_timeout_s
        self._assigned: list[tuple[str, int]] = list(partitions)
        for topic in topics:
            refresh(self._routes, self._transport, topic, strict=True)
            self._assigned += [(topic, p) for p in range(self._routes.partitions[topic])]
        if not self._assigned:
            raise ValueError("give topics=[...] or partitions=[(topic, partition), ...]")
        self._buffer: list[Message] = []
        self._pool = concurrent.futures.ThreadPoolExecutor(len(self._assigned), thread_name_prefix="talos-fetch")
        self._inflight: dict[tuple[str, int], concurrent.futures.Future[list[Message]]] = {}
        self._closed = False

    @property
    def assignment(self) -> list[tuple[str, int]]:
        return list(self._assigned)

    def position(self, topic: str, partition: int) -> int:
        key = (topic, partition)
        if key not in self._positions.next:
            answer = self._transport.request("GET", **_offsets_request(self._routes, topic, partition, self._timeout))
            self._positions.next[key] = self._positions.initial(check(answer).json())  # type: ignore[arg-type]
        return self._positions.next[key]

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self._buffer = [m for m in self._buffer if (m.topic, m.partition) != (topic, partition)]
        self._positions.next[(topic, partition)] = offset

    def seek_to_beginning(self) -> None:
        for topic, partition in self._assigned:
            self.seek(topic, partition, self._admin.offsets(topic, partition)["earliest"])

    def seek_to_end(self) -> None:
        for topic, partition in self._assigned:
            self.seek(topic, partition, self._admin.offsets(topic, partition)["latest"])

    def seek_to_timestamp(self, timestamp_ms: int) -> None:
        for topic, partition in self._assigned:
            self.seek(topic, partition, self._admin.offsets(topic, partition, timestamp=timestamp_ms)["offset"])

    def _fetch(self, topic: str, partition: int, wait_ms: int) -> list[Message]:
        try:
            offset = self.position(topic, partition)
            refresh(self._routes, self._transport, topic)
            request = _fetch_request(self._routes, topic, partition, offset, self._max_bytes, wait_ms, self._timeout)
            return self._positions.take(topic, partition, offset, self._transport.request("GET", **request))
        except (UnavailableError, TransportError) as error:
            time.sleep(_unavailable(self._routes, topic, partition, error))
            return []

    def poll(self, timeout: float = 1.0, *, max_messages: int = 500) -> list[Message]:
        """Messages from any assigned partition, waiting up to ``timeout`` seconds for some to arrive."""
        deadline = time.monotonic() + timeout
        while not self._buffer:
            remaining = deadline - time.monotonic()
            wait_ms = max(0, min(self._wait_ms, int(remaining * 1000)))
            for key in self._assigned:  # a fetch per partition in flight; long polls end when data comes
                if key not in self._inflight:
                    self._inflight[key] = self._pool.submit(self._fetch, key[0], key[1], wait_ms)
            done, _ = concurrent.futures.wait(
                self._inflight.values(), timeout=max(remaining, 0), return_when=concurrent.futures.FIRST_COMPLETED
            )
            for key, future in list(self._inflight.items()):
                if future in done:
                    del self._inflight[key]
                    self._buffer.extend(future.result())
            if self._buffer or remaining <= 0:
                break
        out, self._buffer = self._buffer[:max_messages], self._buffer[max_messages:]
        return out

    def __iter__(self) -> Iterator[Message]:
        while not self._closed:
            yield from self.poll()

    def close(self) -> None:
        self._closed = True
        self._pool.shutdown(wait=True)  # in-flight long polls end within wait_ms
        self._transport.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class AsyncConsumer:
    """The asyncio twin of :class:`Consumer`: ``await consumer.poll()`` or ``async for message in consumer``."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        topics: Iterable[str] = (),
        partitions: Iterable[tuple[str, int]] = (),
        start: str = "earliest",
        max_bytes: int = 1024 * 1024,
        wait_ms: int = 500,
        request_timeout_s: float = 30.0,
        route_to_owner: bool = True,
        transport: AsyncTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._transport = transport or AiohttpTransport(timeout=request_timeout_s)
        self._admin = AsyncAdmin(self.url, transport=self._transport, timeout=request_timeout_s)
        self._routes = RouteTable(self.url, direct=route_to_owner)
        self._positions = _Positions(start)
        self._topics = list(topics)
        self._assigned: list[tuple[str, int]] = list(partitions)
        self._resolved = not self._topics
        self._max_bytes = max_bytes
        self._wait_ms = wait_ms
        self._timeout = request_timeout_s
        self._buffer: list[Message] = []
        self._inflight: dict[tuple[str, int], asyncio.Task[list[Message]]] = {}
        self._closed = False
        if not self._topics and not self._assigned:
            raise ValueError("give topics=[...] or partitions=[(topic, partition), ...]")

    async def _assignment(self) -> list[tuple[str, int]]:
        if not self._resolved:
            for topic in self._topics:
                await refresh_async(self._routes, self._transport, topic, strict=True)
                self._assigned += [(topic, p) for p in range(self._routes.partitions[topic])]
            self._resolved = True
        return self._assigned

    async def position(self, topic: str, partition: int) -> int:
        key = (topic, partition)
        if key not in self._positions.next:
            request = _offsets_request(self._routes, topic, partition, self._timeout)
            answer = await self._transport.request("GET", **request)
            self._positions.next[key] = self._positions.initial(check(answer).json())  # type: ignore[arg-type]
        return self._positions.next[key]

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self._buffer = [m for m in self._buffer if (m.topic, m.partition) != (topic, partition)]
        self._positions.next[(topic, partition)] = offset

    async def _fetch(self, topic: str, partition: int, wait_ms: int) -> list[Message]:
        try:
            offset = await self.position(topic, partition)
            await refresh_async(self._routes, self._transport, topic)
            request = _fetch_request(self._routes, topic, partition, offset, self._max_bytes, wait_ms, self._timeout)
            return self._positions.take(topic, partition, offset, await self._transport.request("GET", **request))
        except (UnavailableError, TransportError) as error:
            await asyncio.sleep(_unavailable(self._routes, topic, partition, error))
            return []

    async def poll(self, timeout: float = 1.0, *, max_messages: int = 500) -> list[Message]:
        deadline = time.monotonic() + timeout
        assigned = await self._assignment()
        loop = asyncio.get_running_loop()
        while not self._buffer:
            remaining = deadline - time.monotonic()
            wait_ms = max(0, min(self._wait_ms, int(remaining * 1000)))
            for key in assigned:
                if key not in self._inflight:
                    self._inflight[key] = loop.create_task(self._fetch(key[0], key[1], wait_ms))
            done, _ = await asyncio.wait(
                self._inflight.values(), timeout=max(remaining, 0), return_when=asyncio.FIRST_COMPLETED
            )
            for key, task in list(self._inflight.items()):
                if task in done:
                    del self._inflight[key]
                    self._buffer.extend(task.result())
            if self._buffer or remaining <= 0:
                break
        out, self._buffer = self._buffer[:max_messages], self._buffer[max_messages:]
        return out

    async def __aiter__(self) -> AsyncIterator[Message]:
        while not self._closed:
            for message in await self.poll():
                yield message

    async def close(self) -> None:
        self._closed = True
        for task in self._inflight.values():
            task.cancel()
        await asyncio.gather(*self._inflight.values(), return_exceptions=True)
        await self._transport.close()

    async def __aenter__(self) -> AsyncConsumer:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()
