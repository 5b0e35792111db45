"""Consumer groups (Hippo, JMQ): a coordinator per group on the ring, time-limited partition locks, sticky
assignment, offsets in ``__consumer_offsets``, retry and dead-letter topics, broadcast mode."""

from __future__ import annotations

from server.groups.coordinator import GroupCoordinator

__all__ = ["GroupCoordinator"]
