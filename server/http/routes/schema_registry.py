"""The schema registry's REST API, Confluent's, under ``/schema-registry`` on every server's port: a Confluent
client's ``url`` is ``http(s)://<server>/schema-registry`` (docs/schema-registry.md).

Every request is answered by the registry's coordinator (the owner of ``__schemas``); another server relays it
there whole. Paths are split on the raw path, so a subject may hold ``/`` (sent as ``%2F``). Errors carry
Confluent's ``error_code`` and ``message`` (its clients read those) beside Talos's ``error`` object.

Who sees what: a subject named for a topic by Confluent's TopicNameStrategy (``<topic>-value``, ``<topic>-key``)
belongs to that topic's owner, and the topic's grants decide: any grant on it reads the subject, ``produce``
registers schemas under it, ``admin`` (the owner) deletes and configures it. Any other subject is the caller's
own (each tenant has its own namespace of them). A schema id is answered only to a caller that may read a
subject registered with it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import unquote

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from server.broker import Broker, NotOwnerError
from server.errors import ApiError
from server.http.forwarding import relay
from server.http.routes.security import principal
from server.schemas.coordinator import SchemaCoordinator
from server.schemas.errors import SchemaError
from server.schemas.formats import FORMATS
from server.schemas.state import (
    Reference,
    Registry,
    RegistryError,
    check_subject,
    format_of,
    parse_version,
    schema_not_found,
    subject_not_found,
    with_schema,
)
from server.security.access import Principal, actions_on
from server.topics import TopicConfig
from server.web import read_body

__all__ = ["PREFIX", "router", "subject_topic"]

PREFIX: Final = "/schema-registry"
CONTENT_TYPE: Final = "application/vnd.schemaregistry.v1+json"
_MAX_BODY: Final = 8 * 1024 * 1024
_METHODS: Final = ["GET", "POST", "PUT", "DELETE"]
# Confluent's error codes by HTTP status, for refusals that are not the registry's own (auth, a moving owner).
_CODES: Final = {400: 400, 401: 40101, 403: 40301, 404: 404, 409: 409, 413: 413, 429: 42901, 503: 50003}
_NAMES: Final = {
    40401: "SUBJECT_NOT_FOUND",
    40402: "VERSION_NOT_FOUND",
    40403: "SCHEMA_NOT_FOUND",
    40405: "SUBJECT_NOT_SOFT_DELETED",
    40407: "VERSION_NOT_SOFT_DELETED",
    409: "INCOMPATIBLE_SCHEMA",
    42201: "INVALID_SCHEMA",
    42202: "INVALID_VERSION",
    42203: "INVALID_COMPATIBILITY_LEVEL",
    42204: "INVALID_MODE",
    42205: "OPERATION_NOT_PERMITTED",
    42206: "REFERENCE_EXISTS",
    42207: "ID_OR_VERSION_TAKEN",
    42208: "INVALID_SUBJECT",
}

router = APIRouter(tags=["schema registry"])

Need = Literal["read", "write", "admin"]


def subject_topic(subject: str) -> str | None:
    """The topic a TopicNameStrategy subject names (``orders-value`` → ``orders``), or None."""
    for suffix in ("-value", "-key"):
        if subject.endswith(suffix) and len(subject) > len(suffix):
            return subject[: -len(suffix)]
    return None


def _answer(data: object, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type=CONTENT_TYPE)


def _error(status: int, code: int, message: str, *, retriable: bool = False) -> Response:
    name = _NAMES.get(code, {401: "UNAUTHENTICATED", 403: "FORBIDDEN", 503: "UNAVAILABLE"}.get(status, "ERROR"))
    body = {"error_code": code, "message": message, "error": {"code": name, "message": message, "retriable": retriable}}
    return Response(orjson.dumps(body), status_code=status, media_type=CONTENT_TYPE)


def error_body(error: ApiError) -> bytes:
    """A refusal met before the registry's route (authentication), in Confluent's shape beside Talos's."""
    code = _CODES.get(error.status, error.status * 100)
    inner = {"code": error.code, "message": error.message, "retriable": error.retriable}
    return orjson.dumps({"error_code": code, "message": error.message, "error": inner})


