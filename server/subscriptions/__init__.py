"""Push subscriptions: a topic's messages pushed over a WebSocket to many subscribers, shared message by
message, each acknowledged on its own (a queue on top of the log; Kafka's share groups, Pulsar's Shared
subscriptions). ``ledger`` is the pure state of one partition, ``records`` the state topic's records,
``coordinator`` the server that owns a subscription, ``link`` how other servers reach it, ``session`` one
subscriber's WebSocket and ``api`` the routes."""

from server.subscriptions.coordinator import SubscriptionCoordinator

__all__ = ["SubscriptionCoordinator"]
