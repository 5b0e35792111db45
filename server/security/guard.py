"""The server's edge: who is asking (``authenticate``), may they (``authorize``), and are they within
their quotas (``admit`` on the partition's owner).

Every server holds the whole security document in memory and re-reads it every ``security_refresh_s``;
a token it does not know yet (made on another server a moment ago) makes it re-read, at most once a
second: the request waits for a re-read that started after it arrived, so a new token works everywhere
at once, and a flood of bad tokens costs one read a second.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from typing import Protocol, TypeVar

from server import metrics
from server.config import ServerConfig
from server.errors import ApiError
from server.security.access import ANONYMOUS, Principal, actions_on, hidden, require
from server.security.buckets import TokenBucket, retry_after_header
from server.security.state import Quota, SecurityState
from server.security.store import SecurityStore
from server.security.tokens import parse_token, verify
from server.tls import CERTIFICATE_HEADER, CERTIFIED_TENANT_HEADER
from server.topics import TopicConfig, unknown_topic

__all__ = [
    "MAX_HOLD_S",
    "RELOAD_WAIT_S",
    "NO_CHARGE",
    "Charge",
    "Security",
    "Topology",
    "allowance",
    "pay",
    "unauthenticated",
]

log = logging.getLogger("talos.security")
T = TypeVar("T")
_SHARE_TTL_S = 5.0
_RELOAD_GAP_S = 1.0
# A request waits at most this long for a re-read of the document (the storage, or the I/O threads, stuck): then 503.
RELOAD_WAIT_S = 10.0
MAX_HOLD_S = 10.0  # well inside the SDK's 30 s request timeout
_BYTES_RESOURCE = {"produce": "produce_bytes_per_s", "fetch": "fetch_bytes_per_s"}
# Calls that each write the security document (making a token, asking for quota, signing out of the portal):
# per tenant and server, a burst of this many, then one per 1 / rate seconds.
CHANGE_BURST = 10.0
CHANGE_RATE_PER_S = 0.2


class Topology(Protocol):
    """What the quota shares need of the broker: the topics and which partitions this server owns."""

    def list_topics(self) -> list[TopicConfig]: ...

    def owns(self, topic: str, index: int) -> bool: ...


def unauthenticated(message: str) -> ApiError:
    metrics.denied(401)
    return ApiError(401, "UNAUTHENTICATED", message, headers={"WWW-Authenticate": 'Bearer realm="talos"'})


class Security:
    def __init__(self, config: ServerConfig, store: SecurityStore, executor: Executor, topology: Topology) -> None:
        self.enabled = config.auth_enabled
        self._admin_token = config.admin_token
        self._store = store
        self._executor = executor
        self._topology = topology
        self._refresh_s = config.security_refresh_s
        self.state = SecurityState()
        self._last_reload = 0.0  # when the latest re-read started
        self._fresh_as_of = 0.0  # the start of the latest re-read that finished: state is at least that new
        self._reload_lock = asyncio.Lock()
        self._reading: asyncio.Future[SecurityState] | None = None  # the re-read in flight
        self._buckets: dict[tuple[str, str, str], TokenBucket] = {}
        self._shares: dict[tuple[str, str], tuple[float, float]] = {}  # (scope, name) → (share, computed at)

    @property
    def state(self) -> SecurityState:
        return self._state

    @state.setter
    def state(self, state: SecurityState) -> None:
        # Answers kept for as long as this state is the one (it is immutable), so a revocation counts from the
        # request after it, as before: what a principal may do to a topic (``actions_on`` walks the grants, asked
        # on every message request), and whose a verified token is (its hash, likewise).
        self._state = state
        self._actions: dict[tuple[Principal, str, str | None], frozenset[str]] = {}
        self._principals: dict[str, Principal] = {}
        # Most deployments limit no rate at all: then :meth:`admit_now` answers without looking up any quota.
        quotas = [tenant.quota for tenant in state.tenants.values()] + list(state.topic_quotas.values())
        self._rates_limited = any(_limits_a_rate(quota) for quota in quotas)

    @property
    def rates_limited(self) -> bool:
        """Whether any quota limits a rate (else :meth:`admit` charges nothing and never holds a request)."""
        return self._rates_limited

    async def _io(self, function: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, function)

    async def reload(self) -> SecurityState:
        """Re-read the document; if a re-read is in flight, wait for that one: never two at a time, so a storage
        that does not answer holds one I/O thread, not one per request that waits (with a bound) for it."""
        reading = self._reading
        if reading is None or reading.done():
            reading = self._reading = asyncio.ensure_future(self._read())
            reading.add_done_callback(_retrieve)
        return await asyncio.shield(reading)

    async def _read(self) -> SecurityState:
        started = self._last_reload = time.monotonic()
        state = await self._io(self._store.load)
        if state.version >= self.state.version:
            self.state = state
        self._fresh_as_of = max(self._fresh_as_of, started)
        return self.state

    async def fresh(self) -> SecurityState:
        """The state at least as new as this call (re-read at most once a second): before refusing what a
        change made on another server a moment ago (a grant) may allow."""
        await self._reload_since(time.monotonic())
        return self.state

    async def _reload_since(self, asked_at: float) -> None:
        """Make the state at least as new as ``asked_at``, re-reading at most once per gap; 503 if that takes over
        :data:`RELOAD_WAIT_S` (waiting for the lock included: requests queue behind a re-read that hangs)."""
        try:
            async with asyncio.timeout(RELOAD_WAIT_S), self._reload_lock:
                if self._fresh_as_of >= asked_at:
                    return  # a re-read that started after the question has finished meanwhile
                wait = self._last_reload + _RELOAD_GAP_S - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                    if self._fresh_as_of >= asked_at:
                        return
                await self.reload()
                if self._fresh_as_of < asked_at:  # it joined a re-read (periodic) that began before the question
                    await self.reload()
        except TimeoutError:
            raise ApiError(
                503,
                "SECURITY_UNAVAILABLE",
                f"the security settings could not be re-read within {RELOAD_WAIT_S:g} s to check the token; retry",
                retriable=True,
                headers={"Retry-After": "1"},
            ) from None

    async def run(self) -> None:
        """Re-read the document now and then (changes made on other servers)."""
        while True:
            await asyncio.sleep(self._refresh_s)
            try:
                await self.reload()
            except Exception as exc:  # storage hiccup: keep the last known state
                log.warning("could not re-read the security settings: %s", exc)

    async def change(self, apply: Callable[[SecurityState], SecurityState]) -> SecurityState:
        state = await self._io(lambda: self._store.change(apply))
        if state.version >= self.state.version:
            self.state = state
        return state

    # ---------------------------------------------------------------- authentication

    async def authenticate(self, headers: Mapping[str, str]) -> Principal:
        """The principal of ``Authorization: Bearer <token>``, or of the connection's client certificate
        (``server.tls``). With auth off, anyone is the admin (but a valid tenant token or certificate still names
        its tenant, for metering); with auth on, no valid token or certificate is 401."""
        principal = self.authenticate_now(headers)
        if principal is None:  # a token, or a certificate's tenant, made on another server since our last look?
            await self._reload_since(time.monotonic())
            principal = self.authenticate_now(headers, last_look=True)
        assert principal is not None  # the last look answers every case
        return principal

    def authenticate_now(self, headers: Mapping[str, str], *, last_look: bool = False) -> Principal | None:
        """:meth:`authenticate` without an await; None for a token, or a certificate's tenant, this server does
        not know yet (made on another server since its last look), which only :meth:`authenticate` may re-read
        the state for. ``last_look``: the state was just re-read, so what it does not know is nobody."""
        raw = headers.get("authorization")
        if raw is None:
            certified = headers.get(CERTIFICATE_HEADER)
            if certified is not None:  # set by the server from the connection's verified client certificate
                return self._certified(certified, last_look)
            if self.enabled:
                raise unauthenticated("this server requires a bearer token (Authorization: Bearer <token>)")
            return ANONYMOUS
        token = _bearer(raw)
        if token is None:
            if self.enabled:
                raise unauthenticated("expected 'Authorization: Bearer <token>'")
            return ANONYMOUS
        principal = self._known_principal(token)
        if principal is _UNKNOWN and not last_look:
            return None
        if principal is not None and principal is not _UNKNOWN:
            if principal.admin and (certified := headers.get(CERTIFIED_TENANT_HEADER)) is not None:
                return self._certified(certified, last_look)  # another server passing on a certificate's tenant
            return principal
        if self.enabled:
            raise unauthenticated("the token is not valid (unknown, revoked or malformed)")
        return ANONYMOUS

    def _certified(self, name: str, last_look: bool) -> Principal | None:
        """Who a verified client certificate whose common name is ``name`` is: the tenant of that name (never the
        admin); None if this state does not know it and ``last_look`` is not set. With auth on, a certificate
        naming no tenant is 401; with auth off, anyone is the admin."""
        if name in self.state.tenants:
            return Principal(name)
        if not self.enabled:
            return ANONYMOUS
        if not last_look:
            return None
        raise unauthenticated(f"the client certificate (CN={name}) names no tenant; a token can be sent instead")

    async def principal_of(self, token: str) -> Principal | None:
        """Who ``token`` belongs to; None if nobody's."""
        principal = self._known_principal(token)
        if principal is _UNKNOWN:
            await self._reload_since(time.monotonic())  # made on another server since our last look?
            principal = self._known_principal(token)
        return None if principal is _UNKNOWN else principal

    def _known_principal(self, token: str) -> Principal | None:
        """Who ``token`` belongs to by the state this server holds: None if nobody's, :data:`_UNKNOWN` if its
        id is not in the state (yet)."""
        if self._admin_token and hmac.compare_digest(token.encode(), self._admin_token.encode()):
            return Principal(None)
        known = self._principals.get(token)
        if known is not None:  # verified against this very state: the same answer again, without the hash
            return known
        parsed = parse_token(token)
        if parsed is None:
            return None
        token_id, secret = parsed
        record = self.state.tokens.get(token_id)
        if record is None:
            return _UNKNOWN
        if not verify(secret, record.hash):
            return None  # not kept: tokens that fail cost their hash each time, and no memory
        principal = Principal(record.tenant, record.id)
        if len(self._principals) >= _KEPT:
            self._principals = {}
        self._principals[token] = principal
        return principal

    # ---------------------------------------------------------------- authorization

    def authorize(self, principal: Principal, topic: TopicConfig | str, action: str) -> None:
        """403 unless the principal may ``action`` the topic; 404 (as for a topic that does not exist) if
        it may do nothing at all to an existing topic (``topic`` given as its config)."""
        if not self.enabled:
            return
        name, owner = (topic, None) if isinstance(topic, str) else (topic.name, topic.tenant)
        key = (principal, name, owner)
        actions = self._actions.get(key)
        if actions is None:
            if len(self._actions) >= _KEPT:
                self._actions = {}
            actions = self._actions[key] = actions_on(principal, self.state, name, owner)
        if action in actions:
            return
        if not isinstance(topic, str) and hidden(name, actions):
            metrics.denied(404)
            raise unknown_topic(name)
        metrics.denied(403)
        require(principal, self.state, name, owner, action)

    def limit_changes(self, principal: Principal, what: str) -> None:
        """429 with Retry-After once a tenant asks for ``what`` (a call that writes the security document)
        faster than :data:`CHANGE_RATE_PER_S` after a burst of :data:`CHANGE_BURST`. The admin is not limited."""
        if principal.tenant is None:
            return
        now = time.monotonic()
        key = ("changes", principal.tenant, what)
        bucket = self._buckets.get(key)
        if bucket is None:
            # A bucket admits until it is in debt: one call more than it holds.
            bucket = self._buckets[key] = TokenBucket.full(CHANGE_RATE_PER_S, now, burst=CHANGE_BURST - 1)
        wait = bucket.wait(now)
        if wait > 0:
            metrics.throttled("tenant", what)
            message = f"too many {what.replace('_', ' ')} from tenant {principal.tenant!r}; retry in {wait:.1f} s"
            raise _too_many("RATE_LIMITED", message, wait)
        bucket.charge(1, now)

    def require_admin(self, principal: Principal) -> None:
        if self.enabled and not principal.admin:
            metrics.denied(403)
            raise ApiError(403, "FORBIDDEN", "this needs the admin token")

    # ---------------------------------------------------------------- quotas

    def _share(self, scope: str, name: str) -> float:
        """The fraction of the topic's (tenant's) partitions this server owns: its part of the quota."""
        now = time.monotonic()
        cached = self._shares.get((scope, name))
        if cached is not None and now - cached[1] < _SHARE_TTL_S:
            return cached[0]
        owned = total = 0
        for topic in self._topology.list_topics():
            if (topic.name if scope == "topic" else topic.tenant) != name:
                continue
            total += topic.partitions
            owned += sum(1 for index in range(topic.partitions) if self._topology.owns(topic.name, index))
        share = owned / total if total else 1.0
        self._shares[(scope, name)] = (max(share, 1e-3), now)
        return max(share, 1e-3)

    def _bucket(self, scope: str, name: str, resource: str, limit: float, now: float) -> TokenBucket:
        rate = limit * self._share(scope, name)
        bucket = self._buckets.get((scope, name, resource))
        if bucket is None:
            bucket = self._buckets[(scope, name, resource)] = TokenBucket.full(rate, now)
        elif bucket.rate != rate:
            bucket.retune(rate)
        return bucket

    def _quotas(self, tenant: str, topic: str) -> tuple[Quota | None, Quota | None]:
        state = self.state
        tenant_entry = state.tenants.get(tenant)
        return (tenant_entry.quota if tenant_entry is not None else None), state.topic_quotas.get(topic)

    def admit(self, tenant: str, topic: str, kind: str) -> list[TokenBucket]:
        """Raise 429 if the tenant or the topic is over a rate quota; else charge the request and return
        the byte buckets to :func:`pay` with the request's size once it is known."""
        now = time.monotonic()
        requests, sized = self._admission(tenant, topic, kind, now)
        for bucket in requests:
            bucket.charge(1, now)
        return sized

    def admit_now(self, tenant: str, topic: str, kind: str, cost: int) -> Charge | None:
        """:meth:`admit` and then :func:`pay` of ``cost``, without an await: the charge made (empty if no quota
        applies), or None, charging nothing, if paying would hold the request (the task path then admits, pays
        and holds it). Raises 429 as :meth:`admit` does."""
        if not self._rates_limited:
            return NO_CHARGE
        now = time.monotonic()
        requests, sized = self._admission(tenant, topic, kind, now)
        if any(bucket.wait_after(cost, now) > 0 for bucket in sized):
            return None
        charged = [(bucket, 1) for bucket in requests] + [(bucket, cost) for bucket in sized]
        if not charged:  # no quota of this tenant's or topic's limits a rate
            return NO_CHARGE
        for bucket, amount in charged:
            bucket.charge(amount, now)
        return Charge(charged)

    def _admission(self, tenant: str, topic: str, kind: str, now: float) -> tuple[list[TokenBucket], list[TokenBucket]]:
        """The request buckets and the byte buckets of the quotas that apply; 429 if any of them is in debt."""
        tenant_quota, topic_quota = self._quotas(tenant, topic)
        if tenant_quota is None and topic_quota is None:
            return [], []
        wait = 0.0
        limited_by = ""
        limit_key = ("", "")
        requests: list[TokenBucket] = []
        sized: list[TokenBucket] = []
        bytes_resource = _BYTES_RESOURCE.get(kind)
        scopes: list[tuple[str, str, Quota | None]] = [("tenant", tenant, tenant_quota), ("topic", topic, topic_quota)]
        for scope, name, quota in scopes:
            if quota is None:
                continue
            for resource, into in (("requests_per_s", requests), (bytes_resource, sized)):
                limit = quota.get(resource) if resource is not None else None
                if limit is None or resource is None:
                    continue
                bucket = self._bucket(scope, name, resource, limit, now)
                into.append(bucket)
                bucket_wait = bucket.wait(now)
                if bucket_wait > wait:
                    wait, limited_by = bucket_wait, f"{scope} {name!r} {resource} {limit:g}"
                    limit_key = (scope, resource)
        if wait > 0:
            metrics.throttled(*limit_key)
            raise _too_many("QUOTA_EXCEEDED", f"over the quota ({limited_by}); retry in {wait:.3f} s", wait)
        return requests, sized