@dataclass(frozen=True, slots=True)
class _Call:
    broker: Broker
    registry: SchemaCoordinator
    who: Principal
    query: Mapping[str, str]
    body: bytes

    @property
    def own_tenant(self) -> str | None:
        """The namespace of the caller's own subjects, global level and mode (None: the admin's, or auth off)."""
        return self.who.tenant if self.broker.security.enabled else None

    def flag(self, name: str) -> bool:
        return self.query.get(name, "false").lower() == "true"

    def doc(self) -> dict[str, Any]:
        try:
            found = orjson.loads(self.body or b"{}")
        except orjson.JSONDecodeError:
            raise RegistryError(422, 42201, "the body is not JSON") from None
        if not isinstance(found, dict):
            raise RegistryError(422, 42201, "the body must be a JSON object")
        return found

    def tenant_of(self, subject: str, need: Need) -> str | None:
        """The tenant the subject is kept under, once ``who`` may ``need`` it."""
        broker = self.broker
        if not broker.security.enabled:
            return None
        topic = subject_topic(subject)
        config = self._topic(topic) if topic is not None else None
        if config is None:
            return self.who.tenant
        actions = actions_on(self.who, broker.security.state, config.name, config.tenant)
        allowed = {"read": bool(actions), "write": bool(actions & {"produce", "admin"}), "admin": "admin" in actions}
        if not allowed[need]:
            if not actions:
                raise subject_not_found(subject)  # as for a subject nobody has: no tenant learns others' topics
            raise RegistryError(403, 40301, f"may not {'register under' if need == 'write' else 'change'} {subject}")
        return config.tenant

    def may_read(self, tenant: str | None, subject: str) -> bool:
        """Whether the caller reads a subject kept under ``tenant``: its own, or a topic's it has a grant on."""
        if not self.broker.security.enabled or self.who.admin or tenant == self.who.tenant:
            return True
        topic = subject_topic(subject)
        config = self._topic(topic, known_only=True) if topic is not None else None  # (no ZooKeeper read per subject)
        return (
            config is not None
            and config.tenant == tenant
            and bool(actions_on(self.who, self.broker.security.state, config.name, config.tenant))
        )

    def _topic(self, name: str, *, known_only: bool = False) -> TopicConfig | None:
        if name.startswith("__"):
            return None
        try:
            return self.broker.topic(name, known_only=known_only)
        except ApiError:
            return None

    def references_in(self, tenant: str | None, refs: tuple[Reference, ...]) -> tuple[Reference, ...]:
        """``refs``, once each names a subject the caller may read in the namespace the schema is kept in
        (``tenant``): a reference never reaches into another tenant's subjects."""
        for ref in refs:
            if self.tenant_of(ref.subject, "read") != tenant:
                raise RegistryError(
                    422, 42201, f"Invalid schema: reference {ref.name} names {ref.subject}, which is not beside it"
                )
        return refs

    def visible_subjects(self, registry: Registry, *, deleted: bool, prefix: str) -> list[str]:
        return sorted(
            {
                subject
                for (tenant, subject) in registry.versions
                if subject.startswith(prefix)
                and self.may_read(tenant, subject)
                and registry.live(tenant, subject, deleted=deleted)
            }
        )

    def visible_schema(self, registry: Registry, schema_id: int) -> None:
        """40403 unless the caller may read a subject registered with the id."""
        found = registry.schemas.get(schema_id)
        if found is not None and (
            not self.broker.security.enabled
            or self.who.admin
            or any(self.may_read(tenant, v.subject) for tenant, v in registry.uses_of(schema_id, deleted=True))
        ):
            return
        raise schema_not_found(f"Schema {schema_id} not found")


Handler = Callable[[_Call, list[str]], Awaitable[Response]]


