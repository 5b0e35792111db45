"""One Kafka client connection's identity: who it authenticated as (over SASL, or by its TLS client certificate),
and the caller the service layer serves its requests for (``server.messaging.caller``: tenant, client address,
credentials).

A tenant token authenticates with either mechanism: PLAIN (the token is the password; the user name is
not checked, the token names its tenant) or OAUTHBEARER (the token is the bearer token). The admin token
works too. With auth off, SASL is optional and a token still names its tenant, as for REST.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from server.messaging.caller import SERVERS, Caller
from server.security.access import ANONYMOUS, Principal
from server.security.guard import Security
from server.tls import CERTIFICATE_HEADER, certified_credentials

__all__ = ["MECHANISMS", "Session", "bearer_token"]

MECHANISMS = ("PLAIN", "OAUTHBEARER")
# Kafka APIs a connection may use before it has authenticated (when auth is on).
BEFORE_AUTHENTICATION = frozenset((17, 18, 36))  # SaslHandshake, ApiVersions, SaslAuthenticate


def bearer_token(mechanism: str, auth_bytes: bytes) -> str | None:
    """The token in a SASL client's first (and only) message; None if it is malformed.

    PLAIN (RFC 4616): ``authzid NUL authcid NUL passwd``. OAUTHBEARER (RFC 7628): a GS2 header, then
    ``\\x01``-separated ``key=value`` pairs, one of them ``auth=Bearer <token>``."""
    try:
        text = auth_bytes.decode()
    except UnicodeDecodeError:
        return None
    if mechanism == "PLAIN":
        parts = text.split("\0")
        return parts[2] if len(parts) == 3 and parts[2] else None
    if mechanism == "OAUTHBEARER":
        _gs2, _, pairs = text.partition("\x01")
        for pair in pairs.split("\x01"):
            key, _, value = pair.partition("=")
            if key == "auth":
                scheme, _, token = value.partition(" ")
                token = token.strip()
                return token if scheme.lower() == "bearer" and token else None
    return None


@dataclass
class Session:
    peer: str
    security: Security
    listener: str | None = None  # the name of the listener it connected to (``server.kafka_listeners``)
    principal: Principal = ANONYMOUS
    token: str | None = None
    certified: str | None = None  # the tenant its verified client certificate names (TLS), if any
    mechanism: str | None = None  # chosen by SaslHandshake
    checked_at: float = 0.0  # when the token was last found valid
    caller: Caller = SERVERS  # who the services serve its requests for: the peer, then its tenant (SASL)
    # Per partition, the newest produce of this connection: the next one waits until it is appended, so
    # pipelined requests reach the log in the order they were sent (idempotent sequences depend on it).
    appends: dict[tuple[str, int], asyncio.Future[None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.caller = Caller(client=self.peer)

    @property
    def authenticated(self) -> bool:
        return self.token is not None or self.certified is not None

    async def authenticate_certificate(self, name: str) -> None:
        """The connection's verified client certificate, whose common name is ``name``, names its tenant (as
        Kafka's SSL principal; authenticated as REST authenticates it); raises 401 (``ApiError``) if it names none
        with auth on. SASL may still follow: a token then decides."""
        self.principal = await self.security.authenticate({CERTIFICATE_HEADER: name})
        self.certified = self.principal.tenant
        self.checked_at = time.monotonic()
        tenant = self.principal.tenant
        # Forwards pass the certificate's tenant on (server.tls), never the servers' own token alone.
        self.caller = Caller(tenant, self.peer, certified_credentials(tenant) if tenant is not None else None)

    def may_call(self, api_key: int) -> bool:
        """Whether the connection may make this request now (with auth on, only the SASL exchange first)."""
        return self.authenticated or not self.security.enabled or api_key in BEFORE_AUTHENTICATION

    async def authenticate(self, token: str) -> bool:
        principal = await self.security.principal_of(token)
        if principal is None and self.security.enabled:
            return False
        self.principal = principal or ANONYMOUS
        self.token = token
        self.checked_at = time.monotonic()
        self.caller = Caller(self.principal.tenant, self.peer, f"Bearer {token}")
        return True

    async def still_valid(self, refresh_s: float) -> bool:
        """Whether the token (or the certificate's tenant) still authenticates: revoked tokens and deleted tenants
        stop working within ``refresh_s``, as on REST, where each request is checked against a document re-read
        that often."""
        if not self.authenticated or not self.security.enabled:
            return True
        now = time.monotonic()
        if now - self.checked_at < refresh_s:
            return True
        if self.token is None:
            valid = self.certified in self.security.state.tenants
        else:
            principal = await self.security.principal_of(self.token)
            valid = principal is not None and principal == self.principal
        if valid:
            self.checked_at = now
        return valid

    def claim_appends(
        self, partitions: list[tuple[str, int]]
    ) -> list[tuple[asyncio.Future[None] | None, asyncio.Future[None]]]:
        """For a produce request, in the order requests arrive: per partition, the previous request's
        ``appended`` future to wait for, and this request's own."""
        loop = asyncio.get_running_loop()
        out = []
        for key in partitions:
            mine: asyncio.Future[None] = loop.create_future()
            out.append((self.appends.get(key), mine))
            self.appends[key] = mine
        return out

    def release_append(self, key: tuple[str, int], mine: asyncio.Future[None]) -> None:
        if not mine.done():
            mine.set_result(None)
        if self.appends.get(key) is mine:
            del self.appends[key]
