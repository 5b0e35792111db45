"""The served OpenAPI document: every status an operation can answer, with the error body's schema.

FastAPI documents a route's 2xx answer and a 422 for its own validation. This API answers invalid input
with 400 and every error with ``{"error": {"code", "message", "retriable", ...}}`` (``server.errors``), and
most routes return plain ``Response`` objects whose bodies FastAPI cannot describe. :func:`complete` rewrites
the generated document once, from :data:`RULES` (by path prefix and method) and from what each operation
declares (parameters, body), so a route added later gets the common statuses without an edit here.

A listed status need not be reachable with every input; every status an operation answers is listed.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI

from server.http.fastpath import PUBLIC_PATHS
from server.messaging.forwarder import BATCH_CONTENT_TYPE

__all__ = ["ERROR_SCHEMA", "RULES", "StatusRule", "complete", "install", "statuses_for"]

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "retriable"],
            "properties": {
                "code": {"type": "string", "description": "stable, e.g. UNKNOWN_TOPIC, QUOTA_EXCEEDED"},
                "message": {"type": "string"},
                "retriable": {"type": "boolean", "description": "the same request may succeed later"},
            },
            # some errors carry details: earliest/latest (416), owner_url (421), session_end (409), ...
            "additionalProperties": True,
        }
    },
}

_DESCRIPTIONS = {
    400: "Invalid request (parameters, body, names)",
    401: "No token, or an unknown or revoked one (auth on)",
    403: "The token's tenant may not do this",
    404: "Unknown (or, for a tenant, not visible) topic, partition, group, member, tenant, token or request",
    409: (
        "Conflict: exists already, fenced, out of sequence, not the holder, session changed, already decided, "
        "at a cap (tokens, groups, pending requests), or the security settings changed concurrently (retry)"
    ),
    413: "Request body, or a message, over the limit",
    416: "Offset out of range (the error carries earliest and latest)",
    421: (
        "Not the owner of the partition (or the coordinator of the group or subscription) and the client asked "
        "for direct routing (x-talos-route: direct)"
    ),
    429: "Over a quota or a cap; retry after Retry-After",
    503: "Storage, ownership or the coordinator is unavailable for now; retry after Retry-After",
}

_RETRY_AFTER = {"description": "seconds to wait", "schema": {"type": "string"}}
_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"description": "Bearer challenge", "schema": {"type": "string"}}},
    421: {"x-talos-owner-url": {"description": "the owner's URL", "schema": {"type": "string"}}},
    429: {"Retry-After": _RETRY_AFTER},
    503: {"Retry-After": _RETRY_AFTER},
}

_ANY_METHOD: frozenset[str] = frozenset()
_WRITES = frozenset({"post", "put", "patch", "delete"})


@dataclass(frozen=True, slots=True)
class StatusRule:
    """Operations whose path template starts with ``prefix`` (is ``prefix``, when ``exact``; and whose
    method is in ``methods``, when given) can answer ``statuses``."""

    prefix: str
    statuses: frozenset[int]
    methods: frozenset[str] = _ANY_METHOD
    exact: bool = False

    def applies(self, path: str, method: str) -> bool:
        matches = path == self.prefix if self.exact else path.startswith(self.prefix)
        return matches and (not self.methods or method in self.methods)


def _rule(
    prefix: str, statuses: set[int], methods: set[str] | frozenset[str] = _ANY_METHOD, *, exact: bool = False
) -> StatusRule:
    return StatusRule(prefix, frozenset(statuses), frozenset(methods), exact)


# Beside these, statuses_for adds: 413 everywhere (the body limit applies before routing); 401 and 503 on
# every path that is not public (a token is checked against the security document, on storage); 400 where an
# operation takes parameters or a body; 404 where its path names an object; 503 on every write under /v1/
# (the security document, topic metadata and logs are storage).
RULES: tuple[StatusRule, ...] = (
    _rule("/readyz", {503}),
    _rule("/metrics", {503}),  # a bearer token, if sent, is checked (the admin's sees labelled series)
    _rule("/v1/", {403}),  # a tenant at an admin-only call, or at an object it may not use
    _rule("/v1/routes", {404, 503}),  # ?topic= names a topic
    _rule("/v1/topics", {404, 409, 429}, {"post"}),  # unknown tenant; exists; partition quota
    _rule("/v1/topics/", {503}),  # partitions load from storage (and move, in a cluster)
    _rule("/v1/topics/", {409}, {"post"}),  # produce: producer fenced, out of sequence, session changed
    _rule("/v1/topics/", {429}, {"patch"}),  # partition quota
    _rule("/v1/topics/{topic}", {409}, {"delete"}, exact=True),  # its grants go: a security document write
    _rule("/v1/topics/{topic}/messages", {429}),  # rate quotas
    _rule("/v1/topics/{topic}/partitions/", {421, 429}),  # direct routing; rate quotas
    _rule("/v1/topics/{topic}/partitions/{partition}/messages", {416}, {"get"}),
    _rule("/v1/producers", {404, 409, 429}),  # unknown or another tenant's id; fenced; quota
    _rule("/v1/groups/", {409, 503}),  # unknown member is 409 (join again); a moving coordinator is 503
    _rule("/v1/groups/", {421}),  # relayed to the group's coordinator: refused under direct routing
    _rule("/v1/groups/{group}/members", {429}, {"post"}),  # joins create retry/DLQ partitions: partition quota
    # Every write of the security document is 409 CONFLICT when other servers' writes keep winning the race.
    _rule("/v1/tenants", {409}, _WRITES),  # exists; still owns topics; tokens per tenant are capped
    _rule("/v1/tenants/{tenant}/tokens", {429}, {"post"}),  # a tenant making tokens too fast
    _rule("/v1/acls", {404}, _WRITES),  # unknown topic, tenant or grant
    _rule("/v1/acls", {409}, _WRITES),
    _rule("/v1/quotas/", {409}, _WRITES),
    # unknown topic or tenant; pending requests are capped (409); a tenant asking too fast (429)
    _rule("/v1/quota-requests", {404, 409, 429}, {"post"}, exact=True),
    _rule("/v1/quota-requests/", {409}, {"post"}),  # decided already
    _rule("/v1/audit", {503}),  # read from the audit topic
    _rule("/v1/connectors", {503}),  # kept in an internal topic
    _rule("/v1/connectors", {429}, _WRITES),  # written on the tenant's behalf: its quotas apply
    _rule("/v1/connectors/", {409}, _WRITES),  # a fenced (zombie) task's checkpoint
    # Connectors run by the cluster: relayed to their coordinator (refused under direct routing), which reads them
    # from an internal topic or is moving (503); a name taken, by this tenant or another (409).
    _rule("/connectors", {421, 503}),
    _rule("/connectors", {409}, {"post", "put"}),
    _rule("/connectors/{name}/tasks/{task}/status", {403}),  # local=true: the servers' own question
    _rule("/connector-plugins", {501}),  # a server without the connect extra
    _rule("/connectors", {501}, {"post", "put"}),
    _rule("/v1/topics/{topic}/fence", {421, 429}),  # each partition's fence: direct routing; rate quotas
    # Past the high watermark; rate quotas (each partition's, at its owner)
    _rule("/v1/topics/{topic}/delete-records", {416, 429}),
    _rule("/v1/topics/{topic}/partitions/{partition}/delete-records", {416}),
    # Make: unknown topic; exists; relayed to its coordinator (refused under direct routing); the state and
    # dead-letter topics count against the partition quota, and a tenant making them too fast is limited.
    _rule("/v1/subscriptions", {404, 409, 421, 429}, {"post"}, exact=True),
    # Relayed to the coordinator (direct routing: 421), which loads the state from storage or is moving (503).
    _rule("/v1/subscriptions/", {421, 503}),
    # Relayed to the id's coordinator (direct routing: 421), which reads its state from storage (503); fenced,
    # another transaction completing, a state that does not allow the call (409).
    _rule("/v1/transactions", {409, 421, 503}),
)


def _public(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in PUBLIC_PATHS)


def statuses_for(path: str, method: str, operation: dict[str, Any]) -> set[int]:
    """The error statuses an operation (``method`` lower case, ``path`` its template) can answer."""
    statuses = {413}
    for rule in RULES:
        if rule.applies(path, method):
            statuses |= rule.statuses
    parameters = operation.get("parameters", [])
    if parameters or "requestBody" in operation:
        statuses.add(400)
    if any(p.get("in") == "path" for p in parameters):
        statuses.add(404)
    if not _public(path):
        # 401; and 503 when a token this server does not know yet must be looked up in the security
        # document (storage) and that cannot be read now.
        statuses |= {401, 503}
    if path.startswith("/v1/") and method in _WRITES:
        statuses.add(503)
    return statuses


# 2xx bodies that are not JSON objects, by (method, path template).
_SUCCESS_CONTENT: dict[tuple[str, str], dict[str, Any]] = {
    ("get", "/metrics"): {"text/plain": {"schema": {"type": "string", "description": "Prometheus text format"}}},
    ("get", "/v1/topics/{topic}/partitions/{partition}/messages"): {
        "application/json": {"schema": {"type": "object"}},
        BATCH_CONTENT_TYPE: {"schema": {"type": "string", "format": "binary", "description": "with that Accept"}},
    },
    ("get", "/connectors"): {
        "application/json": {
            "schema": {
                "oneOf": [
                    {"type": "array", "items": {"type": "string"}, "description": "names"},
                    {"type": "object", "description": "name → {info, status} (expand=...)"},
                ]
            }
        }
    },
    ("get", "/connector-plugins"): {"application/json": {"schema": {"type": "array", "items": {"type": "object"}}}},
    ("get", "/connectors/{name}/tasks"): {
        "application/json": {"schema": {"type": "array", "items": {"type": "object"}}}
    },
}
_ERROR_REF = {"$ref": "#/components/schemas/Error"}
_VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")


def _operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in doc.get("paths", {}).items():
        for method, operation in item.items():
            if method in ("get", "put", "post", "delete", "patch", "head", "options", "trace"):
                yield path, method, operation


def _hoist_defs(node: Any, into: dict[str, Any]) -> Any:
    """Move pydantic's inline ``$defs`` (schemas written into ``openapi_extra``) to the components, so
    ``#/$defs/X`` references resolve from anywhere in the document."""
    if isinstance(node, list):
        return [_hoist_defs(item, into) for item in node]
    if not isinstance(node, dict):
        return node
    for name, schema in node.pop("$defs", {}).items():
        into.setdefault(name, _hoist_defs(schema, into))
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str) and value.startswith("#/$defs/"):
            out[key] = "#/components/schemas/" + value.removeprefix("#/$defs/")
        else:
            out[key] = _hoist_defs(value, into)
    return out


