"""What every Kafka API handler gets: the broker, the group coordinators, the connection's session, and
the REST API of this very server for the calls that Kafka and REST must answer identically."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from server.broker import Broker
from server.cluster import Owner
from server.groups.coordinator import GroupCoordinator
from server.http.reply import answer_of
from server.kafka.group_state import Memberships
from server.kafka.protocol import RequestHeader
from server.kafka.session import Session

__all__ = ["Context"]


@dataclass(frozen=True, slots=True)
class Context:
    broker: Broker
    coordinator: GroupCoordinator  # Talos groups: committed offsets (``__consumer_offsets``), names, owners
    memberships: Memberships  # Kafka groups' members here, at their coordinator
    session: Session
    header: RequestHeader

    async def rest(self, method: str, path: str, body: object | None = None) -> dict[str, Any]:
        """This server's own REST API, as the connection's principal (its token): creating and deleting topics
        and allocating producer ids are checked, limited and audited by one implementation. Raises the
        :class:`ApiError` REST answered."""
        config = self.broker.config
        me = Owner(self.broker.cluster.server_id if self.broker.cluster else config.member_id, config.url, False)
        headers = {"content-type": "application/json"}
        if "authorization" in self.session.headers:
            headers["authorization"] = self.session.headers["authorization"]
        data = None if body is None else orjson.dumps(body)
        reply = await self.broker.forwarder.send(me, method, path, query={}, headers=headers, body=data)
        return answer_of(reply)
