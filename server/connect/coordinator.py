"""The connectors' coordinator: the owner of ``__connectors`` (one partition, compacted) keeps every connector
(``server.connect.state``) in memory and makes each change a durable append first (``server.compacted_state``), so
two servers asked at once to make the same name make it once."""

from __future__ import annotations

import time
from typing import Final

from server.broker import Broker
from server.compacted_state import CompactedStateCoordinator
from server.connect.state import Connectors
from server.topics import TopicConfig

__all__ = ["CONNECTORS_TOPIC", "ConnectorCoordinator", "topic_config"]

CONNECTORS_TOPIC: Final = "__connectors"


def topic_config() -> TopicConfig:
    """How the servers create the topic on first use: one partition (one writer orders every change)."""
    return TopicConfig(
        CONNECTORS_TOPIC,
        1,
        cleanup_policy="compact",
        segment_ms=3600 * 1000,
        segment_bytes=4 * 1024 * 1024,
        created_ms=int(time.time() * 1000),
    )


class ConnectorCoordinator(CompactedStateCoordinator[Connectors]):
    def __init__(self, broker: Broker) -> None:
        super().__init__(broker, topic_config, Connectors)
