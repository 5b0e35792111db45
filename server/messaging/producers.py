"""Idempotent producers' ids: a new id (owned by the caller's tenant), the next epoch of one, or a named
producer's id and lease."""

from __future__ import annotations

import asyncio

from server.broker import Broker
from server.errors import ApiError
from server.security.access import Principal

__all__ = ["claim_producer", "init_producer"]


def _owner(broker: Broker, who: Principal) -> str | None:
    return who.tenant if broker.security.enabled else None  # the id's owner (None: the admin)


async def init_producer(broker: Broker, who: Principal, producer_id: int | None = None) -> tuple[int, int]:
    """A new producer id and its epoch, or (``producer_id``) the next epoch of that one, which fences the
    older instance."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(broker.executor, broker.producer_ids.allocate, producer_id, _owner(broker, who))


async def claim_producer(
    broker: Broker, who: Principal, name: str, lease_ms: int, holder: tuple[int, int] | None
) -> tuple[int, int]:
    """A named producer's id and next epoch with a lease (``holder``: the id and epoch of the instance that
    renews it; lease 0 releases)."""
    if lease_ms < 0:
        raise ApiError(400, "INVALID_REQUEST", "lease_ms must not be negative")
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(
        broker.executor, broker.producer_ids.claim, name, _owner(broker, who), lease_ms, holder
    )
