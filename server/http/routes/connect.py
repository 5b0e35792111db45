"""Connectors run by the cluster, through a REST API shaped like Kafka Connect's (docs/connectors.md): ``/connectors``,
``/connectors/{name}`` and its ``config``, ``status``, ``tasks``, ``pause``, ``resume`` and ``restart``, and
``/connector-plugins``, on every server's port.

Every request about a connector is answered by the connectors' coordinator (the owner of ``__connectors``); another
server relays it there whole. A task's state comes from the server the ring gives the task, asked by the coordinator
with the servers' own token (``?local=true``, which only the admin may ask). Errors carry Kafka Connect's
``error_code`` and ``message`` beside Talos's ``error`` object.

Who sees what: a connector belongs to the tenant that made it; another tenant's is 404 as one that does not exist,
and its name is taken (409) as a topic's is. Its tasks act as its tenant: they read and write only what the tenant
may, billed to it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from server.broker import NotOwnerError
from server.connect.service import ConnectService, checked_config, info
from server.connect.state import ConnectorError, check_name
from server.errors import ApiError
from server.http.forwarding import relay
from server.http.routes.security import principal
from server.security.access import Principal
from server.web import MAX_ADMIN_BODY, read_body

__all__ = ["router"]

router = APIRouter(tags=["connectors (Kafka Connect's API)"])


class ConnectorCreate(BaseModel):
    name: str = Field(description="1-100 of A-Z a-z 0-9 . _ -, unique in the cluster")
    config: dict[str, Any] = Field(
        description="connector.class (GET /connector-plugins), tasks.max, topics (sinks) or topic (sources), and the "
        "type's settings (docs/connectors.md); values as strings or JSON values"
    )
    initial_state: Literal["RUNNING", "PAUSED"] = Field(
        "RUNNING", description="PAUSED: made with its tasks stopped until it is resumed (Kafka Connect's KIP-980)"
    )


def _error(
    status: int, code: str, message: str, *, retriable: bool = False, headers: dict[str, str] | None = None
) -> Response:
    inner = {"code": code, "message": message, "retriable": retriable}
    body = {"error_code": status, "message": message, "error": inner}
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def _json(data: object, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def _service(request: Request) -> ConnectService:
    service: ConnectService = request.app.state.connect
    return service


Handler = Callable[[ConnectService, Principal, bytes], Awaitable[Response]]


async def _on_coordinator(request: Request, handler: Handler) -> Response:
    """Run ``handler`` on the connectors' coordinator (relayed there whole if another server is it)."""
    try:
        body = await read_body(request.receive, MAX_ADMIN_BODY, request.headers.get("content-length"))
        service = _service(request)
        owner = await service.owner()
        if not owner.local:
            return await relay(service.broker.forwarder, owner, request, body)
        return await handler(service, principal(request), body)
    except ConnectorError as exc:
        return _error(exc.status, exc.code, exc.message)
    except NotOwnerError:
        return _error(503, "COORDINATOR_MOVING", "the connectors' coordinator is moving; retry", retriable=True)
    except ApiError as exc:
        return _error(exc.status, exc.code, exc.message, retriable=exc.retriable, headers=exc.headers or None)


def _body(body: bytes) -> Any:
    try:
        return orjson.loads(body or b"null")
    except orjson.JSONDecodeError as exc:
        raise ConnectorError(400, "INVALID_REQUEST", f"the body is not JSON: {exc}") from None


@router.get("/connectors", summary="The connectors the caller sees (the admin: all)")
async def list_connectors(
    request: Request,
    expand: Annotated[
        list[str] | None, Query(description="status, info: answer a map of name to these instead")
    ] = None,
) -> Response:
    async def handler(service: ConnectService, who: Principal, _: bytes) -> Response:
        found = await service.visible(who)
        if not expand:
            return _json([c.name for c in found])
        out: dict[str, dict[str, Any]] = {}
        for connector in found:
            entry: dict[str, Any] = {}
            if "info" in expand:
                entry["info"] = info(connector)
            if "status" in expand:
                entry["status"] = await service.status(connector)
            out[connector.name] = entry
        return _json(out)

    return await _on_coordinator(request, handler)


