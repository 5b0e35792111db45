"""The operations console's connector pages, on the portal's router: the connectors a principal sees, making one,
and one connector's state, tasks and configuration with pause, resume, restart, a new configuration and delete.

``/portal/connectors`` lists what ``ConnectService.visible`` gives the signed-in principal (a tenant its own, the
admin every tenant's) and has the form that makes one; ``/portal/connectors/{name}`` shows one as
``ConnectService.get`` gives it: another tenant's answers 404 as a connector that does not exist, and every form
posted about one asks for it first, so another tenant's name is never told apart from an unknown one (not even by
the 409 a new configuration of a taken name would answer).

Every call goes to the connectors' coordinator, as REST's ``/connectors`` does: on this server through
``request.app.state.connect`` if it is the coordinator, else to the coordinator's REST routes (Kafka Connect's
shape) as the signed-in principal, the one forwarded call the group pages make (``_at_owner``), so the coordinator
applies the tenant rules itself.

A configuration is typed as ``key=value`` lines (one setting a line, ``#`` comments and blank lines skipped, values
kept as strings, as Kafka Connect's clients send them); the type is chosen in a list and is ``connector.class``.
A refused one is shown again as typed, with the coordinator's message, which names every problem. Settings whose
key contains ``password`` are never shown: the page and the change form show ``MASKED``, and the form posting
``MASKED`` back keeps the stored value.

The pages are server-rendered with no script: forms post with the session's CSRF nonce; deleting needs a ticked
box in its form.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final
from urllib.parse import quote

import orjson
from fastapi import Request
from starlette.responses import RedirectResponse, Response

from server.broker import NotOwnerError
from server.connect.service import ConnectService, info
from server.connect.state import Connector, ConnectorError
from server.errors import ApiError
from server.portal.console_groups import _at_owner
from server.portal.pages import _broker, _check_csrf, _form, _principal, _render, _sentence, _session, _to_login, router
from server.portal.session import Session
from server.security.access import Principal

__all__ = [
    "MASKED",
    "config_of",
    "config_text",
    "connector_page",
    "connectors_page",
    "masked",
    "parse_settings",
    "secret",
]

MASKED: Final = "********"  # a secret setting as the pages show it; posted back, the stored value is kept
_DONE: Final = {
    "created": "Connector created.",
    "paused": "Connector paused: its tasks stop.",
    "resumed": "Connector resumed: its tasks start again.",
    "restarted": "Restarting every task.",
    "task-restarted": "Restarting the task.",
    "updated": "Configuration saved: its tasks restart with it.",
    "deleted": "Connector deleted.",
}
_CLASS: Final = "connector.class"
_EXAMPLE: Final = "tasks.max=1\ntopics=orders\nnamenode=http://namenode:9870\npath=/data/orders"


# ---------------------------------------------------------------- pure helpers: the configuration as typed


def secret(key: str) -> bool:
    return "password" in key.lower()


def masked(config: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration with every secret setting's value replaced by ``MASKED``."""
    return {key: MASKED if secret(key) else value for key, value in config.items()}


def _text(value: object) -> str:
    """A stored value as a line of the form holds it: a string as it is, a list (``topics``) comma-joined as the
    connectors read a string list, anything else as JSON (``2``, ``true``, ``{"match_all": {}}``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ",".join(_text(item) for item in value)
    return orjson.dumps(value).decode()


def config_text(config: Mapping[str, Any]) -> str:
    """The change form's ``key=value`` lines: every setting but the name and the type (chosen in their own
    fields), secrets masked."""
    shown = masked(config)
    return "\n".join(f"{key}={_text(shown[key])}" for key in shown if key not in ("name", _CLASS))


def parse_settings(text: str) -> dict[str, str]:
    """``key=value`` lines as a flat configuration of strings (blank lines and ``#`` comments skipped; a value
    may hold ``=`` and be empty); 400 naming the line of anything else, or of a key given twice."""
    settings: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, equals, value = stripped.partition("=")
        key = key.strip()
        if not equals or not key:
            raise ApiError(400, "INVALID_REQUEST", f"configuration line {number}: write key=value, not {line[:60]!r}")
        if key in settings:
            raise ApiError(400, "INVALID_REQUEST", f"configuration line {number}: {key} is given twice")
        settings[key] = value.strip()
    return settings


def config_of(form: Mapping[str, str], current: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The configuration a create or change form posts: the type as ``connector.class``, then the lines. A secret
    posted back as ``MASKED`` keeps ``current``'s value."""
    settings: dict[str, Any] = parse_settings(form.get("config", ""))
    kind = form.get("type", "").strip()
    if _CLASS in settings and kind and settings[_CLASS] != kind:
        raise ApiError(
            400, "INVALID_REQUEST", f"the type is {kind}, but a line sets {_CLASS}={settings[_CLASS]}: keep one"
        )
    if kind:
        settings = {_CLASS: kind, **settings}
    for key, value in settings.items():
        if value == MASKED and secret(key) and current is not None and key in current:
            settings[key] = current[key]
    return settings


