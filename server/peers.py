"""The HTTP client to the other servers of the cluster: a request for a partition (or a group or subscription
coordinator) this server does not own, forwarded to the owner, or answered 421.

A client that routes by itself (the SDK, from ``GET /v1/routes``) sends ``x-talos-route: direct`` and gets
``421`` with the owner's URL instead of a forward: the bytes cross loopback once, not twice. Everything
else (curl, the CLI, other languages) is forwarded through a pooled ``aiohttp`` session. Each forward adds
one to ``x-talos-hops``; past ``forward_hops`` (servers whose rings disagree while a change spreads) the
request is refused as retriable instead of bouncing.

Below the services (``server.messaging.forwarder`` says what a call to a partition sends): the broker owns one.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

import aiohttp

from server import metrics
from server.cluster import Owner
from server.errors import ApiError
from server.tls import CERTIFIED_TENANT_HEADER, certified_tenant, request_credentials

__all__ = ["HOPS_HEADER", "JSON", "ROUTE_HEADER", "Forwarder", "Reply", "outgoing_headers"]

HOPS_HEADER = "x-talos-hops"
ROUTE_HEADER = "x-talos-route"
JSON = "application/json"
# x-talos-client-address: the producer's address as the first server saw it, for the message trace.
_PASS_REQUEST = ("content-type", "accept", "authorization", "x-talos-tenant", "x-talos-client-address")
_PASS_RESPONSE = ("retry-after",)


def outgoing_headers(headers: Mapping[str, str], own_authorization: str | None) -> dict[str, str]:
    """What a forward sends of ``headers``: the caller's token, else the servers' own (``own_authorization``). A
    caller its client certificate authenticated (``server.tls``) goes as the servers' own token naming its tenant,
    which the owner takes as that tenant, not as the admin."""
    out = {k: v for k in _PASS_REQUEST if (v := headers.get(k)) is not None}
    certified = certified_tenant(request_credentials(headers))
    if certified is not None:
        out.pop("authorization", None)
        out[CERTIFIED_TENANT_HEADER] = certified
    if "authorization" not in out and own_authorization is not None:
        out["authorization"] = own_authorization
    return out


def _unavailable(code: str, message: str) -> ApiError:
    return ApiError(503, code, message, retriable=True, headers={"Retry-After": "1"})


@dataclass(slots=True)
class Reply:
    """An answer as the servers' API sends it (status, body, content type, headers): another server's to a
    forwarded call, and what the REST edge sends back."""

    status: int
    body: bytes
    content_type: str = JSON
    headers: dict[str, str] = field(default_factory=dict)


class Forwarder:
    """``pool_size``: connections per owner. There is no cap over all owners: an owner that does not answer (cut
    off) holds at most its own ``pool_size`` until their requests time out, and forwards to the others go on.
    ``connect_timeout_s``: an owner that does not accept a connection in that time is unreachable (a 503 the
    client retries) without waiting out the whole ``timeout_s``."""

    def __init__(
        self,
        *,
        max_hops: int,
        timeout_s: float,
        pool_size: int = 64,
        admin_token: str = "",
        connect_timeout_s: float = 5.0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._max_hops = max_hops
        # The servers' own requests (internal topics, group coordination) carry no client's token: they
        # go as the admin, on behalf of the tenant named in x-talos-tenant, if any.
        self._own_authorization = f"Bearer {admin_token}" if admin_token else None
        self._timeout_s = timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._pool_size = pool_size
        self._tls = tls  # for https:// owners: their certificates checked, this server's presented
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            # limit=0: no cap over all owners (with limit == limit_per_host, one owner cut off took every
            # connection and stalled the forwards to the others until its requests timed out).
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=self._pool_size, ssl=self._tls or True)
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        return self._session

    async def send(
        self,
        owner: Owner,
        method: str,
        path: str,
        *,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes | None,
        extra_timeout_s: float = 0.0,
    ) -> Reply:
        """Forward, or raise 421 (direct routing) / 503 (owner unknown, unreachable, too many hops)."""
        if headers.get(ROUTE_HEADER) == "direct" and owner.url is not None:
            metrics.misdirected()
            raise ApiError(
                421,
                "MISDIRECTED_REQUEST",
                f"partition served by {owner.server_id} at {owner.url}",
                retriable=True,
                headers={"x-talos-owner-url": owner.url},
                details={"owner": owner.server_id, "owner_url": owner.url},
            )
        if owner.url is None:
            raise _unavailable(
                "OWNER_UNAVAILABLE",
                f"the owner {owner.server_id} is not registered; its partitions move after reassign_delay; retry",
            )
        raw_hops = headers.get(HOPS_HEADER, "0") or "0"
        if not (raw_hops.isascii() and raw_hops.isdigit() and len(raw_hops) <= 3):
            raise ApiError(400, "INVALID_REQUEST", f"{HOPS_HEADER} must be a small whole number")
        hops = int(raw_hops)
        if hops >= self._max_hops:
            raise _unavailable("TOO_MANY_HOPS", f"forwarded {hops} times: the ring is changing; retry")
        out = outgoing_headers(headers, self._own_authorization)
        out[HOPS_HEADER] = str(hops + 1)
        try:
            async with self._get_session().request(
                method,
                owner.url + path,
                params=dict(query),
                data=body,
                headers=out,
                timeout=aiohttp.ClientTimeout(
                    total=self._timeout_s + extra_timeout_s, sock_connect=self._connect_timeout_s
                ),
            ) as answer:
                data = await answer.read()
                passed = {k: v for k, v in answer.headers.items() if k.lower().startswith("x-talos-")}
                passed.update({k: v for k in _PASS_RESPONSE if (v := answer.headers.get(k)) is not None})
                metrics.forwarded("ok" if answer.status < 400 else "error", len(body or b"") + len(data))
                return Reply(answer.status, data, answer.headers.get("content-type", "application/json"), passed)
        except (TimeoutError, aiohttp.ClientError) as exc:
            metrics.forwarded("unreachable", 0)
            raise _unavailable(
                "OWNER_UNREACHABLE", f"the owner {owner.server_id} at {owner.url} did not answer: {exc!r}"
            ) from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