# Not in the OpenAPI document: it is Confluent's API (docs/schema-registry.md lists what is served), one route here
# that dispatches on the raw path, which an OpenAPI path template cannot describe.
@router.api_route(PREFIX, methods=_METHODS, include_in_schema=False)
@router.api_route(PREFIX + "/{path:path}", methods=_METHODS, include_in_schema=False)
async def schema_registry(request: Request) -> Response:
    raw = (request.scope.get("raw_path") or request.url.path.encode()).decode("latin-1").split("?", 1)[0]
    segments = [unquote(s) for s in raw[len(PREFIX) :].split("/") if s]
    broker: Broker = request.app.state.broker
    coordinator: SchemaCoordinator = request.app.state.schemas
    try:
        body = await read_body(request.receive, _MAX_BODY, request.headers.get("content-length"))
        owner = await coordinator.owner()
        if not owner.local:
            return await relay(broker.forwarder, owner, request, body, path=raw)
        handler, params = _dispatch(request.method, segments)
        call = _Call(broker, coordinator, principal(request), request.query_params, body)
        return await handler(call, params)
    except RegistryError as exc:
        return _error(exc.status, exc.code, exc.message)
    except SchemaError as exc:
        return _error(422, 42201, f"Invalid schema: {exc}")
    except NotOwnerError:
        return _error(503, 50003, "the registry's coordinator is moving; retry", retriable=True)
    except ApiError as exc:
        return _error(exc.status, _CODES.get(exc.status, exc.status * 100), exc.message, retriable=exc.retriable)


# ---------------------------------------------------------------- the routes


_ROUTES: list[tuple[str, tuple[str, ...], Handler]] = []


def _route(method: str, *pattern: str) -> Callable[[Handler], Handler]:
    """A handler for ``method`` and the path ``pattern`` (``*``: one segment, passed to the handler)."""

    def register(handler: Handler) -> Handler:
        _ROUTES.append((method, pattern, handler))
        return handler

    return register


def _dispatch(method: str, segments: list[str]) -> tuple[Handler, list[str]]:
    known_path = False
    for want, pattern, handler in _ROUTES:
        if len(pattern) != len(segments) or any(p not in ("*", s) for p, s in zip(pattern, segments, strict=True)):
            continue
        known_path = True
        if want == method:
            return handler, [s for p, s in zip(pattern, segments, strict=True) if p == "*"]
    if known_path:
        raise RegistryError(405, 405, f"{method} is not allowed here")
    raise RegistryError(404, 404, "HTTP 404 Not Found")


@_route("GET")
async def _root(_call: _Call, _params: list[str]) -> Response:
    return _answer({})


@_route("GET", "schemas", "types")
async def _types(_call: _Call, _params: list[str]) -> Response:
    return _answer(sorted(FORMATS))


@_route("GET", "contexts")
async def _contexts(_call: _Call, _params: list[str]) -> Response:
    return _answer(["."])


@_route("GET", "subjects")
async def _subjects(call: _Call, _params: list[str]) -> Response:
    prefix = call.query.get("subjectPrefix", "")
    return _answer(
        await call.registry.read(
            lambda r: call.visible_subjects(r, deleted=call.flag("deleted"), prefix=prefix.removeprefix(":.:"))
        )
    )


@_route("GET", "subjects", "*", "versions")
async def _versions(call: _Call, params: list[str]) -> Response:
    subject = params[0]
    tenant = call.tenant_of(subject, "read")

    def versions(r: Registry) -> list[int]:
        found = [v.version for v in r.live(tenant, subject, deleted=call.flag("deleted"))]
        if not found:
            raise subject_not_found(subject)
        return found

    return _answer(await call.registry.read(versions))


@_route("GET", "subjects", "*", "ids")
async def _subject_ids(call: _Call, params: list[str]) -> Response:
    """Talos's own: the ids of the subject's live versions (produce-time validation asks this)."""
    subject = params[0]
    tenant = call.tenant_of(subject, "read")
    return _answer({"ids": await call.registry.read(lambda r: sorted({v.id for v in r.live(tenant, subject)}))})


def _schema_body(call: _Call) -> tuple[str, str, tuple[Reference, ...]]:
    doc = call.doc()
    text = doc.get("schema")
    if not isinstance(text, str) or not text:
        raise RegistryError(422, 42201, "Invalid schema: 'schema' must be a non-empty string")
    kind = doc.get("schemaType") or "AVRO"
    if not isinstance(kind, str):
        raise RegistryError(422, 42201, "Invalid schema: 'schemaType' must be AVRO, JSON or PROTOBUF")
    refs = doc.get("references") or []
    if not isinstance(refs, list):
        raise RegistryError(422, 42201, "Invalid schema: 'references' must be a list")
    out = []
    for ref in refs:
        if not isinstance(ref, dict) or not isinstance(ref.get("name"), str) or not isinstance(ref.get("subject"), str):
            raise RegistryError(422, 42201, "Invalid schema: a reference has a name, a subject and a version")
        out.append(Reference(ref["name"], check_subject(ref["subject"]), parse_version(ref.get("version", ""))))
    return text, kind.upper(), tuple(out)


