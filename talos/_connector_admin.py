"""Admin's methods for the connectors the cluster runs (``/connectors``, shaped like Kafka Connect's REST API): a
mixin of :class:`talos.Admin` and :class:`talos.AsyncAdmin`, sending through their ``_send``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

import orjson

from talos._admin_call import Call as _Call
from talos._clients import operation
from talos._steps import Steps
from talos._transport import Response

__all__ = ["ConnectorAdmin"]

T = TypeVar("T")


def _path(name: str, leaf: str = "") -> str:
    return f"/connectors/{quote(name, safe='')}{leaf}"


def _json(response: Response) -> Any:
    return response.json()


class ConnectorAdmin:
    if TYPE_CHECKING:  # the client's (``_Admin._send``), which this mixin sends through

        def _send(self, call: _Call[T]) -> Steps[T]: ...

    @operation
    def list_connectors(self) -> Steps[list[str]]:
        """Names of the connectors the cluster runs that the caller sees (a tenant: its own; the admin: all)."""
        return self._send(_Call("GET", "/connectors", _json))

    @operation
    def put_connector(self, name: str, config: Mapping[str, object]) -> Steps[dict[str, Any]]:
        """Make the connector, or give it a new configuration (its tasks restart with it): ``config`` in Kafka
        Connect's shape, ``connector.class``, ``tasks.max``, ``topics`` or ``topic`` and the type's settings
        (docs/connectors.md). Its info: name, config, tasks, type. A configuration the servers refuse raises
        :class:`InvalidRequestError` naming every problem; a name another tenant has, :class:`ConflictError`."""
        return self._send(_Call("PUT", _path(name, "/config"), _json, orjson.dumps(dict(config))))

    @operation
    def describe_connector(self, name: str) -> Steps[dict[str, Any]]:
        """The connector's info: name, config, tasks and type (and its tenant)."""
        return self._send(_Call("GET", _path(name), _json))

    @operation
    def connector_status(self, name: str) -> Steps[dict[str, Any]]:
        """The connector's state (``RUNNING``, ``PAUSED``, ``FAILED``, ``UNASSIGNED``) and each task's, with the
        server running it (``worker_id``), its records, restarts and last error (``trace``)."""
        return self._send(_Call("GET", _path(name, "/status"), _json))

    @operation
    def pause_connector(self, name: str) -> Steps[None]:
        """Stop the connector's tasks until :meth:`resume_connector`."""
        return self._send(_Call("PUT", _path(name, "/pause"), lambda r: None))

    @operation
    def resume_connector(self, name: str) -> Steps[None]:
        return self._send(_Call("PUT", _path(name, "/resume"), lambda r: None))

    @operation
    def restart_connector(self, name: str, *, task: int | None = None) -> Steps[None]:
        """Start every task of the connector again (or only ``task``), wherever each runs."""
        leaf = "/restart" if task is None else f"/tasks/{int(task)}/restart"
        return self._send(_Call("POST", _path(name, leaf), lambda r: None))

    @operation
    def delete_connector(self, name: str) -> Steps[None]:
        """Stop the connector's tasks and forget it (its offsets stay)."""
        return self._send(_Call("DELETE", _path(name), lambda r: None))