@router.post(
    "/connectors",
    status_code=201,
    summary="Make a connector; its tasks start on the servers the ring gives them",
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": ConnectorCreate.model_json_schema()}}}},
)
async def create_connector(request: Request) -> Response:
    async def handler(service: ConnectService, who: Principal, body: bytes) -> Response:
        doc = _body(body)
        if not isinstance(doc, dict) or not isinstance(doc.get("name"), str) or "config" not in doc:
            raise ConnectorError(400, "INVALID_REQUEST", 'expected {"name": ..., "config": {...}}')
        initial = doc.get("initial_state", "RUNNING")
        if initial not in ("RUNNING", "PAUSED"):
            raise ConnectorError(400, "INVALID_REQUEST", "initial_state is RUNNING or PAUSED")
        connector, _ = await service.put(who, doc["name"], doc["config"], must_be_new=True, paused=initial == "PAUSED")
        return _json(info(connector), 201)

    return await _on_coordinator(request, handler)


@router.get("/connectors/{name}", summary="A connector: its configuration and tasks")
async def get_connector(name: str, request: Request) -> Response:
    async def handler(service: ConnectService, who: Principal, _: bytes) -> Response:
        return _json(info(await service.get(who, name)))

    return await _on_coordinator(request, handler)


@router.get("/connectors/{name}/config", summary="A connector's configuration")
async def get_config(name: str, request: Request) -> Response:
    async def handler(service: ConnectService, who: Principal, _: bytes) -> Response:
        connector = await service.get(who, name)
        return _json({**connector.config, "name": connector.name})

    return await _on_coordinator(request, handler)


@router.put(
    "/connectors/{name}/config",
    summary="Make the connector, or change its configuration (its tasks restart with it)",
    responses={201: {"description": "Made"}},
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": {"type": "object"}}}}},
)
async def put_config(name: str, request: Request) -> Response:
    async def handler(service: ConnectService, who: Principal, body: bytes) -> Response:
        connector, made = await service.put(who, name, _body(body))
        return _json(info(connector), 201 if made else 200)

    return await _on_coordinator(request, handler)


@router.get("/connectors/{name}/status", summary="A connector's state and each task's, with the server running it")
async def get_status(name: str, request: Request) -> Response:
    async def handler(service: ConnectService, who: Principal, _: bytes) -> Response:
        return _json(await service.status(await service.get(who, name)))

    return await _on_coordinator(request, handler)


@router.get("/connectors/{name}/tasks", summary="A connector's tasks")
async def get_tasks(name: str, request: Request) -> Response:
    async def handler(service: ConnectService, who: Principal, _: bytes) -> Response:
        connector = await service.get(who, name)
        config = {**connector.config, "name": connector.name}
        return _json([{"id": {"connector": name, "task": task}, "config": config} for task in range(connector.tasks)])

    return await _on_coordinator(request, handler)


@router.get("/connectors/{name}/tasks/{task}/status", summary="One task's state, with the server running it")
async def get_task_status(
    name: str,
    task: int,
    request: Request,
    local: Annotated[bool, Query(description="the admin only: as this server runs it (servers ask so)")] = False,
) -> Response:
    if local:  # what this server runs, without the coordinator: the servers' own question
        service = _service(request)
        if service.broker.security.enabled and not principal(request).admin:
            return _error(403, "FORBIDDEN", "local=true is the servers' own question")
        try:
            check_name(name)
        except ConnectorError as exc:
            return _error(exc.status, exc.code, exc.message)
        return _json(service.workers.local_state(name, task).to_json(task))

    async def handler(service: ConnectService, who: Principal, _: bytes) -> Response:
        connector = await service.get(who, name)
        if not 0 <= task < connector.tasks:
            raise ConnectorError(404, "TASK_NOT_FOUND", f"connector {name!r} has tasks 0..{connector.tasks - 1}")
        return _json((await service.status(connector))["tasks"][task])

    return await _on_coordinator(request, handler)


