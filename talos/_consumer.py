"""``Consumer`` and ``AsyncConsumer``: pull with long polls, from explicit partitions or as a group member.

A consumer is its fetcher (``talos._fetcher``: messages, fetches, positions), its state
(``talos._consumer_state``) and, with ``group=``, its side of the group (``talos._group_coordinator``:
heartbeats, rebalances, commits). This module holds what the twins are: settings, and how each waits (a
thread pool of long polls and a heartbeat thread, or tasks).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from abc import abstractmethod
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import Self

from talos._admin import DEFAULT_URL
from talos._clients import Asynchronous, Blocking, ClientBase, operation
from talos._consumer_state import Callback, ConsumerState, membership_for
from talos._fetcher import Message, TopicPartition, fetch_messages, partitions_of, position_of, seek_all
from talos._group_coordinator import (
    Waker,
    commit_offsets,
    commit_quietly,
    hand_out,
    heartbeat,
    leave_group,
    rebalance,
    send_retry,
)
from talos._routing import RouteTable
from talos._steps import Steps
from talos._tls import TLSOption
from talos._transport import AnyTransport, AsyncTransport, Transport

__all__ = ["AsyncConsumer", "Consumer"]


class _Consumer(ClientBase[AnyTransport]):
    """What both consumers are: settings, state and the group calls; the twins add how they wait."""

    _transport: AnyTransport
    _wake: Waker  # a threading or an asyncio Event: the heartbeat's alarm

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        topics: Iterable[str] = (),
        partitions: Iterable[tuple[str, int]] = (),
        group: str | None = None,
        start: str = "earliest",
        isolation: str = "read_uncommitted",  # "read_committed": decided transactions only
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
        tls: TLSOption = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._topics, assigned = list(topics), list(partitions)
        membership = membership_for(
            group,
            self._topics,
            assigned,
            session_timeout_s=session_timeout_s,
            broadcast=broadcast,
            instance=instance,
        )
        self._transport = self._connect(transport, token, request_timeout_s, 32, tls)
        self._routes = RouteTable(self.url, direct=route_to_owner)
        self._max_bytes = max_bytes
        self._wait_ms = wait_ms
        self._timeout = request_timeout_s
        if isolation not in ("read_uncommitted", "read_committed"):
            raise ValueError("isolation must be 'read_uncommitted' or 'read_committed'")
        self._state = ConsumerState(
            start=start,
            committed=isolation == "read_committed",
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
        return commit_offsets(self, offsets)

    @operation
    def retry(self, message: Message, *, delay: float = 0.0, reason: str = "") -> Steps[str]:
        """Redeliver ``message`` to this group after ``delay`` seconds (through the group's retry topic);
        after ``max_retries`` retries it goes to the dead-letter topic instead. Returns the topic used."""
        return send_retry(self, message, delay, reason)

    # ---------------------------------------------------------------- positions

    @property
    def member_id(self) -> str | None:
        """This consumer's id in its group (None outside a group, or before it joined): what a transactional
        producer's ``send_offsets_to_transaction`` names, so a member that lost its partitions cannot commit."""
        membership = self._state.membership
        return None if membership is None else membership.member_id

    @property
    def assignment(self) -> list[tuple[str, int]]:
        return self._state.assignment(time.monotonic())

    @operation
    def position(self, topic: str, partition: int) -> Steps[int]:
        return position_of(self, topic, partition)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self._state.seek((topic, partition), offset)

    @operation
    def seek_to_timestamp(self, timestamp_ms: int) -> Steps[None]:
        return seek_all(self, "offset", timestamp_ms)


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
            state.static += self._run(partitions_of(self, self._topics))
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
        self._run(heartbeat(self, first=first))

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
        return seek_all(self, "earliest")

    @operation
    def seek_to_end(self) -> Steps[None]:
        return seek_all(self, "latest")

    # ---------------------------------------------------------------- fetching

    def _fetch(self, topic: str, partition: int, wait_ms: int) -> list[Message]:
        return self._run(fetch_messages(self, topic, partition, wait_ms))

    def poll(self, timeout: float = 1.0, *, max_messages: int = 500) -> list[Message]:
        """Messages from any assigned partition, waiting up to ``timeout`` seconds for some to arrive."""
        return self._poll(timeout, max_messages, mark=True)

    def _poll(self, timeout: float, max_messages: int, *, mark: bool) -> list[Message]:
        state = self._state
        if state.commit_due():
            self._run(commit_quietly(self))
        self._run(rebalance(self))
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
            self._run(rebalance(self))
            if state.buffer or time.monotonic() >= deadline:
                break
        return self._run(hand_out(self, max_messages, mark=mark))

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
                self._run(commit_quietly(self))
            self._closed = True
            self._wake.set()
            if self._heartbeats is not None:
                self._heartbeats.join(timeout=self._timeout)
            self._run(leave_group(membership, self))
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
            self._state.static += await self._run(partitions_of(self, self._topics))
            return
        await self._beat(first=True)
        self._heartbeats = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    # ---------------------------------------------------------------- group membership

    async def _beat(self, *, first: bool = False) -> None:
        await self._run(heartbeat(self, first=first))

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
        return await self._run(fetch_messages(self, topic, partition, wait_ms))

    async def poll(self, timeout: float = 1.0, *, max_messages: int = 500) -> list[Message]:
        return await self._poll(timeout, max_messages, mark=True)

    async def _poll(self, timeout: float, max_messages: int, *, mark: bool) -> list[Message]:
        await self._start()
        state = self._state
        if state.commit_due():
            await self._run(commit_quietly(self))
        await self._run(rebalance(self))
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
            await self._run(rebalance(self))
            if state.buffer or time.monotonic() >= deadline:
                break
        return await self._run(hand_out(self, max_messages, mark=mark))

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
                await self._run(commit_quietly(self))
            self._closed = True
            if self._heartbeats is not None:
                self._heartbeats.cancel()
                await asyncio.gather(self._heartbeats, return_exceptions=True)
            await self._run(leave_group(membership, self))
        self._closed = True
        for task in self._inflight.values():
            task.cancel()
        await asyncio.gather(*self._inflight.values(), return_exceptions=True)
        await self._transport.close()

    async def __aenter__(self) -> Self:
        await self._start()
        return self
