"""The security document: tenants, their tokens, topic grants, quotas and quota requests. Pure.

One JSON document, versioned as a whole (``server.security.store``): every change makes the next version,
so changes are atomic and two servers changing it at once cannot both win. The functions here take a
state and return the changed one, raising :class:`ApiError` for a change that cannot be made.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from server.errors import ApiError

__all__ = [
    "ACTIONS",
    "QUOTA_FIELDS",
    "Grant",
    "Quota",
    "QuotaRequest",
    "SecurityState",
    "Tenant",
    "TokenRecord",
    "validate_tenant_name",
]

ACTIONS = ("produce", "consume", "admin")
QUOTA_FIELDS = ("produce_bytes_per_s", "fetch_bytes_per_s", "requests_per_s", "partitions")
TENANT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
GRANT_TOPIC = re.compile(r"^(\*|[A-Za-z0-9_][A-Za-z0-9._-]{0,248}\*?)$")
RESERVED_TENANTS = frozenset({"admin"})


def validate_tenant_name(name: str) -> str:
    if not TENANT_NAME.match(name) or name in RESERVED_TENANTS:
        raise ApiError(
            400, "INVALID_TENANT_NAME", f"invalid tenant name {name[:100]!r}: 1-63 of a-z 0-9 _ -, not 'admin'"
        )
    return name


@dataclass(frozen=True, slots=True)
class Quota:
    """Limits; None = unlimited. Rates are enforced by token buckets, partitions when topics grow."""

    produce_bytes_per_s: float | None = None
    fetch_bytes_per_s: float | None = None
    requests_per_s: float | None = None
    partitions: int | None = None

    def get(self, resource: str) -> float | None:
        value: float | None = getattr(self, resource)
        return value

    def changed(self, changes: Mapping[str, float | None]) -> Quota:
        unknown = set(changes) - set(QUOTA_FIELDS)
        if unknown:
            raise ApiError(400, "INVALID_REQUEST", f"unknown quota fields {sorted(unknown)}; known: {QUOTA_FIELDS}")
        for name, value in changes.items():
            if value is not None and (not isinstance(value, int | float) or isinstance(value, bool) or value <= 0):
                raise ApiError(400, "INVALID_REQUEST", f"quota {name} must be a positive number or null")
        fixed: dict[str, Any] = {k: (int(v) if k == "partitions" and v is not None else v) for k, v in changes.items()}
        return dataclasses.replace(self, **fixed)

    @property
    def empty(self) -> bool:
        return all(getattr(self, name) is None for name in QUOTA_FIELDS)

    def to_json(self) -> dict[str, float | None]:
        return {name: getattr(self, name) for name in QUOTA_FIELDS}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Quota:
        return cls(**{k: v for k, v in (data or {}).items() if k in QUOTA_FIELDS})


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    created_ms: int
    quota: Quota = Quota()
    description: str = ""


@dataclass(frozen=True, slots=True)
class TokenRecord:
    id: str
    tenant: str
    hash: str
    name: str
    created_ms: int

    def public(self) -> dict[str, object]:
        """What may be shown: never the hash."""
        return {"id": self.id, "tenant": self.tenant, "name": self.name, "created_ms": self.created_ms}


@dataclass(frozen=True, slots=True)
class Grant:
    """``tenant`` may do ``actions`` to topics matching ``topic``: a name, ``prefix*``, or ``*``."""

    topic: str
    tenant: str
    actions: tuple[str, ...]

    def matches(self, topic: str) -> bool:
        if self.topic.endswith("*"):
            return topic.startswith(self.topic[:-1])
        return topic == self.topic


@dataclass(frozen=True, slots=True)
class QuotaRequest:
    id: int
    tenant: str
    topic: str | None  # None: the tenant's own quota
    resource: str
    current: float | None
    requested: float
    justification: str
    status: str  # approved | rejected | pending
    reason: str
    decided_by: str  # "model", "admin", or "" while pending
    created_ms: int
    decided_ms: int | None = None
    threshold: float | None = None

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class SecurityState:
    version: int = 0
    tenants: Mapping[str, Tenant] = field(default_factory=dict)
    tokens: Mapping[str, TokenRecord] = field(default_factory=dict)
    grants: tuple[Grant, ...] = ()
    topic_quotas: Mapping[str, Quota] = field(default_factory=dict)
    requests: tuple[QuotaRequest, ...] = ()

    # ---------------------------------------------------------------- reading

    def tenant(self, name: str) -> Tenant:
        tenant = self.tenants.get(name)
        if tenant is None:
            raise ApiError(404, "UNKNOWN_TENANT", f"unknown tenant {name!r}")
        return tenant

    def topic_quota(self, topic: str) -> Quota:
        return self.topic_quotas.get(topic, Quota())

    def request(self, request_id: int) -> QuotaRequest:
        for request in self.requests:
            if request.id == request_id:
                return request
        raise ApiError(404, "UNKNOWN_REQUEST", f"unknown quota request {request_id}")

    # ---------------------------------------------------------------- changes

    def create_tenant(self, name: str, now_ms: int, *, quota: Quota = Quota(), description: str = "") -> SecurityState:
        validate_tenant_name(name)
        if name in self.tenants:
            raise ApiError(409, "TENANT_EXISTS", f"tenant {name!r} already exists")
        tenants = {**self.tenants, name: Tenant(name, now_ms, quota, description[:500])}
        return dataclasses.replace(self, tenants=tenants)

    def delete_tenant(self, name: str) -> SecurityState:
        self.tenant(name)
        return dataclasses.replace(
            self,
            tenants={k: v for k, v in self.tenants.items() if k != name},
            tokens={k: v for k, v in self.tokens.items() if v.tenant != name},
            grants=tuple(g for g in self.grants if g.tenant != name),
        )

    def add_token(self, record: TokenRecord) -> SecurityState:
        self.tenant(record.tenant)
        return dataclasses.replace(self, tokens={**self.tokens, record.id: record})

    def revoke_token(self, token_id: str) -> SecurityState:
        if token_id not in self.tokens:
            raise ApiError(404, "UNKNOWN_TOKEN", f"unknown token {token_id[:20]!r}")
        return dataclasses.replace(self, tokens={k: v for k, v in self.tokens.items() if k != token_id})

    def grant(self, topic: str, tenant: str, actions: tuple[str, ...]) -> SecurityState:
        self.tenant(tenant)
        if not GRANT_TOPIC.match(topic):
            raise ApiError(400, "INVALID_REQUEST", f"invalid topic pattern {topic[:300]!r}: a name, prefix* or *")
        bad = [a for a in actions if a not in ACTIONS]
        if bad or not actions:
            raise ApiError(400, "INVALID_REQUEST", f"actions must be some of {ACTIONS}, got {list(actions)}")
        merged = set(actions)
        for existing in self.grants:
            if existing.topic == topic and existing.tenant == tenant:
                merged |= set(existing.actions)
        kept = tuple(g for g in self.grants if not (g.topic == topic and g.tenant == tenant))
        ordered = tuple(a for a in ACTIONS if a in merged)
        return dataclasses.replace(self, grants=(*kept, Grant(topic, tenant, ordered)))

    def revoke(self, topic: str, tenant: str, actions: tuple[str, ...] | None = None) -> SecurityState:
        out: list[Grant] = []
        found = False
        for existing in self.grants:
            if existing.topic == topic and existing.tenant == tenant:
                found = True
                left = tuple(a for a in existing.actions if actions is not None and a not in actions)
                if left:
                    out.append(Grant(topic, tenant, left))
            else:
                out.append(existing)
        if not found:
            raise ApiError(404, "UNKNOWN_GRANT", f"no grant of {topic[:300]!r} to {tenant!r}")
        return dataclasses.replace(self, grants=tuple(out))

    def set_quota(self, tenant: str | None, topic: str | None, changes: Mapping[str, float | None]) -> SecurityState:
        """The tenant's quota (topic None) or a topic's."""
        if topic is None:
            if tenant is None:
                raise ApiError(400, "INVALID_REQUEST", "name a tenant or a topic")
            current = self.tenant(tenant)
            tenants = {**self.tenants, tenant: dataclasses.replace(current, quota=current.quota.changed(changes))}
            return dataclasses.replace(self, tenants=tenants)
        quota = self.topic_quota(topic).changed(changes)
        quotas = {k: v for k, v in self.topic_quotas.items() if k != topic}
        if not quota.empty:
            quotas[topic] = quota
        return dataclasses.replace(self, topic_quotas=quotas)

    def add_request(self, request: QuotaRequest) -> SecurityState:
        next_id = max((r.id for r in self.requests), default=0) + 1
        return dataclasses.replace(self, requests=(*self.requests, dataclasses.replace(request, id=next_id)))

    def decide(self, request_id: int, status: str, reason: str, by: str, now_ms: int) -> SecurityState:
        """Settle a request; an approval applies the quota it asked for."""
        request = self.request(request_id)
        if request.status != "pending":
            raise ApiError(409, "ALREADY_DECIDED", f"request {request_id} was already {request.status}")
        if status not in ("approved", "rejected"):
            raise ApiError(400, "INVALID_REQUEST", "a decision is 'approved' or 'rejected'")
        decided = dataclasses.replace(request, status=status, reason=reason, decided_by=by, decided_ms=now_ms)
        state = dataclasses.replace(self, requests=tuple(decided if r.id == request_id else r for r in self.requests))
        if status == "approved":
            state = state.set_quota(request.tenant, request.topic, {request.resource: request.requested})
        return state

    # ---------------------------------------------------------------- JSON

    def to_json(self) -> dict[str, object]:
        return {
            "version": self.version,
            "tenants": {
                name: {"created_ms": t.created_ms, "quota": t.quota.to_json(), "description": t.description}
                for name, t in self.tenants.items()
            },
            "tokens": {k: dataclasses.asdict(v) for k, v in self.tokens.items()},
            "grants": [{"topic": g.topic, "tenant": g.tenant, "actions": list(g.actions)} for g in self.grants],
            "topic_quotas": {k: v.to_json() for k, v in self.topic_quotas.items()},
            "requests": [r.to_json() for r in self.requests],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SecurityState:
        return cls(
            version=int(data.get("version", 0)),
            tenants={
                name: Tenant(name, int(t["created_ms"]), Quota.from_json(t.get("quota")), str(t.get("description", "")))
                for name, t in data.get("tenants", {}).items()
            },
            tokens={k: TokenRecord(**v) for k, v in data.get("tokens", {}).items()},
            grants=tuple(Grant(g["topic"], g["tenant"], tuple(g["actions"])) for g in data.get("grants", [])),
            topic_quotas={k: Quota.from_json(v) for k, v in data.get("topic_quotas", {}).items()},
            requests=tuple(QuotaRequest(**r) for r in data.get("requests", [])),
        )