# ---------------------------------------------------------------- the coordinator, here or at its REST routes


def _service(request: Request) -> ConnectService:
    service: ConnectService = request.app.state.connect
    return service


def _path(name: str, leaf: str = "") -> str:
    return f"/connectors/{quote(name, safe='')}{leaf}"


async def _call(
    request: Request,
    who: Principal,
    here: Callable[[ConnectService], Awaitable[Any]],
    method: str,
    path: str,
    body: dict[str, object] | None = None,
) -> Any:
    """``here(service)`` if this server is the connectors' coordinator, else the REST route ``method path`` on it
    as ``who``. A refusal as an :class:`ApiError` (its status, code and message), wherever it was made."""
    service = _service(request)
    try:
        owner = await service.owner()
        if owner.local:
            return await here(service)
        return await _at_owner(_broker(request), owner, who, method, path, body)
    except ConnectorError as exc:
        raise ApiError(exc.status, exc.code, exc.message) from None
    except NotOwnerError:
        raise ApiError(
            503, "COORDINATOR_MOVING", "the connectors' coordinator is moving; retry", retriable=True
        ) from None


def _summary(described: Mapping[str, Any], tenant: str | None) -> dict[str, Any]:
    """A connector's row, or its page's heading, from its REST ``info`` and ``status``."""
    details: Mapping[str, Any] = described.get("info", {})
    status: Mapping[str, Any] = described.get("status", {})
    config: Mapping[str, Any] = details.get("config", {})
    tasks: list[Mapping[str, Any]] = list(status.get("tasks", []))
    name = str(details.get("name", status.get("name", "")))
    topics = config.get("topics", config.get("topic", ""))
    return {
        "name": name,
        "href": f"/portal{_path(name)}",
        "type": str(config.get(_CLASS, "—")),
        "kind": str(details.get("type", status.get("type", ""))),
        "tenant": tenant or "",
        "state": str(status.get("connector", {}).get("state", "—")),
        "worker": str(status.get("connector", {}).get("worker_id", "")),
        "running": sum(1 for t in tasks if t.get("state") == "RUNNING"),
        "total": len(details.get("tasks", tasks)),
        "topics": _text(topics) or "—",
    }


async def _described(service: ConnectService, connector: Connector) -> dict[str, Any]:
    return {"info": info(connector), "status": await service.status(connector), "tenant": connector.tenant}


async def _visible(request: Request, who: Principal) -> list[dict[str, Any]]:
    """Every connector ``who`` sees, as list rows (sorted by name)."""

    async def here(service: ConnectService) -> list[dict[str, Any]]:
        return [await _described(service, c) for c in await service.visible(who)]

    found = await _call(request, who, here, "GET", "/connectors?expand=info&expand=status")
    entries = found if isinstance(found, list) else [{**e, "tenant": e["info"].get("tenant")} for e in found.values()]
    return sorted((_summary(entry, entry.get("tenant")) for entry in entries), key=lambda row: str(row["name"]))


async def _describe(request: Request, who: Principal, name: str) -> dict[str, Any]:
    """The connector's ``info``, ``status`` and ``tenant`` (None: the admin's); 404 for one ``who``
    may not see, as for one that does not exist."""

    async def here(service: ConnectService) -> dict[str, Any]:
        return await _described(service, await service.get(who, name))

    async def status_here(service: ConnectService) -> dict[str, Any]:
        return await service.status(await service.get(who, name))

    described: dict[str, Any] = await _call(request, who, here, "GET", _path(name))
    if "status" not in described:  # the coordinator's REST answer: its info; the status is one more call
        status = await _call(request, who, status_here, "GET", _path(name, "/status"))
        described = {"info": described, "status": status, "tenant": described.get("tenant")}
    return described


