"""The schema registry's coordinator: the owner of ``__schemas`` (one partition, compacted) keeps the registry
(``server.schemas.state``) in memory and makes every change of it a durable append to that partition
(``server.compacted_state``), so registrations are ordered and ids are given once, whichever server a client asked;
a registration's schema and version records are stored together or not at all.
"""

from __future__ import annotations

import time
from typing import Final

from server.broker import Broker
from server.compacted_state import CompactedStateCoordinator
from server.schemas.state import Registry
from server.topics import TopicConfig

__all__ = ["SCHEMAS_TOPIC", "SchemaCoordinator", "topic_config"]

SCHEMAS_TOPIC: Final = "__schemas"
_SEGMENT_MS: Final = 3600 * 1000


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


class SchemaCoordinator(CompactedStateCoordinator[Registry]):
    def __init__(self, broker: Broker) -> None:
        super().__init__(broker, topic_config, Registry)
