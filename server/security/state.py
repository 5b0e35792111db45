"""The security document: tenants, their tokens, topic grants, group owners and grants, quotas and quota
requests. Pure.

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
    "ADMIN_OWNER",
    "QUOTA_BOUNDS",
    "QUOTA_FIELDS",
    "Grant",
    "GroupGrant",
    "Quota",
    "QuotaRequest",
    "SecurityState",
    "Tenant",
    "TokenRecord",
    "check_quota_value",
    "unknown_group",
    "validate_tenant_name",
]

ACTIONS = ("produce", "consume", "admin")
QUOTA_FIELDS = ("produce_bytes_per_s", "fetch_bytes_per_s", "requests_per_s", "partitions")
# (lowest, highest) of each limit. Lower rates are outages, not limits: a byte bucket holds a request for
# debt / rate (a few KiB against 1e-3 B/s is the longest hold, every time; 5e-324 made it infinite), and the
# stored document keeps int64s and finite numbers.
QUOTA_BOUNDS: Mapping[str, tuple[float, float]] = {
    "produce_bytes_per_s": (1000.0, 1e15),
    "fetch_bytes_per_s": (1000.0, 1e15),
    "requests_per_s": (1e-3, 1e15),
    "partitions": (1, 2**31 - 1),
}


def check_quota_value(resource: str, value: float) -> None:
    """400 unless ``value`` is a number within ``resource``'s bounds."""
    low, high = QUOTA_BOUNDS[resource]
    if not isinstance(value, int | float) or isinstance(value, bool) or not low <= value <= high:
        raise ApiError(400, "INVALID_REQUEST", f"quota {resource} must be a number from {low:g} to {high:g}")


TENANT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
GRANT_TOPIC = re.compile(r"^(\*|[A-Za-z0-9_][A-Za-z0-9._-]{0,248}\*?)$")
RESERVED_TENANTS = frozenset({"admin"})
# What one tenant may keep in the document, which every server holds and re-reads: unbounded, 400 quota
# requests and 200 tokens took it from 4 KB to 1.1 MB and every request's latency from 3 to 11 ms.
MAX_TOKENS_PER_TENANT = 50
MAX_PENDING_REQUESTS_PER_TENANT = 20
MAX_GROUPS_PER_TENANT = 1000  # every claim is a line of the security document every server holds
KEEP_DECIDED_REQUESTS_PER_TENANT = 20  # older decided ones live on in the audit log only (``requests.py``)
ADMIN_OWNER = "admin"  # the owner recorded for a group the admin claimed (no tenant may have this name)


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
            if value is not None:
                check_quota_value(name, value)
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
    """``tenant`` may do ``actions`` to topics matching ``topic``: a name, ``prefix*``, or ``*``.

    ``grantor`` is the tenant whose topic it was when the grant was made (None: made by the admin on a
    pattern or on a name no tenant owned). A tenant's grant covers only topics that tenant owns, so it never
    reaches a topic another tenant creates under the same name later (deleting a topic deletes its grants,
    but this also holds for a grant left behind by a deletion that stopped half-way)."""

    topic: str
    tenant: str
    actions: tuple[str, ...]
    grantor: str | None = None

    def matches(self, topic: str) -> bool:
        if self.topic.endswith("*"):
            return topic.startswith(self.topic[:-1])
        return topic == self.topic

    def covers(self, topic: str, owner: str | None) -> bool:
        """Whether the grant applies to ``topic``, owned by tenant ``owner`` (None: by nobody)."""
        return self.matches(topic) and (self.grantor is None or self.grantor == owner)