# ---------------------------------------------------------------- the pages


def _error_page(session: Session, error: ApiError) -> Response:
    """An error that ends a page (an unknown connector: 404, also for another tenant's), with the navigation."""
    message = _sentence(error.message)
    return _render("error.html", error.status, session=session, status=error.status, code=error.code, message=message)


def _plugins() -> dict[str, str]:
    """The connector types (``connector.class`` → sink or source); none on a server without the connect extra."""
    try:
        from connectors.plugins import PLUGINS
    except ImportError:
        return {}
    return dict(PLUGINS)


def _refusal(error: ApiError) -> str:
    """The coordinator's message as the page shows it: a sentence, its list of problems kept on their lines."""
    first, _, rest = error.message.partition("\n")
    if not rest:
        return _sentence(first)
    return f"{first[:1].upper()}{first[1:]}\n{rest}"  # "connector 'x' is not valid:" and a problem a line


async def _connectors_page(
    request: Request, session: Session, *, error: str = "", form: Mapping[str, str] | None = None, status: int = 200
) -> Response:
    who = _principal(session)
    plugins = _plugins()
    try:
        rows, list_error = await _visible(request, who), ""
    except ApiError as exc:
        rows, list_error = [], _sentence(exc.message)
    return _render(
        "connectors.html",
        status,
        session=session,
        connectors=rows,
        list_error=list_error,
        error=error,
        done=_DONE.get(request.query_params.get("done", ""), ""),
        plugins=plugins,
        form={"name": "", "type": next(iter(plugins), ""), "config": "", **(form or {})},
        example=_EXAMPLE,
    )


@router.get("/connectors")
async def connectors_page(request: Request) -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    return await _connectors_page(request, session)


@router.post("/connectors")
async def create_connector(request: Request) -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    form = await _form(request)
    _check_csrf(session, form)
    who = _principal(session)
    name = form.get("name", "").strip()
    try:
        config = config_of(form)

        async def here(service: ConnectService) -> None:
            await service.put(who, name, config, must_be_new=True)

        await _call(request, who, here, "POST", "/connectors", {"name": name, "config": config})
    except ApiError as exc:
        return await _connectors_page(request, session, error=_refusal(exc), form=form, status=exc.status)
    return RedirectResponse(f"/portal{_path(name)}?done=created", status_code=303)


def _task_rows(status: Mapping[str, Any]) -> list[dict[str, str]]:
    def figure(value: object) -> str:
        return f"{value:,}" if isinstance(value, int) else "—"

    return [
        {
            "id": str(t.get("id", index)),
            "state": str(t.get("state", "—")),
            "worker_id": str(t.get("worker_id") or "—"),
            "pid": str(t.get("pid", "—")),
            "records": figure(t.get("records")),
            "skipped": figure(t.get("skipped")),
            "restarts": figure(t.get("restarts")),
            "trace": str(t.get("trace") or ""),
        }
        for index, t in enumerate(status.get("tasks", []))
    ]


async def _connector_page(
    request: Request,
    session: Session,
    name: str,
    *,
    error: str = "",
    form: Mapping[str, str] | None = None,
    status: int = 200,
) -> Response:
    try:
        described = await _describe(request, _principal(session), name)
    except ApiError as exc:
        return _error_page(session, exc)
    config: Mapping[str, Any] = described["info"].get("config", {})
    summary = _summary(described, described.get("tenant"))
    plugins = _plugins()
    if summary["type"] not in plugins:  # an older type the servers no longer run: still shown, still chosen
        plugins = {**plugins, summary["type"]: summary["kind"]}
    return _render(
        "connector.html",
        status,
        session=session,
        c=summary,
        paused=summary["state"] == "PAUSED",
        tasks=_task_rows(described["status"]),
        settings=sorted((key, _text(value)) for key, value in masked(config).items() if key != "name"),
        error=error,
        done=_DONE.get(request.query_params.get("done", ""), ""),
        plugins=plugins,
        form={"type": summary["type"], "config": config_text(config), **(form or {})},
    )


