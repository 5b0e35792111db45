"""Consumer groups (Hippo, JMQ): a coordinator per group on the ring, time-limited partition locks, sticky
assignment, offsets in ``__consumer_offsets``, retry and dead-letter topics, broadcast mode.

A coordinator built on the services (``server.messaging``): may import them, security, the broker and below;
never an edge. Its REST routes are ``server.http.routes.groups``; the Kafka listener's groups use it too."""

from __future__ import annotations

from server.groups.coordinator import GroupCoordinator

__all__ = ["GroupCoordinator"]
