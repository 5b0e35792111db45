"""What every Kafka API handler gets: the broker, the group and transaction coordinators and the connection's
session. Calls
that Kafka and REST must answer identically go to the same service (``server.messaging``)."""

from __future__ import annotations

from dataclasses import dataclass

from server.broker import Broker
from server.groups.coordinator import GroupCoordinator
from server.kafka.group_state import Memberships
from server.kafka.protocol import RequestHeader
from server.kafka.session import Session
from server.transactions.coordinator import TransactionCoordinator

__all__ = ["Context"]


@dataclass(frozen=True, slots=True)
class Context:
    broker: Broker
    coordinator: GroupCoordinator  # Talos groups: committed offsets (``__consumer_offsets``), names, owners
    memberships: Memberships  # Kafka groups' members here, at their coordinator
    transactions: TransactionCoordinator  # transactional ids whose ``__transaction_state`` partition is here
    session: Session
    header: RequestHeader