@_route("POST", "subjects", "*", "versions")
async def _register(call: _Call, params: list[str]) -> Response:
    subject = check_subject(params[0])
    tenant = call.tenant_of(subject, "write")
    text, kind, refs = _schema_body(call)
    refs = call.references_in(tenant, refs)
    doc = call.doc()
    wanted_id, wanted_version = doc.get("id"), doc.get("version")
    for name, value in (("id", wanted_id), ("version", wanted_version)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise RegistryError(422, 42201, f"'{name}' must be a positive integer")
    if wanted_id is not None and call.broker.security.enabled and not call.who.admin:
        raise RegistryError(403, 40301, "only the admin imports schemas with their ids (ids are the cluster's)")
    schema_id = await call.registry.change(
        lambda r: r.register(
            tenant,
            subject,
            kind,
            text,
            refs,
            normalize=call.flag("normalize"),
            wanted_id=wanted_id,
            wanted_version=wanted_version,
        )
    )
    return _answer({"id": schema_id})


@_route("POST", "subjects", "*")
async def _lookup(call: _Call, params: list[str]) -> Response:
    subject = params[0]
    tenant = call.tenant_of(subject, "read")
    text, kind, refs = _schema_body(call)
    refs = call.references_in(tenant, refs)

    def lookup(r: Registry) -> dict[str, object]:
        versions = r.live(tenant, subject, deleted=call.flag("deleted"))
        if not versions:
            raise subject_not_found(subject)
        schema_id = r.find(tenant, format_of(kind), text, refs)
        for version in reversed(versions):
            if version.id == schema_id:
                return with_schema(version, r.schemas[version.id])
        raise schema_not_found()

    return _answer(await call.registry.read(lookup))


@_route("GET", "subjects", "*", "versions", "*")
async def _version(call: _Call, params: list[str]) -> Response:
    subject, number = params
    tenant = call.tenant_of(subject, "read")

    def version(r: Registry) -> dict[str, object]:
        found = r.version(tenant, subject, number, deleted=call.flag("deleted"))
        return with_schema(found, r.schemas[found.id])

    return _answer(await call.registry.read(version))


@_route("GET", "subjects", "*", "versions", "*", "schema")
async def _version_text(call: _Call, params: list[str]) -> Response:
    subject, number = params
    tenant = call.tenant_of(subject, "read")
    deleted = call.flag("deleted")
    text = await call.registry.read(lambda r: r.schemas[r.version(tenant, subject, number, deleted=deleted).id].schema)
    return Response(text.encode(), media_type=CONTENT_TYPE)


@_route("GET", "subjects", "*", "versions", "*", "referencedby")
async def _referenced_by(call: _Call, params: list[str]) -> Response:
    subject, number = params
    tenant = call.tenant_of(subject, "read")

    def users(r: Registry) -> list[int]:
        return r.referenced_by(tenant, subject, r.version(tenant, subject, number, deleted=True).version)

    return _answer(await call.registry.read(users))


@_route("DELETE", "subjects", "*")
async def _delete_subject(call: _Call, params: list[str]) -> Response:
    subject = params[0]
    tenant = call.tenant_of(subject, "admin")
    permanent = call.flag("permanent")
    return _answer(await call.registry.change(lambda r: r.delete_subject(tenant, subject, permanent=permanent)))


@_route("DELETE", "subjects", "*", "versions", "*")
async def _delete_version(call: _Call, params: list[str]) -> Response:
    subject, number = params
    tenant = call.tenant_of(subject, "admin")
    permanent = call.flag("permanent")
    return _answer(await call.registry.change(lambda r: r.delete_version(tenant, subject, number, permanent=permanent)))


def _schema_id(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        raise schema_not_found(f"Schema {text[:20]} not found")
    return number


@_route("GET", "schemas", "ids", "*")
async def _by_id(call: _Call, params: list[str]) -> Response:
    schema_id = _schema_id(params[0])
    wanted = call.query.get("format", "")

    def by_id(r: Registry) -> dict[str, object]:
        call.visible_schema(r, schema_id)
        found = r.schemas[schema_id]
        out: dict[str, object] = {}
        if found.type != "AVRO":
            out["schemaType"] = found.type
        if found.references:
            out["references"] = [ref.to_json() for ref in found.references]
        out["schema"] = _formatted(r, schema_id, wanted)
        return out

    return _answer(await call.registry.read(by_id))


def _formatted(registry: Registry, schema_id: int, wanted: str) -> str:
    """The schema's text, or Protobuf's ``serialized`` (base64 FileDescriptorProto) form when asked."""
    found = registry.schemas[schema_id]
    serialized = FORMATS[found.type].serialized
    if wanted == "serialized" and serialized is not None:
        return serialized(registry.parsed(schema_id))
    return found.schema


@_route("GET", "schemas", "ids", "*", "schema")
async def _by_id_text(call: _Call, params: list[str]) -> Response:
    schema_id = _schema_id(params[0])

    def text(r: Registry) -> str:
        call.visible_schema(r, schema_id)
        return r.schemas[schema_id].schema

    return Response((await call.registry.read(text)).encode(), media_type=CONTENT_TYPE)


@_route("GET", "schemas", "ids", "*", "versions")
async def _id_versions(call: _Call, params: list[str]) -> Response:
    schema_id = _schema_id(params[0])

    def versions(r: Registry) -> list[dict[str, object]]:
        call.visible_schema(r, schema_id)
        return [
            {"subject": v.subject, "version": v.version}
            for tenant, v in r.uses_of(schema_id, deleted=call.flag("deleted"))
            if call.may_read(tenant, v.subject)
        ]

    return _answer(await call.registry.read(versions))


@_route("GET", "schemas", "ids", "*", "subjects")
async def _id_subjects(call: _Call, params: list[str]) -> Response:
    schema_id = _schema_id(params[0])

    def subjects(r: Registry) -> list[str]:
        call.visible_schema(r, schema_id)
        uses = r.uses_of(schema_id, deleted=call.flag("deleted"))
        return sorted({v.subject for tenant, v in uses if call.may_read(tenant, v.subject)})

    return _answer(await call.registry.read(subjects))


@_route("GET", "schemas")
async def _schemas(call: _Call, _params: list[str]) -> Response:
    prefix = call.query.get("subjectPrefix", "")
    latest_only = call.flag("latestOnly")
    deleted = call.flag("deleted")

    def schemas(r: Registry) -> list[dict[str, object]]:
        out = []
        for (tenant, subject), _versions in sorted(r.versions.items(), key=lambda kv: (kv[0][1], str(kv[0][0]))):
            if not subject.startswith(prefix) or not call.may_read(tenant, subject):
                continue
            shown = r.live(tenant, subject, deleted=deleted)
            for version in shown[-1:] if latest_only else shown:
                out.append(with_schema(version, r.schemas[version.id]))
        return out

    return _answer(await call.registry.read(schemas))


# ---------------------------------------------------------------- config and mode


def _level_of(call: _Call) -> str | None:
    doc = call.doc()
    level = doc.get("compatibility", doc.get("compatibilityLevel"))
    if not isinstance(level, str):
        raise RegistryError(422, 42203, "Invalid compatibility level: give 'compatibility'")
    return level.upper()


@_route("GET", "config")
async def _global_level(call: _Call, _params: list[str]) -> Response:
    tenant = call.own_tenant
    return _answer({"compatibilityLevel": await call.registry.read(lambda r: r.level(tenant, ""))})


@_route("PUT", "config")
async def _set_global_level(call: _Call, _params: list[str]) -> Response:
    tenant = call.own_tenant
    level = _level_of(call)
    await call.registry.change(lambda r: (None, r.set_level(tenant, "", level)))
    return _answer({"compatibility": level})


@_route("DELETE", "config")
async def _delete_global_level(call: _Call, _params: list[str]) -> Response:
    tenant = call.own_tenant
    before = await call.registry.change(lambda r: (r.level(tenant, ""), r.set_level(tenant, "", None)))
    return _answer({"compatibilityLevel": before})


@_route("GET", "config", "*")
async def _subject_level(call: _Call, params: list[str]) -> Response:
    subject = params[0]
    tenant = call.tenant_of(subject, "read")

    def level(r: Registry) -> str:
        own = r.levels.get((tenant, subject))
        if own is None and not call.flag("defaultToGlobal"):
            raise RegistryError(404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured")
        return own or r.level(tenant, subject)

    return _answer({"compatibilityLevel": await call.registry.read(level)})


@_route("PUT", "config", "*")
async def _set_subject_level(call: _Call, params: list[str]) -> Response:
    subject = params[0]
    tenant = call.tenant_of(subject, "admin")
    level = _level_of(call)
    await call.registry.change(lambda r: (None, r.set_level(tenant, subject, level)))
    return _answer({"compatibility": level})


@_route("DELETE", "config", "*")
async def _delete_subject_level(call: _Call, params: list[str]) -> Response:
    subject = params[0]
    tenant = call.tenant_of(subject, "admin")

    def delete(r: Registry) -> tuple[str, list[tuple[bytes, bytes | None]]]:
        own = r.levels.get((tenant, subject))
        if own is None:
            raise subject_not_found(subject)
        return own, r.set_level(tenant, subject, None)

    return _answer({"compatibilityLevel": await call.registry.change(delete)})


def _mode_of(call: _Call) -> str:
    mode = call.doc().get("mode")
    if not isinstance(mode, str):
        raise RegistryError(422, 42204, "Invalid mode: give 'mode'")
    return mode.upper()


@_route("GET", "mode")
async def _global_mode(call: _Call, _params: list[str]) -> Response:
    tenant = call.own_tenant
    return _answer({"mode": await call.registry.read(lambda r: r.mode(tenant, ""))})


@_route("PUT", "mode")
async def _set_global_mode(call: _Call, _params: list[str]) -> Response:
    tenant = call.own_tenant
    mode = _mode_of(call)
    await call.registry.change(lambda r: (None, r.set_mode(tenant, "", mode, force=call.flag("force"))))
    return _answer({"mode": mode})


@_route("DELETE", "mode")
async def _delete_global_mode(call: _Call, _params: list[str]) -> Response:
    tenant = call.own_tenant
    before = await call.registry.change(lambda r: (r.mode(tenant, ""), r.set_mode(tenant, "", None)))
    return _answer({"mode": before})


@_route("GET", "mode", "*")
async def _subject_mode(call: _Call, params: list[str]) -> Response:
    subject = params[0]
    tenant = call.tenant_of(subject, "read")
    return _answer({"mode": await call.registry.read(lambda r: r.mode(tenant, subject))})


@_route("PUT", "mode", "*")
async def _set_subject_mode(call: _Call, params: list[str]) -> Response:
    subject = params[0]
    tenant = call.tenant_of(subject, "admin")
    mode = _mode_of(call)
    await call.registry.change(lambda r: (None, r.set_mode(tenant, subject, mode, force=call.flag("force"))))
    return _answer({"mode": mode})


@_route("DELETE", "mode", "*")
async def _delete_subject_mode(call: _Call, params: list[str]) -> Response:
    subject = params[0]
    tenant = call.tenant_of(subject, "admin")
    before = await call.registry.change(lambda r: (r.mode(tenant, subject), r.set_mode(tenant, subject, None)))
    return _answer({"mode": before})


# ---------------------------------------------------------------- compatibility


async def _compatible(call: _Call, subject: str, version: str | None) -> Response:
    tenant = call.tenant_of(subject, "read")
    text, kind, refs = _schema_body(call)
    refs = call.references_in(tenant, refs)

    def check(r: Registry) -> list[str]:
        if not r.live(tenant, subject) and version is not None:
            if str(version) in ("latest", "-1"):
                return []  # nothing to be incompatible with, as Confluent answers
            raise subject_not_found(subject)
        return r.check(tenant, subject, kind, text, refs, version)

    found = await call.registry.read(check)
    answer: dict[str, object] = {"is_compatible": not found}
    if call.flag("verbose"):
        answer["messages"] = found
    return _answer(answer)


@_route("POST", "compatibility", "subjects", "*", "versions", "*")
async def _compatible_with(call: _Call, params: list[str]) -> Response:
    return await _compatible(call, params[0], params[1])


@_route("POST", "compatibility", "subjects", "*", "versions")
async def _compatible_with_all(call: _Call, params: list[str]) -> Response:
    return await _compatible(call, params[0], None)
