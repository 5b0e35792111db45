"""Topic metadata in ZooKeeper: ``/talos/topics/<name>`` holds the topic's configuration as JSON.

Every server watches the topics, so a topic created, changed or deleted through any server is seen by
all within a ZooKeeper round trip. Changes are compare-and-set on the node's version. Deleting a topic
removes its node, its partition epochs and then its data directory in the storage.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import orjson
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from fencing import FileSystem
from server.coordination import paths
from server.topics import (
    TopicConfig,
    concurrent_change,
    new_topic,
    topic_dir,
    topic_exists,
    unknown_topic,
)

__all__ = ["ZkTopicStore", "decode_topic"]

log = logging.getLogger("talos.cluster")
TopicListener = Callable[[str, TopicConfig | None], None]


def decode_topic(data: bytes) -> TopicConfig:
    return TopicConfig(**orjson.loads(data))


class ZkTopicStore:
    def __init__(self, zk: KazooClient, fs: FileSystem, root: str) -> None:
        self._zk = zk
        self._fs = fs
        self._root = root
        self._watched: set[str] = set()
        zk.ensure_path(paths.TOPICS)

    def get(self, name: str) -> TopicConfig | None:
        try:
            data, _stat = self._zk.get(paths.topic(name))
        except NoNodeError:
            return None
        return decode_topic(data)

    def list(self) -> list[TopicConfig]:
        out = []
        for name in self._zk.get_children(paths.TOPICS):
            config = self.get(name)
            if config is not None:
                out.append(config)
        return out

    def create(self, config: TopicConfig) -> TopicConfig:
        config = new_topic(config)
        try:
            self._zk.create(paths.topic(config.name), orjson.dumps(config.to_json()))
        except NodeExistsError:
            raise topic_exists(config.name) from None
        return config

    def update(self, name: str, **changes: Any) -> TopicConfig:
        try:
            data, stat = self._zk.get(paths.topic(name))
        except NoNodeError:
            raise unknown_topic(name) from None
        current = decode_topic(data)
        updated = dataclasses.replace(current, **changes, version=current.version + 1)
        try:
            self._zk.set(paths.topic(name), orjson.dumps(updated.to_json()), version=stat.version)
        except BadVersionError:
            raise concurrent_change(name) from None
        except NoNodeError:
            raise unknown_topic(name) from None
        return updated

    def delete(self, name: str) -> None:
        try:
            self._zk.delete(paths.topic(name))
        except NoNodeError:
            raise unknown_topic(name) from None
        with contextlib.suppress(NoNodeError):
            self._zk.delete(f"{paths.PARTITIONS}/{name}", recursive=True)
        self._fs.delete(topic_dir(self._root, name), recursive=True)

    def watch(self, listener: TopicListener) -> None:
        """Call ``listener(name, config)`` now for every topic and on every change; ``config`` is None when
        the topic is deleted. Called on kazoo's thread: the listener must not block."""

        def children(names: list[str]) -> None:
            for name in names:
                if name not in self._watched:
                    self._watched.add(name)
                    DataWatch(self._zk, paths.topic(name), self._data_watcher(name, listener))

        ChildrenWatch(self._zk, paths.TOPICS, children)

    def _data_watcher(self, name: str, listener: TopicListener) -> Callable[[bytes | None, ZnodeStat | None], bool]:
        def changed(data: bytes | None, _stat: ZnodeStat | None) -> bool:
            if data is None:
                self._watched.discard(name)
                listener(name, None)
                return False  # stop watching; a topic created again under this name gets a new watch
            try:
                listener(name, decode_topic(data))
            except Exception:
                log.exception("bad metadata for topic %s", name)
            return True

        return changed
