"""Quota admission and metering of a message request, on the partition's owner."""

from __future__ import annotations

import time

from server.broker import Broker
from server.messaging.caller import Caller
from server.security.buckets import TokenBucket
from server.security.guard import NO_CHARGE, Charge

__all__ = ["Metered", "admit", "admit_now"]


def admit(broker: Broker, caller: Caller, topic: str, kind: str) -> list[TokenBucket]:
    """Rate quotas, on the partition's owner (429 when over); the byte buckets to pay once sizes are known.
    Every byte a tenant causes counts, on internal topics (a group's retry and dead-letter topics) too; only
    the servers' own requests on their topics (the admin principal, no tenant named) are not limited."""
    if _servers_own(caller, topic):
        return []
    return broker.security.admit(caller.billed, topic, kind)


def admit_now(broker: Broker, caller: Caller, topic: str, kind: str, cost: int) -> Charge | None:
    """:func:`admit` and the payment of ``cost`` bytes without an await (``Security.admit_now``): the charge, to
    refund if the request is then not served; None, charging nothing, if paying would hold the request."""
    security = broker.security
    if not security.rates_limited or _servers_own(caller, topic):  # the common case first: no rate limited
        return NO_CHARGE
    return security.admit_now(caller.billed, topic, kind, cost)


def _servers_own(caller: Caller, topic: str) -> bool:
    """A server's own request on its internal topics (the admin principal, no tenant named): never limited."""
    return caller.tenant is None and topic.startswith("__")


class Metered:
    """Counts a request served here (the partition's owner) for metering; the body fills in ``sizes``. A class,
    not a generator-based context manager: it is on every produce and fetch."""

    __slots__ = ("_broker", "_key", "_started", "sizes")

    def __init__(self, broker: Broker, caller: Caller, topic: str, partition: int) -> None:
        self._broker = broker
        self._key = (caller.billed, topic, partition)
        self._started = time.monotonic()
        self.sizes: dict[str, int] = {}

    def __enter__(self) -> dict[str, int]:
        return self.sizes

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            self._broker.usage.record(self._key, started=self._started, sizes=self.sizes)
        else:
            self._broker.usage.record(self._key, started=self._started, error=True)