@router.get("/connectors/{name}")
async def connector_page(request: Request, name: str) -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    return await _connector_page(request, session, name)


Action = Callable[[Request, Principal, str, Mapping[str, str], Mapping[str, Any]], Awaitable[str]]


async def _act(request: Request, name: str, action: Action) -> Response:
    """A form posted about the connector: CSRF-checked; the connector asked for first (404 for another tenant's,
    as for none); then ``action``, which answers where to go (a ``done`` key, on the connector's page, or a
    whole path). A refusal is shown on the connector's page."""
    session = _session(request)
    if session is None:
        return _to_login()
    form = await _form(request)
    _check_csrf(session, form)
    who = _principal(session)
    try:
        described = await _describe(request, who, name)
    except ApiError as exc:
        return _error_page(session, exc)
    try:
        done = await action(request, who, name, form, described["info"].get("config", {}))
    except ApiError as exc:
        kept = form if "config" in form else None
        return await _connector_page(request, session, name, error=_refusal(exc), form=kept, status=exc.status)
    target = done if done.startswith("/") else f"/portal{_path(name)}?done={done}"
    return RedirectResponse(target, status_code=303)


async def _pause(request: Request, who: Principal, name: str, paused: bool) -> None:
    async def here(service: ConnectService) -> None:
        await service.pause(who, name, paused=paused)

    await _call(request, who, here, "PUT", _path(name, "/pause" if paused else "/resume"))


def _pausing(paused: bool) -> Callable[[Request, str], Awaitable[Response]]:
    """The route that pauses (or resumes) the connector."""

    async def route(request: Request, name: str) -> Response:
        async def action(
            request: Request, who: Principal, name: str, _f: Mapping[str, str], _c: Mapping[str, Any]
        ) -> str:
            await _pause(request, who, name, paused)
            return "paused" if paused else "resumed"

        return await _act(request, name, action)

    return route


router.post("/connectors/{name}/pause")(_pausing(True))
router.post("/connectors/{name}/resume")(_pausing(False))


@router.post("/connectors/{name}/restart")
async def restart_connector(request: Request, name: str) -> Response:
    async def action(request: Request, who: Principal, name: str, _f: Mapping[str, str], _c: Mapping[str, Any]) -> str:
        async def here(service: ConnectService) -> None:
            await service.restart(who, name)

        await _call(request, who, here, "POST", _path(name, "/restart"))
        return "restarted"

    return await _act(request, name, action)


@router.post("/connectors/{name}/tasks/{task}/restart")
async def restart_task(request: Request, name: str, task: int) -> Response:
    async def action(request: Request, who: Principal, name: str, _f: Mapping[str, str], _c: Mapping[str, Any]) -> str:
        async def here(service: ConnectService) -> None:
            await service.restart(who, name, task)

        await _call(request, who, here, "POST", _path(name, f"/tasks/{task}/restart"))
        return "task-restarted"

    return await _act(request, name, action)


@router.post("/connectors/{name}/config")
async def change_connector(request: Request, name: str) -> Response:
    async def action(
        request: Request, who: Principal, name: str, form: Mapping[str, str], current: Mapping[str, Any]
    ) -> str:
        config = config_of(form, current)

        async def here(service: ConnectService) -> None:
            await service.put(who, name, config)

        await _call(request, who, here, "PUT", _path(name, "/config"), config)
        return "updated"

    return await _act(request, name, action)


@router.post("/connectors/{name}/delete")
async def delete_connector(request: Request, name: str) -> Response:
    async def action(
        request: Request, who: Principal, name: str, form: Mapping[str, str], _c: Mapping[str, Any]
    ) -> str:
        if form.get("confirm") != "yes":
            raise ApiError(400, "INVALID_REQUEST", "tick the box to confirm the delete; nothing was deleted")

        async def here(service: ConnectService) -> None:
            await service.delete(who, name)

        await _call(request, who, here, "DELETE", _path(name))
        return "/portal/connectors?done=deleted"

    return await _act(request, name, action)
