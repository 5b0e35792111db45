"""REST for tenants, tokens, grants (ACLs), quotas, quota requests and the audit log.

The admin manages everything; a tenant sees itself, manages its own tokens, grants others access to the
topics it owns, reads its quotas and asks for more. Token secrets appear once, in the answer that made
them; everything else shows a token's id only.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from server.broker import Broker
from server.errors import ApiError
from server.security import audit
from server.security.access import ANONYMOUS, Principal
from server.security.guard import unauthenticated
from server.security.requests import decide_request, submit
from server.security.state import QUOTA_BOUNDS, QUOTA_FIELDS, Quota, SecurityState, TokenRecord, unknown_group
from server.security.tokens import new_token
from server.web import json_response

__all__ = ["principal", "router", "tenant_json"]

router = APIRouter(prefix="/v1")


def principal(request: Request) -> Principal:
    """Who the edge (``server.http.fastpath``) authenticated; with auth off, anyone is the admin."""
    found = getattr(request.state, "principal", None)
    if isinstance(found, Principal):
        return found
    if broker_of(request).security.enabled:
        raise unauthenticated("this server requires a bearer token")
    return ANONYMOUS


def broker_of(request: Request) -> Broker:
    broker: Broker = request.app.state.broker
    return broker


def _self_or_admin(broker: Broker, who: Principal, tenant: str) -> None:
    if broker.security.enabled and not who.admin and who.tenant != tenant:
        raise ApiError(403, "FORBIDDEN", f"tenant {who.name!r} may not see or change tenant {tenant[:100]!r}")


def tenant_json(state: SecurityState, name: str) -> dict[str, object]:
    tenant = state.tenant(name)
    return {
        "name": name,
        "description": tenant.description,
        "created_ms": tenant.created_ms,
        "quota": tenant.quota.to_json(),
        "tokens": sum(1 for t in state.tokens.values() if t.tenant == name),
    }


def _limit(resource: str) -> Any:
    """The body field of one quota: finite (JSON's 1e400 parses as infinity) and within its bounds."""
    low, high = QUOTA_BOUNDS[resource]
    if resource == "partitions":
        return Field(None, ge=int(low), le=int(high))
    return Field(None, ge=low, le=high, allow_inf_nan=False)


class QuotaBody(BaseModel):
    produce_bytes_per_s: float | None = _limit("produce_bytes_per_s")
    fetch_bytes_per_s: float | None = _limit("fetch_bytes_per_s")
    requests_per_s: float | None = _limit("requests_per_s")
    partitions: int | None = _limit("partitions")


class TenantCreate(BaseModel):
    name: str = Field(description="1-63 of a-z 0-9 _ -")
    description: str = Field("", max_length=500)
    quota: QuotaBody | None = None


class TokenCreate(BaseModel):
    name: str = Field("", max_length=200, description="what the token is for")


class GrantBody(BaseModel):
    topic: str = Field(description="a topic name, a prefix ending in *, or *")
    tenant: str
    actions: list[Literal["produce", "consume", "admin"]] = Field(min_length=1)


class QuotaRequestBody(BaseModel):
    resource: Literal["produce_bytes_per_s", "fetch_bytes_per_s", "requests_per_s", "partitions"]
    requested: float = Field(
        ge=min(low for low, _ in QUOTA_BOUNDS.values()),
        le=max(high for _, high in QUOTA_BOUNDS.values()),
        allow_inf_nan=False,
        description="within the resource's bounds (a 400 names them); partitions: a whole number",
    )
    topic: str | None = Field(None, description="a topic of the tenant; omit for the tenant's own quota")
    tenant: str | None = Field(None, description="the admin asking on a tenant's behalf; tenants omit it")
    justification: str = Field("", max_length=2000)


class DecisionBody(BaseModel):
    decision: Literal["approve", "reject"]
    reason: str = Field("", max_length=2000)


# ---------------------------------------------------------------- who am I


@router.get("/whoami", tags=["security"], summary="The principal of the token sent")
async def whoami(request: Request) -> Response:
    who = principal(request)
    security = broker_of(request).security
    return json_response({"tenant": who.tenant, "admin": who.admin, "token_id": who.token_id, "auth": security.enabled})


# ---------------------------------------------------------------- tenants and tokens


@router.post("/tenants", status_code=201, tags=["security"], summary="Create a tenant (admin)")
async def create_tenant(body: TenantCreate, request: Request) -> Response:
    broker, who = broker_of(request), principal(request)
    broker.security.require_admin(who)
    quota = Quota().changed(body.quota.model_dump(exclude_none=True) if body.quota else {})
    now_ms = int(time.time() * 1000)
    state = await broker.security.change(
        lambda s: s.create_tenant(body.name, now_ms, quota=quota, description=body.description)
    )
    await audit.record(broker, who, "tenant.create", body.name, tenant=body.name)
    return json_response(tenant_json(state, body.name), 201)


@router.get("/tenants", tags=["security"], summary="List tenants (admin: all; a tenant: itself)")
async def list_tenants(request: Request) -> Response:
    broker, who = broker_of(request), principal(request)
    state = broker.security.state
    names = sorted(state.tenants) if who.admin else [n for n in state.tenants if n == who.tenant]
    return json_response({"tenants": [tenant_json(state, n) for n in names]})


@router.get("/tenants/{tenant}", tags=["security"], summary="Describe a tenant")
async def describe_tenant(tenant: str, request: Request) -> Response:
    broker = broker_of(request)
    _self_or_admin(broker, principal(request), tenant)
    return json_response(tenant_json(broker.security.state, tenant))


@router.delete("/tenants/{tenant}", status_code=204, tags=["security"], summary="Delete a tenant (admin)")
async def delete_tenant(tenant: str, request: Request) -> Response:
    broker, who = broker_of(request), principal(request)
    broker.security.require_admin(who)
    owned = [t.name for t in broker.list_topics() if t.tenant == tenant]
    if owned:
        raise ApiError(409, "TENANT_HAS_TOPICS", f"tenant {tenant!r} still owns topics {owned[:10]}; delete them first")
    await broker.security.change(lambda s: s.delete_tenant(tenant))
    await audit.record(broker, who, "tenant.delete", tenant, tenant=tenant)
    return Response(status_code=204)


@router.post(
    "/tenants/{tenant}/tokens",
    status_code=201,
    tags=["security"],
    summary="Make a token (admin, or the tenant itself); the secret is shown only in this answer",
)
async def create_token(tenant: str, body: TokenCreate, request: Request) -> Response:
    broker, who = broker_of(request), principal(request)
    _self_or_admin(broker, who, tenant)
    broker.security.limit_changes(who, "tokens")
    token, token_id, digest = new_token()
    record = TokenRecord(token_id, tenant, digest, body.name, int(time.time() * 1000))
    await broker.security.change(lambda s: s.add_token(record))
    await audit.record(broker, who, "token.create", token_id, tenant=tenant, detail=body.name)
    return json_response({**record.public(), "token": token}, 201)


@router.get("/tenants/{tenant}/tokens", tags=["security"], summary="A tenant's tokens (ids only)")
async def list_tokens(tenant: str, request: Request) -> Response:
    broker = broker_of(request)
    _self_or_admin(broker, principal(request), tenant)
    state = broker.security.state
    state.tenant(tenant)
    tokens = [t.public() for t in state.tokens.values() if t.tenant == tenant]
    return json_response({"tokens": sorted(tokens, key=lambda t: str(t["created_ms"]))})


@router.delete("/tenants/{tenant}/tokens/{token_id}", status_code=204, tags=["security"], summary="Revoke a token")
async def revoke_token(tenant: str, token_id: str, request: Request) -> Response:
    broker, who = broker_of(request), principal(request)
    _self_or_admin(broker, who, tenant)
    record = broker.security.state.tokens.get(token_id)
    if record is None or record.tenant != tenant:
        raise ApiError(404, "UNKNOWN_TOKEN", f"tenant {tenant!r} has no token {token_id[:20]!r}")
    await broker.security.change(lambda s: s.revoke_token(token_id))
    await audit.record(broker, who, "token.revoke", token_id, tenant=tenant)
    return Response(status_code=204)


# ---------------------------------------------------------------- grants


def _may_grant(broker: Broker, who: Principal, topic: str) -> str | None:
    """The admin grants anything; a tenant grants access to a topic it owns, or it holds ``admin`` on (by its
    exact name; one it may not see at all is 404, as one that does not exist). The grant's grantor: the
    topic's owner (see ``state.Grant``)."""
    if topic.endswith("*"):
        if broker.security.enabled and not who.admin:
            raise ApiError(403, "FORBIDDEN", f"tenant {who.name!r} may not grant access to {topic[:300]!r}")
        return None
    if not broker.security.enabled or who.admin:
        try:
            return broker.topic(topic).tenant
        except ApiError:
            return None  # the admin may grant a name before it is made: then to whoever makes it
    config = broker.topic(topic)
    broker.security.authorize(who, config, "admin")
    return config.tenant


@router.get("/acls", tags=["security"], summary="Grants (admin: all; a tenant: on its topics and to it)")
async def list_acls(request: Request, topic: str | None = None, tenant: str | None = None) -> Response:
    broker, who = broker_of(request), principal(request)
    owned = {t.name for t in broker.list_topics() if t.tenant == who.tenant}
    grants = [
        {"topic": g.topic, "tenant": g.tenant, "actions": list(g.actions)}
        for g in broker.security.state.grants
        if (who.admin or g.tenant == who.tenant or g.topic in owned)
        and (topic is None or g.topic == topic)
        and (tenant is None or g.tenant == tenant)
    ]
    return json_response({"acls": grants})


@router.post("/acls", status_code=201, tags=["security"], summary="Grant a tenant produce/consume/admin on topics")
async def grant(body: GrantBody, request: Request) -> Response:
    broker, who = broker_of(request), principal(request)
    grantor = _may_grant(broker, who, body.topic)
    actions = tuple(body.actions)
    await broker.security.change(lambda s: s.grant(body.topic, body.tenant, actions, grantor))
    await audit.record(broker, who, "acl.grant", body.topic, tenant=body.tenant, detail=",".join(actions))
    return json_response({"topic": body.topic, "tenant": body.tenant, "actions": list(actions)}, 201)


@router.delete("/acls", status_code=204, tags=["security"], summary="Revoke a grant (all of it, or some actions)")
async def revoke(request: Request, topic: str, tenant: str, actions: str | None = None) -> Response:
    broker, who = broker_of(request), principal(request)
    _may_grant(broker, who, topic)
    which = tuple(a for a in actions.split(",") if a) if actions else None
    await broker.security.change(lambda s: s.revoke(topic, tenant, which))
    await audit.record(broker, who, "acl.revoke", topic, tenant=tenant, detail=actions or "all")
    return Response(status_code=204)


# ---------------------------------------------------------------- group grants


class GroupGrantBody(BaseModel):
    group: str = Field(description="a consumer group the caller owns")
    tenant: str


async def _may_grant_group(broker: Broker, who: Principal, group: str) -> None:
    """The admin grants any claimed group; its owner grants it; a grantee may see it but not grant it
    on (403); to anyone else the group does not exist (404)."""
    if not broker.security.enabled or who.admin:
        return
    state = broker.security.state
    if not state.may_use_group(who.tenant, group):
        state = await broker.security.fresh()  # claimed on another server a moment ago?
    if not state.may_use_group(who.tenant, group):
        raise unknown_group(group)
    if state.group_owners.get(group) != who.tenant:
        raise ApiError(403, "FORBIDDEN", f"only the owner of group {group[:200]!r} grants it")


@router.get("/acls/groups", tags=["security"], summary="Group grants (admin: all; a tenant: on its groups and to it)")
async def list_group_acls(request: Request, group: str | None = None, tenant: str | None = None) -> Response:
    broker, who = broker_of(request), principal(request)
    state = broker.security.state
    grants = [
        {"group": g.group, "tenant": g.tenant}
        for g in state.group_grants
        if (who.admin or g.tenant == who.tenant or state.group_owners.get(g.group) == who.tenant)
        and (group is None or g.group == group)
        and (tenant is None or g.tenant == tenant)
    ]
    return json_response({"acls": grants})


@router.post(
    "/acls/groups", status_code=201, tags=["security"], summary="Let a tenant use a consumer group (its owner)"
)
async def grant_group(body: GroupGrantBody, request: Request) -> Response:
    broker, who = broker_of(request), principal(request)
    await _may_grant_group(broker, who, body.group)
    await broker.security.change(lambda s: s.grant_group(body.group, body.tenant))
    await audit.record(broker, who, "acl.grant_group", body.group, tenant=body.tenant)
    return json_response({"group": body.group, "tenant": body.tenant}, 201)


@router.delete("/acls/groups", status_code=204, tags=["security"], summary="Revoke a tenant's grant of a group")
async def revoke_group(request: Request, group: str, tenant: str) -> Response:
    broker, who = broker_of(request), principal(request)
    await _may_grant_group(broker, who, group)
    await broker.security.change(lambda s: s.revoke_group(group, tenant))
    await audit.record(broker, who, "acl.revoke_group", group, tenant=tenant)
    return Response(status_code=204)


# ---------------------------------------------------------------- quotas


def quotas_json(broker: Broker, tenant: str) -> dict[str, object]:
    state = broker.security.state
    topics = sorted(t.name for t in broker.list_topics() if t.tenant == tenant)
    return {
        "tenant": tenant,
        "quota": state.tenant(tenant).quota.to_json(),
        "topics": {name: state.topic_quota(name).to_json() for name in topics},
        "partitions_used": sum(t.partitions for t in broker.list_topics() if t.tenant == tenant),
    }


@router.get("/quotas/{tenant}", tags=["security"], summary="A tenant's quota and its topics' quotas")
async def get_quotas(tenant: str, request: Request) -> Response:
    broker = broker_of(request)
    _self_or_admin(broker, principal(request), tenant)
    return json_response(quotas_json(broker, tenant))


@router.put("/quotas/tenants/{tenant}", tags=["security"], summary="Set a tenant's quota (admin; null = unlimited)")
async def set_tenant_quota(tenant: str, body: QuotaBody, request: Request) -> Response:
    broker, who = broker_of(request), principal(request)
    broker.security.require_admin(who)
    changes = body.model_dump(exclude_unset=True)
    await broker.security.change(lambda s: s.set_quota(tenant, None, changes))
    await audit.record(broker, who, "quota.set", tenant, tenant=tenant, detail=_describe(changes))
    return json_response(quotas_json(broker, tenant))


@router.put("/quotas/topics/{topic}", tags=["security"], summary="Set a topic's quota (admin; null = unlimited)")
async def set_topic_quota(topic: str, body: QuotaBody, request: Request) -> Response:
    broker, who = broker_of(request), principal(request)
    broker.security.require_admin(who)
    config = broker.topic(topic)
    changes = body.model_dump(exclude_unset=True)
    state = await broker.security.change(lambda s: s.set_quota(None, topic, changes))
    await audit.record(broker, who, "quota.set", topic, tenant=config.tenant, detail=_describe(changes))
    return json_response({"topic": topic, "quota": state.topic_quota(topic).to_json()})


def _describe(changes: dict[str, object]) -> str:
    return ", ".join(f"{k}={v}" for k, v in changes.items() if k in QUOTA_FIELDS)


# ---------------------------------------------------------------- quota requests


@router.post(
    "/quota-requests",
    status_code=201,
    tags=["security"],
    summary="Ask for a new limit: approved or rejected at once by the decision model, or left to an admin",
)
async def create_quota_request(body: QuotaRequestBody, request: Request) -> Response:
    broker, who = broker_of(request), principal(request)
    tenant = who.tenant if who.tenant is not None else body.tenant
    if tenant is None:
        raise ApiError(400, "INVALID_REQUEST", "the admin names the tenant ('tenant') a request is for")
    if body.resource == "partitions" and body.requested < 1:  # whole partitions: 0.5 would round to 0
        raise ApiError(400, "INVALID_REQUEST", "requested partitions must be at least 1")
    made = await submit(
        broker,
        who,
        tenant=tenant,
        topic=body.topic,
        resource=body.resource,
        requested=body.requested,
        justification=body.justification,
    )
    return json_response(made.to_json(), 201)


@router.get("/quota-requests", tags=["security"], summary="Quota requests (admin: all; a tenant: its own)")
async def list_quota_requests(request: Request, status: str | None = None) -> Response:
    broker, who = broker_of(request), principal(request)
    rows = [
        r.to_json()
        for r in reversed(broker.security.state.requests)
        if (who.admin or r.tenant == who.tenant) and (status is None or r.status == status)
    ]
    return json_response({"requests": rows})


@router.post("/quota-requests/{request_id}/decision", tags=["security"], summary="Approve or reject (admin)")
async def decide(request_id: int, body: DecisionBody, request: Request) -> Response:
    broker, who = broker_of(request), principal(request)
    broker.security.require_admin(who)
    decided = await decide_request(broker, who, request_id, body.decision == "approve", body.reason)
    return json_response(decided.to_json())


# ---------------------------------------------------------------- audit


@router.get("/audit", tags=["security"], summary="The audit log, newest first (admin: all; a tenant: its own)")
async def audit_log(request: Request, limit: int = 200) -> Response:
    broker, who = broker_of(request), principal(request)
    entries = await audit.recent(broker, limit=max(1, min(limit, 5000)), tenant=who.tenant)
    return json_response({"entries": entries})
