"""HTTP transports behind a tiny interface, so tests can swap the network for a function.

Sync: ``urllib3`` (a thread-safe connection pool). Async: ``aiohttp``. ``httpx``'s async pool managed only
~300 requests/s at 64 concurrent requests on these machines (ARCHITECTURE.md), so it is not used here.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypedDict, TypeVar, Unpack

import orjson

from talos._errors import TransportError, api_error

__all__ = [
    "AiohttpTransport",
    "AnyTransport",
    "AsyncFunctionTransport",
    "AsyncTransport",
    "FunctionTransport",
    "RequestOptions",
    "Response",
    "Transport",
    "Urllib3Transport",
    "authorized",
    "authorized_async",
    "check",
]

# A connection is set up within this or never: a server cut off by the network drops the handshake, and the
# request's whole timeout (30 s by default) would be lost before the caller tries another way.
CONNECT_TIMEOUT_S = 5.0  # room for two SYN retransmissions (at 1 s and 3 s)


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> object:
        return orjson.loads(self.body) if self.body else None


class RequestOptions(TypedDict, total=False):
    """The keyword arguments of a transport's ``request``, each optional."""

    params: Mapping[str, str | int] | None
    body: bytes | None
    headers: Mapping[str, str] | None
    timeout: float | None


class Transport(Protocol):
    """A blocking transport: ``request(method, url, *, params=None, body=None, headers=None, timeout=None)``."""

    def request(self, method: str, url: str, **options: Unpack[RequestOptions]) -> Response: ...

    def close(self) -> None: ...


class AsyncTransport(Protocol):
    """The asyncio transport: :class:`Transport`'s calls, awaited."""

    async def request(self, method: str, url: str, **options: Unpack[RequestOptions]) -> Response: ...

    async def close(self) -> None: ...


AnyTransport = TypeVar("AnyTransport", Transport, AsyncTransport)  # what a client twin is generic in


def _token(token: str | None) -> str | None:
    """The token given, else ``TALOS_TOKEN`` from the environment (so tools built on the SDK need no flag)."""
    return token if token is not None else (os.environ.get("TALOS_TOKEN") or None)


# With the admin's token, the tenant the requests act as (the servers run connector tasks so): the servers take the
# admin's token naming a tenant as that tenant, never the admin; any other token's requests ignore it.
_AS_TENANT_HEADER = "x-talos-certified-tenant"


def _with_bearer(options: RequestOptions, token: str, tenant: str | None) -> RequestOptions:
    headers = dict(options.get("headers") or {})
    if not any(k.lower() == "authorization" for k in headers):
        headers["authorization"] = f"Bearer {token}"
        if tenant:
            headers[_AS_TENANT_HEADER] = tenant
    return {**options, "headers": headers}


class _Bearer(Generic[AnyTransport]):
    """Adds ``Authorization: Bearer <token>`` to every request of the transport it wraps."""

    def __init__(self, inner: AnyTransport, token: str) -> None:
        self._inner: AnyTransport = inner
        self._token = token
        self._tenant = os.environ.get("TALOS_AS_TENANT") or None


class _BearerTransport(_Bearer[Transport]):
    def request(self, method: str, url: str, **options: Unpack[RequestOptions]) -> Response:
        return self._inner.request(method, url, **_with_bearer(options, self._token, self._tenant))

    def close(self) -> None:
        self._inner.close()


class _AsyncBearerTransport(_Bearer[AsyncTransport]):
    async def request(self, method: str, url: str, **options: Unpack[RequestOptions]) -> Response:
        return await self._inner.request(method, url, **_with_bearer(options, self._token, self._tenant))

    async def close(self) -> None:
        await self._inner.close()


def authorized(transport: Transport, token: str | None) -> Transport:
    """``transport`` sending the token (or ``TALOS_TOKEN``), if there is one."""
    found = _token(token)
    return _BearerTransport(transport, found) if found else transport


def authorized_async(transport: AsyncTransport, token: str | None) -> AsyncTransport:
    found = _token(token)
    return _AsyncBearerTransport(transport, found) if found else transport