class Charge:
    """What :meth:`Security.admit_now` took from which buckets, to give back if the request is then not served."""

    __slots__ = ("_charged",)

    def __init__(self, charged: list[tuple[TokenBucket, int]]) -> None:
        self._charged = charged

    def refund(self) -> None:
        for bucket, amount in self._charged:
            bucket.refund(amount)


NO_CHARGE = Charge([])


def _too_many(code: str, message: str, wait: float) -> ApiError:
    return ApiError(
        429,
        code,
        message,
        retriable=True,
        headers={"Retry-After": retry_after_header(wait)},
        details={"retry_after_ms": round(wait * 1000, 1)},
    )


def allowance(buckets: list[TokenBucket]) -> int:
    """Bytes the buckets have left now (0 when one is in debt)."""
    now = time.monotonic()
    for bucket in buckets:
        bucket.wait(now)  # refills
    return max(0, int(min(bucket.tokens for bucket in buckets)))


# How many answers each of the state's caches (authorization, verified tokens) keeps before it starts again.
_KEPT = 4096

# A token whose id the security state does not hold: the state may be older than the token. (Compared by identity
# and never handed out; its tenant name cannot exist, so it could grant nothing if it were.)
_UNKNOWN = Principal("\x00unknown")


def _limits_a_rate(quota: Quota | None) -> bool:
    return quota is not None and any(quota.get(r) is not None for r in ("requests_per_s", *_BYTES_RESOURCE.values()))


def _bearer(raw: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value; None for no header or another scheme."""
    if raw is None:
        return None
    scheme, _, token = raw.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


async def pay(buckets: list[TokenBucket], cost: int) -> None:
    """Charge the request's size; if that put a bucket in debt, hold the request until the debt is paid
    (at most :data:`MAX_HOLD_S`), so what gets through by any moment stays within the limit plus one
    second's burst, however large a single batch is. Requests arriving meanwhile get 429s."""
    if not buckets:
        return
    now = time.monotonic()
    hold = 0.0
    for bucket in buckets:
        bucket.charge(cost, now)
        hold = max(hold, bucket.wait(now))
    if hold > 0:
        await asyncio.sleep(min(hold, MAX_HOLD_S))


def _retrieve(future: asyncio.Future[SecurityState]) -> None:
    """A re-read nobody waits for any more may fail: its exception is not "never retrieved"."""
    if not future.cancelled():
        future.exception()
