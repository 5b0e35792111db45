"""A state kept by the owner of a one-partition compacted internal topic (the schema registry's ``__schemas``, the
cluster's connectors in ``__connectors``): every change of it is a durable append to that partition first.

One partition, one writer: the ring places it like any partition, and whoever owns it now answers every request
that reads or changes the state (the others relay to it), so changes are ordered, whichever server a client asked.
Every change is appended to the partition *as loaded here*, as one batch (a change's records are stored together
or not at all): a server that lost the partition (the ring moved it, a newer load fenced it) fails the append, so a
replaced coordinator changes nothing. A new owner reads the partition back before it answers, and sees exactly
what the previous one acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from server import internal_topics
from server.broker import Broker
from server.cluster import Owner
from server.errors import ApiError
from server.partition.loaded import LoadedPartition
from server.topics import TopicConfig
from talos import RecordData, encode_batch

__all__ = ["CompactedStateCoordinator", "FoldedState"]

log = logging.getLogger("talos.coordinator")

T = TypeVar("T")


class FoldedState(Protocol):
    """A state folded from the topic's records, in offset order (the newest record of a key wins)."""

    def apply(self, key: bytes, value: bytes | None, *, index: bool = True) -> None: ...

    def reindex(self) -> None: ...

    def summary(self) -> str: ...


S = TypeVar("S", bound=FoldedState)
Records = list[tuple[bytes, bytes | None]]


class CompactedStateCoordinator(Generic[S]):
    def __init__(self, broker: Broker, topic_config: Callable[[], TopicConfig], new_state: Callable[[], S]) -> None:
        self._broker = broker
        self._topic_config = topic_config
        self.topic = topic_config().name
        self._new_state = new_state
        self._loaded: LoadedPartition | None = None
        self._state = new_state()
        self._loading: asyncio.Future[S] | None = None
        self._lock = asyncio.Lock()
        self._created = False
        broker.ownership_listeners.append(self.release_unowned)

    async def owner(self) -> Owner:
        """The server that answers this state's requests now."""
        if not self._created:
            await internal_topics.ensure(self._broker, self._topic_config())
            self._created = True
        return self._broker.owner(self.topic, 0)

    async def release_unowned(self) -> None:
        loaded = self._loaded
        if loaded is None:
            return
        try:
            local = self._broker.owns(self.topic, 0) and not loaded.failed
        except ApiError:
            local = False
        if not local:
            log.info("%s: no longer its coordinator", self.topic)
            self._loaded, self._state = None, self._new_state()

    async def read(self, what: Callable[[S], T]) -> T:
        """``what`` of the state as this coordinator holds it (raises NotOwnerError if another server owns it)."""
        return what(await self._current())

    async def change(self, what: Callable[[S], tuple[T, Records]]) -> T:
        """Run ``what`` on the state and make its records durable, then part of the state; its answer. Changes are
        serialised: ``what`` sees every change before it."""
        async with self._lock:
            state = await self._current()
            answer, records = what(state)
            if records:
                loaded = self._loaded
                assert loaded is not None
                batch = bytearray(encode_batch([RecordData(value, key) for key, value in records]))
                try:
                    await loaded.produce(batch)
                except BaseException:
                    # The batch may be in the log all the same (a flush that failed after its write, a fence
                    # after the sync): the next call reads the partition back rather than trust memory.
                    self._loaded = None
                    raise
                for key, value in records:
                    state.apply(key, value)
            return answer

    async def _current(self) -> S:
        await self.owner()
        loaded = await self._broker.partition(self.topic, 0)
        if loaded is self._loaded and not loaded.failed:
            return self._state
        if self._loading is None:
            self._loading = asyncio.get_running_loop().create_future()
            try:
                state = self._new_state()
                for key, value in await internal_topics.read_load(loaded):
                    if key is not None:
                        state.apply(key, value, index=False)
                state.reindex()
                self._loaded, self._state = loaded, state
                self._loading.set_result(state)
                log.info("%s: coordinating %s (epoch %d)", self.topic, state.summary(), loaded.log.epoch)
            except BaseException as exc:
                self._loading.set_exception(exc)
                self._loading.exception()
                raise
            finally:
                self._loading = None
            return state
        return await asyncio.shield(self._loading)
