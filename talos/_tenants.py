"""Requests of the security endpoints (tenants, tokens, grants, quotas, quota requests, audit), described
once as :class:`_Call` objects that both ``Admin`` and ``AsyncAdmin`` send."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import orjson

from talos._admin_call import Call
from talos._transport import Response

__all__ = ["SecurityCalls"]


def _path(*parts: str) -> str:
    return "/v1/" + "/".join(quote(p, safe="") for p in parts)


def _json(response: Response) -> Any:
    return response.json()


def _none(_response: Response) -> None:
    return None


def _field(name: str) -> Callable[[Response], Any]:
    def read(response: Response) -> Any:
        return response.json()[name]  # type: ignore[index]

    return read


def _body(**fields: object) -> bytes:
    return orjson.dumps({k: v for k, v in fields.items() if v is not None})


class SecurityCalls:
    """Builders of the security endpoints' requests."""

    @staticmethod
    def whoami() -> Call[dict[str, Any]]:
        return Call("GET", _path("whoami"), _json)

    @staticmethod
    def create_tenant(name: str, description: str, quota: dict[str, float] | None) -> Call[dict[str, Any]]:
        return Call("POST", _path("tenants"), _json, _body(name=name, description=description, quota=quota))

    @staticmethod
    def list_tenants() -> Call[list[dict[str, Any]]]:
        return Call("GET", _path("tenants"), _field("tenants"))

    @staticmethod
    def delete_tenant(name: str) -> Call[None]:
        return Call("DELETE", _path("tenants", name), _none)

    @staticmethod
    def create_token(tenant: str, name: str) -> Call[dict[str, Any]]:
        return Call("POST", _path("tenants", tenant, "tokens"), _json, _body(name=name))

    @staticmethod
    def list_tokens(tenant: str) -> Call[list[dict[str, Any]]]:
        return Call("GET", _path("tenants", tenant, "tokens"), _field("tokens"))

    @staticmethod
    def revoke_token(tenant: str, token_id: str) -> Call[None]:
        return Call("DELETE", _path("tenants", tenant, "tokens", token_id), _none)

    @staticmethod
    def grant(topic: str, tenant: str, actions: list[str]) -> Call[dict[str, Any]]:
        return Call("POST", _path("acls"), _json, _body(topic=topic, tenant=tenant, actions=actions))

    @staticmethod
    def revoke(topic: str, tenant: str, actions: list[str] | None) -> Call[None]:
        params: dict[str, str | int] = {"topic": topic, "tenant": tenant}
        if actions:
            params["actions"] = ",".join(actions)
        return Call("DELETE", _path("acls"), _none, params=params)

    @staticmethod
    def list_acls(topic: str | None, tenant: str | None) -> Call[list[dict[str, Any]]]:
        params: dict[str, str | int] = {k: v for k, v in (("topic", topic), ("tenant", tenant)) if v is not None}
        return Call("GET", _path("acls"), _field("acls"), params=params or None)

    @staticmethod
    def grant_group(group: str, tenant: str) -> Call[dict[str, Any]]:
        return Call("POST", _path("acls", "groups"), _json, _body(group=group, tenant=tenant))

    @staticmethod
    def revoke_group(group: str, tenant: str) -> Call[None]:
        return Call("DELETE", _path("acls", "groups"), _none, params={"group": group, "tenant": tenant})

    @staticmethod
    def list_group_acls(group: str | None, tenant: str | None) -> Call[list[dict[str, Any]]]:
        params: dict[str, str | int] = {k: v for k, v in (("group", group), ("tenant", tenant)) if v is not None}
        return Call("GET", _path("acls", "groups"), _field("acls"), params=params or None)

    @staticmethod
    def quotas(tenant: str) -> Call[dict[str, Any]]:
        return Call("GET", _path("quotas", tenant), _json)

    @staticmethod
    def set_quota(tenant: str | None, topic: str | None, changes: dict[str, float | None]) -> Call[dict[str, Any]]:
        path = _path("quotas", "topics", topic) if topic is not None else _path("quotas", "tenants", str(tenant))
        return Call("PUT", path, _json, orjson.dumps(changes))

    @staticmethod
    def request_quota(
        resource: str, requested: float, topic: str | None, tenant: str | None, justification: str
    ) -> Call[dict[str, Any]]:
        body = _body(resource=resource, requested=requested, topic=topic, tenant=tenant, justification=justification)
        return Call("POST", _path("quota-requests"), _json, body)

    @staticmethod
    def quota_requests(status: str | None) -> Call[list[dict[str, Any]]]:
        params: dict[str, str | int] | None = {"status": status} if status else None
        return Call("GET", _path("quota-requests"), _field("requests"), params=params)

    @staticmethod
    def decide(request_id: int, approve: bool, reason: str) -> Call[dict[str, Any]]:
        body = _body(decision="approve" if approve else "reject", reason=reason)
        return Call("POST", _path("quota-requests", str(request_id), "decision"), _json, body)

    @staticmethod
    def audit(limit: int) -> Call[list[dict[str, Any]]]:
        return Call("GET", _path("audit"), _field("entries"), params={"limit": limit})
