"""What the edges (REST's ``/connectors``, the portal's connector pages) do with connectors, in one place: the caller's
view of them, their changes through the coordinator, and their state gathered from the servers running their tasks.

Every call but :meth:`ConnectService.owner` runs on the connectors' coordinator and raises ``NotOwnerError`` on any
other server: an edge asks :meth:`~ConnectService.owner` first and sends the request there (REST relays it whole,
the portal calls that server's REST route as the signed-in principal). Configurations are checked by
``connectors.plugins`` (imported when first needed: a server without the connect extra says so, 501).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import orjson

from server.broker import Broker
from server.cluster import Owner
from server.connect.coordinator import ConnectorCoordinator
from server.connect.state import (
    Connector,
    ConnectorError,
    Connectors,
    Records,
    available,
    check_name,
    create_or_update,
    delete,
    pause,
    restart,
)
from server.connect.workers import TaskState, TaskWorkers, task_key
from server.errors import ApiError
from server.security import audit
from server.security.access import Principal

__all__ = ["ConnectService", "checked_config", "info", "kind"]


def kind(connector: Connector) -> str:
    return "sink" if connector.type.endswith("-sink") else "source"


def info(connector: Connector) -> dict[str, Any]:
    """Kafka Connect's ConnectorInfo: name, configuration, tasks and type; and Talos's ``tenant`` (its owner, None
    for the admin's)."""
    return {
        "name": connector.name,
        "config": {**connector.config, "name": connector.name},
        "tasks": [{"connector": connector.name, "task": task} for task in range(connector.tasks)],
        "type": kind(connector),
        "tenant": connector.tenant,
    }


def checked_config(name: str, config: object) -> dict[str, Any]:
    """The configuration as stored, once ``connectors.plugins`` finds it valid; 400 listing every problem."""
    check_name(name)
    try:
        from connectors.config import ConfigError
        from connectors.plugins import from_connect
    except ImportError as exc:
        raise ApiError(501, "CONNECT_UNAVAILABLE", f"this server cannot run connectors: {exc}") from None
    if not isinstance(config, Mapping):
        raise ConnectorError(400, "INVALID_REQUEST", "config must be a JSON object of settings")
    try:
        from_connect(name, config)
    except ConfigError as exc:
        raise ConnectorError(400, "INVALID_CONFIG", str(exc)) from None
    return {k: v for k, v in config.items() if k != "name"}


class ConnectService:
    def __init__(self, broker: Broker, coordinator: ConnectorCoordinator, workers: TaskWorkers) -> None:
        self.broker = broker
        self.coordinator = coordinator
        self.workers = workers

    async def owner(self) -> Owner:
        """The server that answers about connectors now (the coordinator)."""
        return await self.coordinator.owner()

    def _admin(self, who: Principal) -> bool:
        return who.admin or not self.broker.security.enabled

    async def visible(self, who: Principal) -> list[Connector]:
        return await self.coordinator.read(lambda s: s.visible(who.tenant, admin=self._admin(who)))

    async def get(self, who: Principal, name: str) -> Connector:
        """The connector; 404 if it does not exist or the caller may not see it."""
        return await self.coordinator.read(lambda s: s.get(name, who.tenant, admin=self._admin(who)))

    async def put(
        self, who: Principal, name: str, config: object, *, must_be_new: bool = False, paused: bool = False
    ) -> tuple[Connector, bool]:
        """Make the connector (as ``who``'s; ``paused``: its tasks stopped until it is resumed) or give it a new
        configuration; (it, made now)."""
        # Another tenant's name is taken (409), whatever the configuration: told before the configuration's problems.
        await self.coordinator.read(lambda s: available(s, name, who.tenant, admin=self._admin(who)))
        stored = checked_config(name, config)
        now_ms = int(time.time() * 1000)
        connector, made = await self.coordinator.change(
            lambda s: create_or_update(
                s,
                name,
                stored,
                tenant=who.tenant,
                admin=self._admin(who),
                now_ms=now_ms,
                must_be_new=must_be_new,
                paused=paused,
            )
        )
        await self._audit(who, "connector.create" if made else "connector.config", connector, connector.type)
        return connector, made

    async def pause(self, who: Principal, name: str, *, paused: bool) -> None:
        admin = self._admin(who)
        found = await self.coordinator.change(lambda s: pause(s, name, paused=paused, tenant=who.tenant, admin=admin))
        await self._audit(who, "connector.pause" if paused else "connector.resume", found)

    async def restart(self, who: Principal, name: str, task: int | None = None) -> None:
        """Every task (``task`` None) or one started again, wherever each runs."""

        def change(state: Connectors) -> tuple[Connector, Records]:
            return restart(state, name, task=task, tenant=who.tenant, admin=self._admin(who))

        found = await self.coordinator.change(change)
        await self._audit(who, "connector.restart", found, "all tasks" if task is None else f"task {task}")

    async def delete(self, who: Principal, name: str) -> None:
        found = await self.coordinator.change(lambda s: delete(s, name, tenant=who.tenant, admin=self._admin(who)))
        await self._audit(who, "connector.delete", found)

    async def _audit(self, who: Principal, action: str, connector: Connector, detail: str = "") -> None:
        """The change in the audit log, under the connector's tenant (a tenant sees its own entries there)."""
        await audit.record(self.broker, who, action, connector.name, tenant=connector.tenant, detail=detail)

    async def status(self, connector: Connector) -> dict[str, Any]:
        """Kafka Connect's status: the connector's state and each task's, with the server running it."""
        # Asked of their servers at once: a page of many connectors waits for the slowest server, not for the sum.
        tasks = await asyncio.gather(*(self._task_state(connector, task) for task in range(connector.tasks)))
        states = {t["state"] for t in tasks}
        if connector.paused:
            state = "PAUSED"
        elif tasks and states == {"FAILED"}:
            state = "FAILED"
        elif states <= {"UNASSIGNED"}:
            state = "UNASSIGNED"
        else:
            state = "RUNNING"
        return {
            "name": connector.name,
            "connector": {"state": state, "worker_id": self.broker.config.url},
            "tasks": tasks,
            "type": kind(connector),
        }

    async def _task_state(self, connector: Connector, task: int) -> dict[str, Any]:
        if connector.paused:
            return TaskState("PAUSED", self.broker.config.url).to_json(task)
        try:
            owner = self.broker.owner_of(task_key(connector.name, task))
        except ApiError as exc:
            return TaskState("UNASSIGNED", "", exc.message).to_json(task)
        if owner.local:
            return self.workers.local_state(connector.name, task).to_json(task)
        path = f"/connectors/{connector.name}/tasks/{task}/status"
        try:  # as the servers' own question (the admin's token), which only that server's own tasks answer
            reply = await self.broker.forwarder.send(owner, "GET", path, query={"local": "true"}, headers={}, body=None)
            if reply.status == 200:
                found: dict[str, Any] = orjson.loads(reply.body)
                return found
            why = f"its server answered {reply.status}"
        except ApiError as exc:
            why = exc.message
        return TaskState("UNASSIGNED", owner.url or owner.server_id, f"not known: {why}").to_json(task)
