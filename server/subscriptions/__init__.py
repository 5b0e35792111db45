"""Push subscriptions: a topic's messages pushed over a WebSocket to many subscribers, shared message by
message, each acknowledged on its own (a queue on top of the log; Kafka's share groups, Pulsar's Shared
subscriptions). ``ledger`` is the pure state of one partition, ``records`` the state topic's records,
``coordinator`` the server that owns a subscription (it reads the topic through ``server.messaging``),
``link`` how other servers reach it and ``making`` how a principal makes one. A coordinator, not an edge:
it may import the services (``server.messaging``), security, the broker and the partition room, never an
edge; its REST routes are ``server.http.routes.subscriptions`` and its WebSocket ``server.push``."""

from server.subscriptions.coordinator import SubscriptionCoordinator

__all__ = ["SubscriptionCoordinator"]