@dataclass(frozen=True, slots=True)
class GroupGrant:
    """``tenant`` may use consumer group ``group`` (join, commit, reset, describe, its retry and dead-letter
    topics) as its owner does, except granting it on."""

    group: str
    tenant: str


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
    group_owners: Mapping[str, str] = field(default_factory=dict)  # group → the tenant that claimed it
    group_grants: tuple[GroupGrant, ...] = ()
    # Portal sign-outs: token id ("admin" for the admin token) → when its sessions were last ended (ms);
    # sessions of that token issued before then are void (``server.portal.session``).
    signed_out: Mapping[str, int] = field(default_factory=dict)

    # ---------------------------------------------------------------- reading

    def tenant(self, name: str) -> Tenant:
        tenant = self.tenants.get(name)
        if tenant is None:
            raise ApiError(404, "UNKNOWN_TENANT", f"unknown tenant {name!r}")
        return tenant

    def topic_quota(self, topic: str) -> Quota:
        return self.topic_quotas.get(topic, Quota())

    def may_use_group(self, tenant: str | None, group: str) -> bool:
        """Whether ``tenant`` (None: the admin) owns ``group`` or was granted it; an unclaimed group is
        nobody's but the admin's."""
        if tenant is None:
            return True
        owner = self.group_owners.get(group)
        if owner is None:
            return False
        return owner == tenant or any(g.group == group and g.tenant == tenant for g in self.group_grants)

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
            grants=tuple(g for g in self.grants if name not in (g.tenant, g.grantor)),
            signed_out={
                k: v for k, v in self.signed_out.items() if k not in self.tokens or self.tokens[k].tenant != name
            },
            # The groups it owned stay claimed (by a tenant that no longer exists): nobody else inherits
            # their committed offsets or retried messages; the admin still reaches them.
            group_grants=tuple(
                g for g in self.group_grants if g.tenant != name and self.group_owners.get(g.group) != name
            ),
        )

    def add_token(self, record: TokenRecord) -> SecurityState:
        self.tenant(record.tenant)
        if sum(1 for t in self.tokens.values() if t.tenant == record.tenant) >= MAX_TOKENS_PER_TENANT:
            raise ApiError(
                409,
                "TOO_MANY_TOKENS",
                f"tenant {record.tenant!r} has {MAX_TOKENS_PER_TENANT} tokens, the most it may have; revoke one first",
            )
        return dataclasses.replace(self, tokens={**self.tokens, record.id: record})

    def revoke_token(self, token_id: str) -> SecurityState:
        if token_id not in self.tokens:
            raise ApiError(404, "UNKNOWN_TOKEN", f"unknown token {token_id[:20]!r}")
        return dataclasses.replace(
            self,
            tokens={k: v for k, v in self.tokens.items() if k != token_id},
            signed_out={k: v for k, v in self.signed_out.items() if k != token_id},
        )

    def sign_out(self, token_id: str, now_ms: int, lifetime_ms: int) -> SecurityState:
        """End every portal session of ``token_id`` issued until ``now_ms``. Entries older than a session's
        lifetime void nothing that has not expired anyway: dropped, so this stays one entry per token."""
        kept = {k: v for k, v in self.signed_out.items() if v > now_ms - lifetime_ms and k != token_id}
        return dataclasses.replace(self, signed_out={**kept, token_id: now_ms})

    def grant(self, topic: str, tenant: str, actions: tuple[str, ...], grantor: str | None = None) -> SecurityState:
        """Grant (or widen a grant); ``grantor``: see :class:`Grant` (the newest grantor wins on a merge)."""
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
        return dataclasses.replace(self, grants=(*kept, Grant(topic, tenant, ordered, grantor)))

    def revoke(self, topic: str, tenant: str, actions: tuple[str, ...] | None = None) -> SecurityState:
        out: list[Grant] = []
        found = False
        for existing in self.grants:
            if existing.topic == topic and existing.tenant == tenant:
                found = True
                left = tuple(a for a in existing.actions if actions is not None and a not in actions)
                if left:
                    out.append(dataclasses.replace(existing, actions=left))
            else:
                out.append(existing)
        if not found:
            raise ApiError(404, "UNKNOWN_GRANT", f"no grant of {topic[:300]!r} to {tenant!r}")
        return dataclasses.replace(self, grants=tuple(out))

    def forget_topic_grants(self, topic: str) -> SecurityState:
        """Drop the grants naming ``topic`` exactly, as the topic is deleted: a topic created later under
        the name starts with none. Patterns (``prefix*``, ``*``) name no one topic and stay."""
        kept = tuple(g for g in self.grants if g.topic != topic)
        return self if len(kept) == len(self.grants) else dataclasses.replace(self, grants=kept)

    def claim_group(self, group: str, tenant: str | None) -> SecurityState:
        """Make ``tenant`` (None: the admin) the owner of an unclaimed group. A group another tenant owns
        answers 404, exactly as a group that does not exist, unless it was granted to ``tenant``."""
        owner = self.group_owners.get(group)
        if owner is None:
            claimer = tenant if tenant is not None else ADMIN_OWNER
            if (
                tenant is not None
                and sum(1 for o in self.group_owners.values() if o == tenant) >= MAX_GROUPS_PER_TENANT
            ):
                raise ApiError(
                    409,
                    "TOO_MANY_GROUPS",
                    f"tenant {tenant!r} owns {MAX_GROUPS_PER_TENANT} consumer groups, the most it may have",
                )
            return dataclasses.replace(self, group_owners={**self.group_owners, group: claimer})
        if tenant is None or self.may_use_group(tenant, group):
            return self
        raise unknown_group(group)

    def grant_group(self, group: str, tenant: str) -> SecurityState:
        self.tenant(tenant)
        if group not in self.group_owners:
            raise unknown_group(group)
        if self.group_owners[group] == tenant or GroupGrant(group, tenant) in self.group_grants:
            return self
        return dataclasses.replace(self, group_grants=(*self.group_grants, GroupGrant(group, tenant)))

    def revoke_group(self, group: str, tenant: str) -> SecurityState:
        if GroupGrant(group, tenant) not in self.group_grants:
            raise ApiError(404, "UNKNOWN_GRANT", f"no grant of group {group[:200]!r} to {tenant[:100]!r}")
        return dataclasses.replace(
            self, group_grants=tuple(g for g in self.group_grants if g != GroupGrant(group, tenant))
        )

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
        """Record a request (ids are never reused: the newest request is never pruned). A tenant has at most
        :data:`MAX_PENDING_REQUESTS_PER_TENANT` pending, and the newest decided ones are kept."""
        if request.status == "pending":
            pending = sum(1 for r in self.requests if r.tenant == request.tenant and r.status == "pending")
            if pending >= MAX_PENDING_REQUESTS_PER_TENANT:
                raise ApiError(
                    409,
                    "TOO_MANY_PENDING_REQUESTS",
                    f"tenant {request.tenant!r} has {pending} quota requests waiting for an admin, the most it "
                    "may have; wait for their decisions",
                )
        next_id = max((r.id for r in self.requests), default=0) + 1
        added = dataclasses.replace(self, requests=(*self.requests, dataclasses.replace(request, id=next_id)))
        return added._pruned(request.tenant, next_id)

    def _pruned(self, tenant: str, keep: int) -> SecurityState:
        """Without the tenant's decided requests but the :data:`KEEP_DECIDED_REQUESTS_PER_TENANT` decided last,
        request ``keep`` (just changed) and the newest request (whose id the next one counts from)."""
        newest = max(r.id for r in self.requests)
        decided = sorted(
            ((r.decided_ms or 0, r.id) for r in self.requests if r.tenant == tenant and r.status != "pending"),
        )
        dropped = {i for _, i in decided[:-KEEP_DECIDED_REQUESTS_PER_TENANT]} - {keep, newest}
        if not dropped:
            return self
        return dataclasses.replace(self, requests=tuple(r for r in self.requests if r.id not in dropped))

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
        return state._pruned(request.tenant, request_id)

    # ---------------------------------------------------------------- JSON

    def to_json(self) -> dict[str, object]:
        return {
            "version": self.version,
            "tenants": {
                name: {"created_ms": t.created_ms, "quota": t.quota.to_json(), "description": t.description}
                for name, t in self.tenants.items()
            },
            "tokens": {k: dataclasses.asdict(v) for k, v in self.tokens.items()},
            "grants": [
                {"topic": g.topic, "tenant": g.tenant, "actions": list(g.actions), "grantor": g.grantor}
                for g in self.grants
            ],
            "topic_quotas": {k: v.to_json() for k, v in self.topic_quotas.items()},
            "requests": [r.to_json() for r in self.requests],
            "group_owners": dict(self.group_owners),
            "group_grants": [{"group": g.group, "tenant": g.tenant} for g in self.group_grants],
            "signed_out": dict(self.signed_out),
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
            # A grant stored before grantors were recorded has none: it acts as the admin's until its topic
            # is deleted (which deletes it).
            grants=tuple(
                Grant(g["topic"], g["tenant"], tuple(g["actions"]), g.get("grantor")) for g in data.get("grants", [])
            ),
            topic_quotas={k: Quota.from_json(v) for k, v in data.get("topic_quotas", {}).items()},
            requests=tuple(QuotaRequest(**r) for r in data.get("requests", [])),
            group_owners={str(k): str(v) for k, v in data.get("group_owners", {}).items()},
            group_grants=tuple(GroupGrant(str(g["group"]), str(g["tenant"])) for g in data.get("group_grants", [])),
            signed_out={str(k): int(v) for k, v in data.get("signed_out", {}).items()},
        )


def unknown_group(group: str) -> ApiError:
    """The answer for a group that does not exist and for one the caller may not see: the same, so a
    tenant cannot learn which names other tenants use."""
    return ApiError(404, "UNKNOWN_GROUP", f"group {group[:200]!r} does not exist")