@router.put("/connectors/{name}/pause", status_code=202, summary="Stop the connector's tasks until it is resumed")
async def pause_connector(name: str, request: Request) -> Response:
    async def handler(service: ConnectService, who: Principal, _: bytes) -> Response:
        await service.pause(who, name, paused=True)
        return Response(status_code=202)

    return await _on_coordinator(request, handler)


@router.put("/connectors/{name}/resume", status_code=202, summary="Start a paused connector's tasks again")
async def resume_connector(name: str, request: Request) -> Response:
    async def handler(service: ConnectService, who: Principal, _: bytes) -> Response:
        await service.pause(who, name, paused=False)
        return Response(status_code=202)

    return await _on_coordinator(request, handler)


@router.post(
    "/connectors/{name}/restart",
    status_code=204,
    summary="Restart every task of the connector (where each runs now)",
    responses={202: {"description": "Restarting; the connector's status (includeTasks=true)"}},
)
async def restart_connector(
    name: str,
    request: Request,
    include_tasks: Annotated[bool, Query(alias="includeTasks", description="answer 202 with the status")] = False,
    only_failed: Annotated[bool, Query(alias="onlyFailed", description="restart only the failed tasks")] = False,
) -> Response:
    async def handler(service: ConnectService, who: Principal, _: bytes) -> Response:
        connector = await service.get(who, name)
        tasks: list[int | None] = [None]  # all of them
        if only_failed:
            tasks = [t["id"] for t in (await service.status(connector))["tasks"] if t["state"] == "FAILED"]
        for task in tasks:
            await service.restart(who, name, task)
        if include_tasks:
            return _json(await service.status(await service.get(who, name)), 202)
        return Response(status_code=204)

    return await _on_coordinator(request, handler)


@router.post("/connectors/{name}/tasks/{task}/restart", status_code=204, summary="Restart one task")
async def restart_task(name: str, task: int, request: Request) -> Response:
    async def handler(service: ConnectService, who: Principal, _: bytes) -> Response:
        await service.restart(who, name, task)
        return Response(status_code=204)

    return await _on_coordinator(request, handler)


@router.delete("/connectors/{name}", status_code=204, summary="Stop the connector's tasks and forget it")
async def delete_connector(name: str, request: Request) -> Response:
    async def handler(service: ConnectService, who: Principal, _: bytes) -> Response:
        await service.delete(who, name)
        return Response(status_code=204)

    return await _on_coordinator(request, handler)


@router.get("/connector-plugins", summary="The connector types (connector.class) the servers run")
async def list_plugins() -> Response:
    try:
        from connectors.plugins import plugin_list
    except ImportError as exc:
        return _error(501, "CONNECT_UNAVAILABLE", f"this server cannot run connectors: {exc}")
    return _json(plugin_list())


@router.put(
    "/connector-plugins/{plugin}/config/validate",
    summary="Check a configuration without making anything: error_count and each problem",
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": {"type": "object"}}}}},
)
async def validate_config(plugin: str, request: Request) -> Response:
    try:
        raw = await read_body(request.receive, MAX_ADMIN_BODY, request.headers.get("content-length"))
        doc = orjson.loads(raw or b"null")
    except orjson.JSONDecodeError as exc:
        return _error(400, "INVALID_REQUEST", f"the body is not JSON: {exc}")
    except ApiError as exc:
        return _error(exc.status, exc.code, exc.message)
    if not isinstance(doc, dict):
        return _error(400, "INVALID_REQUEST", "expected a JSON object of settings")
    name = str(doc.get("name") or "validate")
    try:
        checked_config(name, {**doc, "connector.class": doc.get("connector.class", plugin)})
        problems: list[str] = []
    except ConnectorError as exc:
        problems = exc.message.splitlines()[1:] or [exc.message]
    except ApiError as exc:
        return _error(exc.status, exc.code, exc.message)
    return _json(
        {
            "name": plugin,
            "error_count": len(problems),
            "groups": [],
            "configs": [{"value": {"name": p.split(":", 1)[0].strip(), "errors": [p.strip()]}} for p in problems],
        }
    )
