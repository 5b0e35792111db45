"""Topic metadata. Standalone keeps it in the storage beside the data: ``<root>/topics/<name>/_topic/<version>.json``;
a cluster keeps it in ZooKeeper (``server.coordination.topics``). Data is always in ``<root>/topics/<name>/<p>``.

Each change writes the next version exclusively, so two writers cannot both win; the highest version is
the topic's current configuration.
"""

from __future__ import annotations

import dataclasses
import posixpath
import time
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import orjson

from fencing import FileSystem
from server.errors import ApiError
from talos._admin import TopicSettings
from talos._names import topic_name_problem

__all__ = [
    "MAX_PARTITIONS",
    "TopicCatalog",
    "TopicConfig",
    "TopicStore",
    "concurrent_change",
    "new_topic",
    "partition_dir",
    "topic_dir",
    "topic_exists",
    "unknown_topic",
    "validate_topic_name",
]

MAX_PARTITIONS = 4096
# Internal topics that clients may create through the public API: none any more (connector checkpoints go
# through /v1/connectors/{name}/offsets). The servers create their topics on first use.
CLIENT_INTERNAL_TOPICS: frozenset[str] = frozenset()
_META = "_topic"


def validate_topic_name(name: str, *, internal_ok: bool = False) -> str:
    """The name, or 400 INVALID_TOPIC_NAME by the SDK's rule (``talos._names``); '__' names are internal."""
    if name in CLIENT_INTERNAL_TOPICS:
        return name
    problem = topic_name_problem(name, internal_ok=internal_ok)
    if problem is not None:
        raise ApiError(400, "INVALID_TOPIC_NAME", problem)
    return name


@dataclass(frozen=True)
class TopicConfig(TopicSettings):
    tenant: str | None = None  # the owner; None for internal topics and topics made with auth off

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def topic_dir(root: str, name: str) -> str:
    return posixpath.join(root, "topics", name)


def partition_dir(root: str, name: str, partition: int) -> str:
    return posixpath.join(root, "topics", name, str(partition))


class TopicCatalog(Protocol):
    """Where topic metadata lives: the storage (standalone) or ZooKeeper (cluster)."""

    def get(self, name: str) -> TopicConfig | None: ...

    def list(self) -> list[TopicConfig]: ...

    def create(self, config: TopicConfig) -> TopicConfig: ...

    def update(self, name: str, **changes: Any) -> TopicConfig: ...

    def delete(self, name: str) -> None: ...


def new_topic(config: TopicConfig) -> TopicConfig:
    return dataclasses.replace(config, version=1, created_ms=int(time.time() * 1000))


def topic_exists(name: str) -> ApiError:
    return ApiError(409, "TOPIC_EXISTS", f"topic {name!r} already exists")


def unknown_topic(name: str) -> ApiError:
    return ApiError(404, "UNKNOWN_TOPIC", f"unknown topic {name!r}")


def concurrent_change(name: str) -> ApiError:
    return ApiError(409, "CONFLICT", f"topic {name!r} changed concurrently; retry", retriable=True)


class TopicStore:
    """Topic metadata in the storage, beside the data (standalone)."""

    def __init__(self, fs: FileSystem, root: str) -> None:
        self._fs = fs
        self._root = posixpath.join(root, "topics")
        self._fs.mkdirs(self._root)

    def _versions(self, name: str) -> list[int]:
        try:
            entries = self._fs.list(posixpath.join(self._root, name, _META))
        except FileNotFoundError:
            return []
        return sorted(int(e.name.split(".")[0]) for e in entries if e.name.endswith(".json"))

    def _write(self, config: TopicConfig) -> None:
        # Published whole (never overwriting): a racing creator's reader sees the whole file or none.
        path = posixpath.join(self._root, config.name, _META, f"{config.version:010d}.json")
        self._fs.publish(path, orjson.dumps(config.to_json()))

    def get(self, name: str) -> TopicConfig | None:
        versions = self._versions(name)
        if not versions:
            return None
        path = posixpath.join(self._root, name, _META, f"{versions[-1]:010d}.json")
        try:
            return TopicConfig(**orjson.loads(self._fs.read(path)))
        except FileNotFoundError:
            return None  # deleted meanwhile

    def list(self) -> list[TopicConfig]:
        out = []
        for entry in self._fs.list(self._root):
            if entry.is_dir and (config := self.get(entry.name)) is not None:
                out.append(config)
        return out

    def create(self, config: TopicConfig) -> TopicConfig:
        config = new_topic(config)
        try:
            self._write(config)
        except FileExistsError:
            raise topic_exists(config.name) from None
        return config

    def update(self, name: str, **changes: Any) -> TopicConfig:
        current = self.get(name)
        if current is None:
            raise unknown_topic(name)
        updated = dataclasses.replace(current, **changes, version=current.version + 1)
        try:
            self._write(updated)
        except FileExistsError:
            raise concurrent_change(name) from None
        return updated

    def delete(self, name: str) -> None:
        if not self._fs.delete(posixpath.join(self._root, name), recursive=True):
            raise unknown_topic(name)