def _error_response(status: int) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": _DESCRIPTIONS.get(status, "Error"),
        "content": {"application/json": {"schema": dict(_ERROR_REF)}},
    }
    if status in _HEADERS:
        response["headers"] = copy.deepcopy(_HEADERS[status])
    return response


def _complete_success(path: str, method: str, status: str, response: dict[str, Any]) -> None:
    if status == "204":
        response.pop("content", None)
        return
    override = _SUCCESS_CONTENT.get((method, path))
    if override is not None:
        response["content"] = copy.deepcopy(override)
        return
    content = response.setdefault("content", {"application/json": {"schema": {}}})
    for media in content.values():
        if not media.get("schema"):  # a plain Response: FastAPI knows nothing of its body
            media["schema"] = {"type": "object"}


def complete(generated: dict[str, Any]) -> dict[str, Any]:
    """The document FastAPI generated, with the error statuses, the error schema and 2xx bodies filled in."""
    doc = copy.deepcopy(generated)
    schemas: dict[str, Any] = doc.setdefault("components", {}).setdefault("schemas", {})
    doc["paths"] = _hoist_defs(doc.get("paths", {}), schemas)
    schemas["Error"] = copy.deepcopy(ERROR_SCHEMA)
    for path, method, operation in _operations(doc):
        responses: dict[str, Any] = operation.setdefault("responses", {})
        responses.pop("422", None)  # validation errors are 400 here (server.http.app's handler)
        for status, response in responses.items():
            if status.startswith("2"):
                _complete_success(path, method, status, response)
        for status_code in sorted(statuses_for(path, method, operation)):
            responses.setdefault(str(status_code), _error_response(status_code))
    used = set(_references(doc))
    for name in _VALIDATION_SCHEMAS:
        if f"#/components/schemas/{name}" not in used:
            schemas.pop(name, None)
    return doc


def _references(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _references(value)
    elif isinstance(node, list):
        for item in node:
            yield from _references(item)


def install(app: FastAPI) -> None:
    """Serve :func:`complete`'s document as ``/openapi.json`` (built once, on the first request)."""
    generate = app.openapi
    built: dict[str, Any] = {}

    def openapi() -> dict[str, Any]:
        if not built:
            built.update(complete(generate()))
        return built

    app.openapi = openapi  # type: ignore[method-assign]