def check(response: Response) -> Response:
    """Return the response if it is a success, else raise the matching :class:`ApiError`."""
    if response.status < 400:
        return response
    try:
        body = response.json()
    except orjson.JSONDecodeError:
        body = None
    retry_after = response.headers.get("retry-after") or response.headers.get("Retry-After")
    seconds = float(retry_after) if retry_after and retry_after.replace(".", "", 1).isdigit() else None
    error = body.get("error") if isinstance(body, dict) else None
    precise = error.get("retry_after_ms") if isinstance(error, dict) else None
    if isinstance(precise, int | float) and not isinstance(precise, bool) and precise >= 0:
        seconds = precise / 1000  # Retry-After is whole seconds; a quota's wait is usually a fraction of one
    raise api_error(response.status, body if isinstance(body, dict) else None, seconds)


class Urllib3Transport:
    """``ssl_context``: for ``https://`` servers (``talos._tls``); None: the system's CAs."""

    def __init__(
        self, *, pool_size: int = 16, timeout: float = 30.0, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        import urllib3

        self._urllib3 = urllib3
        tls: dict[str, Any] = {"ssl_context": ssl_context} if ssl_context is not None else {}
        self._pool = urllib3.PoolManager(maxsize=pool_size, block=False, retries=False, **tls)
        self._timeout = timeout

    def request(self, method: str, url: str, **options: Unpack[RequestOptions]) -> Response:
        params = options.get("params")
        if params:
            from urllib.parse import urlencode

            url = f"{url}?{urlencode(params)}"
        timeout = options.get("timeout") or self._timeout
        try:
            answer = self._pool.request(
                method,
                url,
                body=options.get("body"),
                headers=dict(options.get("headers") or {}),
                timeout=self._urllib3.Timeout(connect=min(timeout, CONNECT_TIMEOUT_S), read=timeout),
                preload_content=True,
                redirect=False,
            )
        except self._urllib3.exceptions.HTTPError as exc:
            raise TransportError(f"{method} {url}: {exc}") from exc
        return Response(answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.data)

    def close(self) -> None:
        self._pool.clear()


class AiohttpTransport:
    """``ssl_context``: for ``https://`` servers (``talos._tls``); None: the system's CAs."""

    def __init__(
        self, *, pool_size: int = 64, timeout: float = 30.0, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self._pool_size = pool_size
        self._timeout = timeout
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._session: object | None = None

    def _get_session(self) -> object:
        if self._session is None:
            import aiohttp

            connector = aiohttp.TCPConnector(limit=self._pool_size, ssl=self._ssl)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def request(self, method: str, url: str, **options: Unpack[RequestOptions]) -> Response:
        import aiohttp

        session = self._get_session()
        assert isinstance(session, aiohttp.ClientSession)
        try:
            async with session.request(
                method,
                url,
                params={k: str(v) for k, v in (options.get("params") or {}).items()},
                data=options.get("body"),
                headers=dict(options.get("headers") or {}),
                timeout=aiohttp.ClientTimeout(
                    total=options.get("timeout") or self._timeout,
                    sock_connect=min(options.get("timeout") or self._timeout, CONNECT_TIMEOUT_S),
                ),
            ) as answer:
                data = await answer.read()
                return Response(answer.status, {k.lower(): v for k, v in answer.headers.items()}, data)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise TransportError(f"{method} {url}: {exc or type(exc).__name__}") from exc

    async def close(self) -> None:
        import aiohttp

        if isinstance(self._session, aiohttp.ClientSession):
            await self._session.close()
        self._session = None


Handler = Callable[[str, str, Mapping[str, str | int], bytes | None], Response]


class _Scripted:
    def __init__(self, handler: Handler) -> None:
        self._handler = handler

    def _answer(self, method: str, url: str, options: RequestOptions) -> Response:
        return self._handler(method, url, options.get("params") or {}, options.get("body"))


class FunctionTransport(_Scripted):
    """A transport that calls a function instead of the network (for tests and scripted servers)."""

    def request(self, method: str, url: str, **options: Unpack[RequestOptions]) -> Response:
        return self._answer(method, url, options)

    def close(self) -> None:
        pass


class AsyncFunctionTransport(_Scripted):
    """:class:`FunctionTransport` for the asyncio twins: the same handler, awaited as a request."""

    async def request(self, method: str, url: str, **options: Unpack[RequestOptions]) -> Response:
        return self._answer(method, url, options)

    async def close(self) -> None:
        pass
