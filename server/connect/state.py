"""The connectors the cluster runs, and every change a request makes to them, as records of ``__connectors``
(pure: no I/O, so every rule is unit-tested without a server).

The coordinator (``server.connect.coordinator``) keeps one :class:`Connectors` in memory, folded from the topic
when it takes the partition over, turns each request into records through the functions here, makes them durable
and then applies them with :meth:`Connectors.apply` — the fold's own function. Every server's task supervisor
(``server.connect.workers``) folds the same records, read from the topic, to learn what to run.

Records (the newest record of a key wins, so the topic is compacted): key the connector's name, value
``{"tenant", "config", "paused", "generation", "task_generations", "created_ms", "updated_ms"}``, or null once the
connector is deleted. ``config`` is the connector's configuration as Kafka Connect writes it (flat, string values,
``connector.class`` and ``tasks.max`` among them), stored as the client sent it and checked by
``connectors.plugins`` before it is. ``generation`` counts restarts of the whole connector and ``task_generations``
of one task: a supervisor restarts a task whose numbers moved, as it does one whose configuration changed.

Names are one namespace for the cluster, as topic names are: a connector belongs to the tenant that made it, who
alone (and the admin) sees and changes it, and its tasks act as that tenant.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

import orjson

__all__ = [
    "NAME",
    "Connector",
    "ConnectorError",
    "Connectors",
    "Records",
    "available",
    "check_name",
    "create_or_update",
    "delete",
    "pause",
    "restart",
]

NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")  # as connectors.config names them

Records = list[tuple[bytes, bytes | None]]


class ConnectorError(Exception):
    """A request the connectors' state refuses: ``status`` and ``code`` as the REST API answers them."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass(frozen=True, slots=True)
class Connector:
    name: str
    tenant: str | None  # None: the admin's (or any caller's with auth off)
    config: Mapping[str, Any]
    paused: bool = False
    generation: int = 0
    task_generations: Mapping[int, int] = field(default_factory=dict)
    created_ms: int = 0
    updated_ms: int = 0

    @property
    def type(self) -> str:
        return str(self.config.get("connector.class", ""))

    @property
    def tasks(self) -> int:
        return int(self.config.get("tasks.max", 1))

    def task_generation(self, task: int) -> tuple[int, int]:
        """What a task's run is started under: a run of an older pair is restarted."""
        return self.generation, self.task_generations.get(task, 0)

    def record(self) -> tuple[bytes, bytes | None]:
        doc = {
            "tenant": self.tenant,
            "config": dict(self.config),
            "paused": self.paused,
            "generation": self.generation,
            "task_generations": {str(k): v for k, v in self.task_generations.items()},
            "created_ms": self.created_ms,
            "updated_ms": self.updated_ms,
        }
        return self.name.encode(), orjson.dumps(doc)


@dataclass
class Connectors:
    """Every connector of the cluster, by name."""

    by_name: dict[str, Connector] = field(default_factory=dict)

    def apply(self, key: bytes, value: bytes | None, *, index: bool = True) -> None:
        name = key.decode()
        if value is None:
            self.by_name.pop(name, None)
            return
        doc = orjson.loads(value)
        self.by_name[name] = Connector(
            name,
            doc["tenant"],
            doc["config"],
            bool(doc["paused"]),
            int(doc["generation"]),
            {int(k): int(v) for k, v in doc["task_generations"].items()},
            int(doc["created_ms"]),
            int(doc["updated_ms"]),
        )

    def reindex(self) -> None:
        """Nothing is indexed beyond the names (the fold's protocol)."""

    def summary(self) -> str:
        return f"{len(self.by_name)} connectors"

    def visible(self, tenant: str | None, *, admin: bool) -> list[Connector]:
        """What a caller sees: the admin every connector, a tenant its own."""
        return sorted((c for c in self.by_name.values() if admin or c.tenant == tenant), key=lambda c: c.name)

    def get(self, name: str, tenant: str | None, *, admin: bool) -> Connector:
        """The connector, if the caller may see it; 404 as for one that does not exist otherwise."""
        found = self.by_name.get(name)
        if found is None or not (admin or found.tenant == tenant):
            raise ConnectorError(404, "CONNECTOR_NOT_FOUND", f"connector {name!r} not found")
        return found


def check_name(name: str) -> None:
    if not NAME.match(name):
        raise ConnectorError(
            400, "INVALID_REQUEST", "a connector name is 1-100 of A-Z a-z 0-9 . _ -, not starting with . _ -"
        )


def available(state: Connectors, name: str, tenant: str | None, *, admin: bool) -> None:
    """Nothing, if the caller may make or change a connector of this name; 409 if another tenant has it."""
    check_name(name)
    found = state.by_name.get(name)
    if found is not None and not (admin or found.tenant == tenant):
        # The name is taken by another tenant: one namespace, as for topics (nothing else of it is told).
        raise ConnectorError(409, "CONNECTOR_EXISTS", f"connector {name!r} exists (names are unique in the cluster)")


def create_or_update(
    state: Connectors,
    name: str,
    config: Mapping[str, Any],
    *,
    tenant: str | None,
    admin: bool,
    now_ms: int,
    must_be_new: bool = False,
    paused: bool = False,
) -> tuple[tuple[Connector, bool], Records]:
    """Make the connector (``paused``: with its tasks stopped until it is resumed), or give it a new configuration
    (its tasks restart with it); (it, made now)."""
    available(state, name, tenant, admin=admin)
    found = state.by_name.get(name)
    if found is not None and must_be_new:
        raise ConnectorError(409, "CONNECTOR_EXISTS", f"connector {name!r} exists; PUT its /config to change it")
    if found is None:
        made = Connector(name, tenant, dict(config), paused=paused, created_ms=now_ms, updated_ms=now_ms)
        return (made, True), [made.record()]
    if dict(found.config) == dict(config):
        return (found, False), []
    changed = replace(found, config=dict(config), updated_ms=now_ms)
    return (changed, False), [changed.record()]


def pause(state: Connectors, name: str, *, paused: bool, tenant: str | None, admin: bool) -> tuple[Connector, Records]:
    found = state.get(name, tenant, admin=admin)
    if found.paused == paused:
        return found, []
    return found, [replace(found, paused=paused).record()]


def restart(
    state: Connectors, name: str, *, task: int | None, tenant: str | None, admin: bool
) -> tuple[Connector, Records]:
    """Every task (``task`` None) or one task started again."""
    found = state.get(name, tenant, admin=admin)
    if task is None:
        return found, [replace(found, generation=found.generation + 1).record()]
    if not 0 <= task < found.tasks:
        raise ConnectorError(404, "TASK_NOT_FOUND", f"connector {name!r} has tasks 0..{found.tasks - 1}")
    generations = {**found.task_generations, task: found.task_generations.get(task, 0) + 1}
    return found, [replace(found, task_generations=generations).record()]


def delete(state: Connectors, name: str, *, tenant: str | None, admin: bool) -> tuple[Connector, Records]:
    found = state.get(name, tenant, admin=admin)
    return found, [(name.encode(), None)]
