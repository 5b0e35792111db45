"""The schema registry's coordinator: the owner of ``__schemas`` (one partition, compacted) keeps the registry
(``server.schemas.state``) in memory and makes every change of it a durable append to that partition.

One partition, one writer: the ring places it like any partition, and whoever owns it now answers every registry
request (the others relay to it), so registrations are ordered and ids are given once, whichever server a client
asked. Every change is appended to the partition *as loaded here*, as one batch (a registration's schema and
version records are stored together or not at all): a server that lost the partition (the ring moved it, a newer
load fenced it) fails the append, so a replaced coordinator changes nothing. A new owner reads the partition
back before it answers, and sees exactly what the previous one acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Final, TypeVar

from server import internal_topics
from server.broker import Broker
from server.cluster import Owner
from server.errors import ApiError
from server.partition.loaded import LoadedPartition
from server.schemas.state import Records, Registry
from server.topics import TopicConfig
from talos import RecordData, encode_batch

__all__ = ["SCHEMAS_TOPIC", "SchemaCoordinator", "topic_config"]

log = logging.getLogger("talos.schemas")

SCHEMAS_TOPIC: Final = "__schemas"
_SEGMENT_MS: Final = 3600 * 1000

T = TypeVar("T")


def topic_config(*, created_ms: int | None = None) -> TopicConfig:
    """How the servers create the topic on first use: one partition (one writer orders every change)."""
    return TopicConfig(
        SCHEMAS_TOPIC,
        1,
        cleanup_policy="compact",
        segment_ms=_SEGMENT_MS,
        segment_bytes=16 * 1024 * 1024,
        created_ms=int(time.time() * 1000) if created_ms is None else created_ms,
    )


class SchemaCoordinator:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._loaded: LoadedPartition | None = None
        self._registry = Registry()
        self._loading: asyncio.Future[Registry] | None = None
        self._lock = asyncio.Lock()
        self._created = False
        broker.ownership_listeners.append(self.release_unowned)

    async def owner(self) -> Owner:
        """The server that answers registry requests now."""
        if not self._created:
            await internal_topics.ensure(self._broker, topic_config())
            self._created = True
        return self._broker.owner(SCHEMAS_TOPIC, 0)

    async def release_unowned(self) -> None:
        loaded = self._loaded
        if loaded is None:
            return
        try:
            local = self._broker.owns(SCHEMAS_TOPIC, 0) and not loaded.failed
        except ApiError:
            local = False
        if not local:
            log.info("%s: no longer its coordinator", SCHEMAS_TOPIC)
            self._loaded, self._registry = None, Registry()

    async def read(self, what: Callable[[Registry], T]) -> T:
        """``what`` of the registry as this coordinator holds it (raises NotOwnerError if another server owns
        it)."""
        return what(await self._current())

    async def change(self, what: Callable[[Registry], tuple[T, Records]]) -> T:
        """Run ``what`` on the registry and make its records durable, then part of the registry; its answer.
        Changes are serialised: ``what`` sees every change before it."""
        async with self._lock:
            registry = await self._current()
            answer, records = what(registry)
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
                    registry.apply(key, value)
            return answer

    async def _current(self) -> Registry:
        await self.owner()
        loaded = await self._broker.partition(SCHEMAS_TOPIC, 0)
        if loaded is self._loaded and not loaded.failed:
            return self._registry
        if self._loading is None:
            self._loading = asyncio.get_running_loop().create_future()
            try:
                registry = Registry()
                for key, value in await internal_topics.read_load(loaded):
                    if key is not None:
                        registry.apply(key, value, index=False)
                registry.reindex()
                self._loaded, self._registry = loaded, registry
                self._loading.set_result(registry)
                log.info(
                    "%s: coordinating %d schemas, %d subjects (epoch %d)",
                    SCHEMAS_TOPIC,
                    len(registry.schemas),
                    len(registry.versions),
                    loaded.log.epoch,
                )
            except BaseException as exc:
                self._loading.set_exception(exc)
                self._loading.exception()
                raise
            finally:
                self._loading = None
            return registry
        return await asyncio.shield(self._loading)
