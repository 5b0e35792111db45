"""The server's state: storage, topic metadata, loaded partitions, the I/O threads and the tail cache."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from fencing import DirectoryEpochSource, FileSystem, LogConfig, LogError, PartitionLog, open_storage
from fencing.local import LocalFileSystem
from server.config import ServerConfig
from server.errors import ApiError
from server.partition import LoadedPartition
from server.tailcache import TailCache
from server.topics import TopicConfig, TopicStore

__all__ = ["Broker"]

log = logging.getLogger("talos.server")
T = TypeVar("T")


class Broker:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.fs: FileSystem
        self.root: str
        self.fs, self.root = open_storage(config.storage)
        self._lock_fd: int | None = None
        if isinstance(self.fs, LocalFileSystem):
            self._lock_directory()
        self.topics = TopicStore(self.fs, self.root)
        self.executor = ThreadPoolExecutor(max_workers=config.io_threads, thread_name_prefix="talos-io")
        self.cache = TailCache(config.tail_cache_bytes)
        self._topics: dict[str, TopicConfig] = {t.name: t for t in self.topics.list()}
        self._partitions: dict[tuple[str, int], LoadedPartition] = {}
        self._loading: dict[tuple[str, int], asyncio.Future[LoadedPartition]] = {}
        self._round_robin: dict[str, itertools.count[int]] = {}

    def _lock_directory(self) -> None:
        # Two standalone servers on one directory would fence each other in turn: refuse the second.
        self.fs.mkdirs(self.root)
        fd = os.open(os.path.join(self.root, ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RuntimeError(f"another Talos server is using {self.root}") from None
        self._lock_fd = fd

    # ---------------------------------------------------------------- topics

    def topic(self, name: str) -> TopicConfig:
        config = self._topics.get(name)
        if config is None:
            raise ApiError(404, "UNKNOWN_TOPIC", f"unknown topic {name!r}")
        return config

    def list_topics(self) -> list[TopicConfig]:
        return sorted(self._topics.values(), key=lambda t: t.name)

    async def create_topic(self, config: TopicConfig) -> TopicConfig:
        created = await self._io(self.topics.create, config)
        self._topics[created.name] = created
        return created

    async def update_topic(self, name: str, **changes: Any) -> TopicConfig:
        updated = await self._io(lambda: self.topics.update(name, **changes))
        self._topics[name] = updated
        for key, partition in list(self._partitions.items()):
            if key[0] == name:
                partition.log.set_retention(retention_ms=updated.retention_ms, retention_bytes=updated.retention_bytes)
        return updated

    async def delete_topic(self, name: str) -> None:
        self.topic(name)
        self._topics.pop(name, None)
        for key in [k for k in self._partitions if k[0] == name]:
            partition = self._partitions.pop(key)
            with contextlib.suppress(LogError):
                await partition.close()
        await self._io(self.topics.delete, name)

    def next_partition(self, topic: TopicConfig) -> int:
        counter = self._round_robin.setdefault(topic.name, itertools.count())
        return next(counter) % topic.partitions

    # ---------------------------------------------------------------- partitions

    async def partition(self, topic: str, index: int) -> LoadedPartition:
        config = self.topic(topic)
        if not 0 <= index < config.partitions:
            raise ApiError(404, "UNKNOWN_PARTITION", f"topic {topic!r} has partitions 0..{config.partitions - 1}")
        key = (topic, index)
        loaded = self._partitions.get(key)
        if loaded is not None and not loaded.failed:
            return loaded
        pending = self._loading.get(key)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._loading[key] = pending
            try:
                if loaded is not None:  # failed (storage error, fenced): take it over again
                    log.warning("reloading %s/%d after: %s", topic, index, loaded.log.failed)
                    self._partitions.pop(key, None)
                plog = await self._io(self._open_log, config, index)
                loaded = LoadedPartition(
                    topic,
                    index,
                    plog,
                    self.cache.partition(topic, index),
                    self.executor,
                    group_commit=self.config.group_commit,
                )
                self._partitions[key] = loaded
                pending.set_result(loaded)
            except Exception as exc:
                pending.set_exception(exc)
                pending.exception()  # retrieved: no "never retrieved" warning when nobody else waits
                raise
            finally:
                del self._loading[key]
            return loaded
        return await asyncio.shield(pending)

    def _open_log(self, config: TopicConfig, index: int) -> PartitionLog:
        directory = self.topics.partition_dir(config.name, index)
        log_config = LogConfig(
            segment_bytes=self.config.segment_bytes,
            retention_ms=config.retention_ms,
            retention_bytes=config.retention_bytes,
        )
        return PartitionLog.open(self.fs, directory, DirectoryEpochSource(self.fs, directory), config=log_config)

    def loaded_partitions(self) -> list[LoadedPartition]:
        return list(self._partitions.values())

    async def maintain(self) -> None:
        """Retention and age-based rolls for every loaded partition (called periodically)."""
        for partition in self.loaded_partitions():
            if partition.failed:
                continue
            with contextlib.suppress(LogError):
                await self._io(partition.log.enforce_retention)

    async def _io(self, function: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, function, *args)

    async def close(self) -> None:
        for partition in list(self._partitions.values()):
            with contextlib.suppress(LogError):
                await partition.close()
        self._partitions.clear()
        self.executor.shutdown(wait=True)
        self.fs.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
