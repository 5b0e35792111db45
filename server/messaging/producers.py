"""Idempotent producers' ids: a new id (owned by the caller's tenant), or the next epoch of one. A named
producer's id and lease are a transactional id's (``server.transactions``)."""

from __future__ import annotations

import asyncio

from server.broker import Broker
from server.security.access import Principal

__all__ = ["init_producer"]


def _owner(broker: Broker, who: Principal) -> str | None:
    return who.tenant if broker.security.enabled else None  # the id's owner (None: the admin)


async def init_producer(broker: Broker, who: Principal, producer_id: int | None = None) -> tuple[int, int]:
    """A new producer id and its epoch, or (``producer_id``) the next epoch of that one, which fences the
    older instance."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(broker.executor, broker.producer_ids.allocate, producer_id, _owner(broker, who))
