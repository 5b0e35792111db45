"""Leaderless ring maintenance: every server runs ``tick()`` now and then; CAS keeps one ring.

Members join once registered for ``join_delay`` and leave once unregistered for ``reassign_delay``
(``hashring.next_members``); a member that stepped down (its registration says it cannot write) leaves at once
and joins again ``join_delay`` after it can. With a traffic source (the metering store) it also reweighs the ring
every ``reweigh_every_s``. A server remembers since when it has seen each member missing, so the
member leaves once the earliest observer's delay is over: never sooner than ``reassign_delay`` after it
disappeared. Registration times are ZooKeeper's (ctime), the same for every observer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from kazoo.client import KazooClient

from hashring import DEFAULT_VNODES, Ring, next_members, rebalance, worth_publishing
from server.coordination.registry import LiveServer, ServerRegistry
from server.coordination.ringstore import RingStore

__all__ = ["RingKeeper"]

log = logging.getLogger("talos.ring")


class RingKeeper:
    def __init__(
        self,
        zk: KazooClient,
        *,
        join_delay: float,
        reassign_delay: float,
        vnodes: int = DEFAULT_VNODES,
        clock: Callable[[], float] = time.time,
        traffic: Callable[[], Mapping[str, float]] | None = None,
        reweigh_every_s: float = 3600.0,
    ) -> None:
        self._registry = ServerRegistry(zk)
        self._store = RingStore(zk)
        self._join_delay = join_delay
        self._reassign_delay = reassign_delay
        self._vnodes = vnodes
        self._clock = clock
        self._missing_since: dict[str, float] = {}
        self._traffic = traffic
        self._reweigh_every_s = reweigh_every_s
        self._reweighed_at = float("-inf")
        self.live: dict[str, LiveServer] = {}  # the registrations as the last tick read them

    def tick(self) -> Ring:
        """Bring the ring up to date with the registrations; returns the ring now in force."""
        for _attempt in range(10):
            live = self.live = self._registry.live()
            ring, version = self._store.read()
            now = self._clock()
            for member in ring.members:
                if member in live:
                    self._missing_since.pop(member, None)
                else:
                    self._missing_since.setdefault(member, now)
            for gone in set(self._missing_since) - set(ring.members):
                del self._missing_since[gone]
            change = next_members(
                ring,
                {server: info.since for server, info in live.items() if info.storage.writable},
                self._missing_since,
                now,
                join_delay=self._join_delay,
                reassign_delay=self._reassign_delay,
                vnodes=self._vnodes,
                stepped_down={server for server, info in live.items() if not info.storage.writable},
            )
            if not change.changed:
                return self._reweigh(ring, version, now)
            proposal = ring.with_members(change.members)
            if self._store.publish(proposal, version):
                return proposal
            # another server changed the ring meanwhile: look again
        return self._store.read()[0]

    def _reweigh(self, ring: Ring, version: int, now: float) -> Ring:
        """Talos's traffic weighting: now and then, give members vnodes in proportion to the metered traffic
        of what they own, if that balances load by enough to be worth the partitions it moves."""
        if self._traffic is None or not ring.members or now - self._reweighed_at < self._reweigh_every_s:
            return ring
        self._reweighed_at = now
        traffic = self._traffic()
        if not traffic:
            return ring
        result = rebalance(ring, traffic)
        if not worth_publishing(result, keys=len(traffic)):
            return ring
        log.info(
            "ring weights: max/mean traffic %.2f -> %.2f, %d partitions move",
            result.before,
            result.after,
            len(result.moved),
        )
        return result.ring if self._store.publish(result.ring, version) else self._store.read()[0]
