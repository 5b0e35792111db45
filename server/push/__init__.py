"""The WebSocket push edge: ``GET /v1/subscribe`` (``endpoint``) and one subscriber's connection (``session``),
which pushes what the subscription's coordinator leases and relays the subscriber's settlements.

May import the subscriptions room (coordinator, link, making), the services (``server.messaging``), security,
the broker and ``server.web``; never another edge (``server.http``, ``server.kafka``, ``server.portal``). Only
the app assembly (``server.app``) imports it (tests/unit/test_import_direction.py).
"""

from server.push.endpoint import router

__all__ = ["router"]
