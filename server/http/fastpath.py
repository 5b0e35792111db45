"""A raw ASGI front for the hot endpoints (produce, fetch, offsets); everything else goes to FastAPI.

Measured here, a FastAPI route costs ~3.5x the CPU of a bare ASGI endpoint (ARCHITECTURE.md, "Performance
facts"): routing, request objects, dependency resolution, exception middleware. This layer matches the
three message paths by splitting the path, reads the body straight from ``receive`` and calls the same
functions as the FastAPI routes (``server.http.messages``), which still exist for the OpenAPI schema and for
anything this layer passes on (e.g. a partition that is not a number, so FastAPI reports the error).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, urlsplit

from fencing import OffsetOutOfRangeError
from server.broker import Broker
from server.errors import ApiError, error_body, out_of_range
from server.http import messages
from server.http.routes.schema_registry import PREFIX as REGISTRY_PREFIX
from server.http.routes.schema_registry import error_body as registry_error_body
from server.messaging.authorization import authorize_message
from server.messaging.caller import Caller
from server.messaging.forwarder import HOPS_HEADER, Reply
from server.security.access import Principal
from server.security.tokens import basic_as_bearer
from server.topics import TopicConfig
from server.trace.recorder import CLIENT_HEADER
from server.usage.meter import TENANT_HEADER
from server.web import MAX_ADMIN_BODY, ASGIApp, Receive, Scope, Send, caller_of, read_body

__all__ = [
    "PUBLIC_PATHS",
    "BodyReader",
    "Declined",
    "FastPath",
    "HeadMemo",
    "Route",
    "client_address",
    "error_reply",
    "route",
]

# Answered without a token: probes, metrics, the API's documentation, and the portal (its own sign-in).
PUBLIC_PATHS = ("/healthz", "/readyz", "/metrics", "/docs", "/redoc", "/openapi.json", "/portal", "/favicon.ico")

log = logging.getLogger("talos.server")


def error_reply(error: ApiError) -> Reply:
    """The answer of a refused hot request: the error document, its status and headers."""
    return Reply(error.status, error_body(error), headers=error.headers)


def _is_index(segment: str) -> bool:
    """A partition index as clients write it: 1-9 ASCII digits. ``str.isdigit`` alone also takes ``²`` and
    other Unicode digits (``int`` refuses some of them) and any length; anything else goes on to FastAPI,
    whose bounded path parameter answers 400."""
    return 0 < len(segment) < 10 and segment.isascii() and segment.isdigit()


def _public(path: str) -> bool:
    if path.startswith("/v1/"):  # the API: never public (and the produce path's common case)
        return False
    return any(path == p or path.startswith(p + "/") for p in PUBLIC_PATHS)


_TENANT_HEADER_RAW = TENANT_HEADER.encode()


def _query(raw_query: bytes) -> dict[str, str]:
    """A hot request's query parameters (the last of a repeated name)."""
    return dict(parse_qsl(raw_query.decode("latin-1"))) if raw_query else {}


class Route(NamedTuple):
    """A request of one of the hot endpoints (a tuple: one per request, cheaper to make than a dataclass)."""

    kind: str  # produce | fetch | offsets
    topic: str
    partition: int | None  # None: produce to the topic (the server picks partitions)


def route(method: str, path: str) -> Route | None:
    """The hot endpoint ``method path`` asks for, or None (FastAPI answers it, errors included)."""
    parts = path.split("/")
    # ['', 'v1', 'topics', T, 'messages'] or ['', 'v1', 'topics', T, 'partitions', P, 'messages'|'offsets']
    if len(parts) == 5 and parts[1] == "v1" and parts[2] == "topics" and parts[4] == "messages" and method == "POST":
        return Route("produce", parts[3], None)
    if (
        len(parts) == 7
        and parts[1] == "v1"
        and parts[2] == "topics"
        and parts[4] == "partitions"
        and _is_index(parts[5])
        and parts[6] in ("messages", "offsets")
    ):
        if parts[6] == "offsets":
            kind = "offsets" if method == "GET" else ""
        else:
            kind = "produce" if method == "POST" else "fetch" if method == "GET" else ""
        return Route(kind, parts[3], int(parts[5])) if kind else None
    return None


class Declined(NamedTuple):
    """What :meth:`FastPath.answer_now` learnt before it found the request needs an await."""

    principal: Principal | None  # None: not authenticated yet
    headers: dict[str, str] | None = None  # the headers it authenticated (lower-case names, the tenant named)


class HeadMemo:
    """What a connection's last no-await request learnt from its head: the headers, who asks and the
    :class:`Caller` served, that it may produce to (or fetch from: ``kind``) the topic. A keep-alive client sends
    the same head again and again; the next request of that kind with the same headers (byte for byte), to the
    same topic, while the security state and the topic's configuration are the very objects it was found under
    (both are replaced, never changed, when anything in them changes), is the same caller, allowed the same way,
    so none of it is done again."""

    __slots__ = ("caller", "config", "headers", "kind", "principal", "raw", "state", "topic")

    def __init__(self) -> None:
        self.raw: list[tuple[bytes, bytes]] | None = None
        self.topic = ""
        self.kind = ""
        self.state: object = None
        self.config: TopicConfig | None = None
        self.headers: dict[str, str] = {}
        self.principal: Principal | None = None
        self.caller = Caller()


#: Reads a hot request's body: ``(limit, declared content-length) -> body``, 413 (:class:`ApiError`) over the limit.
BodyReader = Callable[[int, str | None], Awaitable[bytes | bytearray]]


class FastPath:
    """The ASGI app the server runs: the hot endpoints answered here, everything else handed to FastAPI. The
    server's HTTP protocol (``server.http.connections``) calls :meth:`answer` itself, without ASGI."""

    def __init__(self, app: ASGIApp, broker: Callable[[], Broker]) -> None:
        self.app = app
        self._broker = broker

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _public(scope["path"]):
            await self._pass_on(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        hot = route(scope["method"], scope["path"])
        if hot is None:
            registry = scope["path"].startswith(REGISTRY_PREFIX)
            if registry:  # Confluent's clients send Basic credentials
                bearer = basic_as_bearer(headers.get("authorization", ""))
                if bearer is not None:
                    headers["authorization"] = bearer
            try:
                principal = await self._authenticate(headers)
            except ApiError as exc:
                refused = error_reply(exc)
                if registry:  # in Confluent's shape, which its clients read
                    refused.body = registry_error_body(exc)
                await _send(send, refused)
                return
            _for_routes(scope, principal)
            await self._pass_on(scope, receive, send)
            return

        async def body(limit: int, declared: str | None) -> bytes:
            return await read_body(receive, limit, declared)

        try:
            client = client_address(scope) if hot.kind == "produce" else None
            reply = await self.answer(hot, headers, scope["query_string"], body, client=client)
        except ConnectionResetError:
            return
        await _send(send, reply)

    def body_limit(self, hot: Route) -> int:
        """The most body bytes ``hot`` may send (every hot request but produce has none to send)."""
        return self._broker().config.max_request_bytes if hot.kind == "produce" else MAX_ADMIN_BODY

    async def answer(
        self,
        hot: Route,
        headers: dict[str, str],
        raw_query: bytes,
        body: BodyReader,
        *,
        client: str | None = None,
        principal: Principal | None = None,
        wait_until: float | None = None,
    ) -> Reply:
        """Authenticate, authorize and answer a hot request (``headers``: lower-case names; changed in place).
        ``client``: the peer's ``host:port`` (the message trace records who produced); ``principal``: who asks,
        if :meth:`answer_now` authenticated the request already (with these headers); ``wait_until``: a long
        poll that waited already (without a task) waits no later than this (the event loop's clock). Raises
        :class:`ConnectionResetError` if the client went away while its body was read."""
        query = _query(raw_query)
        self._name_client(headers, client)
        topic, partition = hot.topic, hot.partition
        try:
            if principal is None:
                principal = await self._authenticate(headers)
            broker = self._broker()
            authorize_message(broker, principal, topic, hot.kind)
            caller = caller_of(headers)
            if hot.kind == "produce":
                data = await body(self.body_limit(hot), headers.get("content-length"))
                return await messages.produce(
                    broker, caller, topic, partition, headers.get("content-type"), query, data
                )
            assert partition is not None
            if hot.kind == "fetch":
                return await messages.fetch(
                    broker, caller, topic, partition, headers.get("accept"), query, wait_until=wait_until
                )
            return await messages.offsets(broker, caller, topic, partition, query)
        except ApiError as exc:
            return error_reply(exc)
        except OffsetOutOfRangeError as exc:
            return error_reply(out_of_range(exc))
        except ConnectionResetError:
            raise
        except Exception as exc:
            log.exception("unexpected error")
            return error_reply(ApiError(500, "INTERNAL", f"internal error: {type(exc).__name__}", retriable=True))

    def answer_now(
        self,
        hot: Route,
        raw_headers: list[tuple[bytes, bytes]],
        body: bytes | bytearray,
        *,
        client: str | None,
        memo: HeadMemo,
        raw_query: bytes = b"",
        waited: bool = False,
    ) -> Reply | messages.PendingReply | messages.FetchWait | Declined:
        """:meth:`answer` of a produce whose body is in, or of a fetch, without an await: a refusal, a fetch's
        answer or the wait it must make first (``waited``: asked again once it is over), or the produce appended
        to its partition's next flush (answered once that is durable).
        :class:`Declined` whenever an await is needed (a token this server does not know yet, a partition to load
        or on another server, a quota that would hold the request, a fetch that waits for messages or reads the
        storage, ...): :meth:`answer` then does it all (given the principal and headers found here), and nothing
        was stored, charged or metered. ``memo``: the connection's, read and kept up to date here."""
        kind = hot.kind
        if kind not in ("produce", "fetch"):
            return Declined(None)
        broker = self._broker()
        topic = hot.topic
        config = broker.topic_now(topic)
        if (
            config is not None
            and memo.config is config
            and memo.raw == raw_headers
            and memo.topic == topic
            and memo.kind == kind  # what the principal may do differs by kind: a produce's memo is no fetch's
            and memo.state is broker.security.state
        ):
            headers, principal, caller = memo.headers, memo.principal, memo.caller
        else:
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in raw_headers}
            self._name_client(headers, client if kind == "produce" else None)
            try:
                principal = broker.security.authenticate_now(headers)
                if principal is None:
                    return Declined(None)
                _name_tenant(headers, principal)
                if config is None:  # not known here: the task path looks it up (read-your-writes) and answers
                    return Declined(principal, headers)
                authorize_message(broker, principal, topic, kind)
            except ApiError as exc:
                return error_reply(exc)
            caller = caller_of(headers)
            if HOPS_HEADER in headers:  # a forward: whether its client header is believed depends on the cluster
                memo.raw = None
            else:
                memo.raw, memo.topic, memo.kind = raw_headers, topic, kind
                memo.state, memo.config = broker.security.state, config
                memo.headers, memo.principal, memo.caller = headers, principal, caller
        if kind == "fetch":
            assert hot.partition is not None
            fetched = messages.fetch_now(
                broker, caller, topic, hot.partition, headers.get("accept"), _query(raw_query), waited=waited
            )
            if fetched is not None:
                return fetched
        elif len(body) <= self.body_limit(hot):  # else the task path answers 413
            try:
                now = messages.produce_now(broker, caller, config, hot.partition, headers.get("content-type"), body)
            except ApiError as exc:  # a quota in debt: the same 429 the task path answers
                return error_reply(exc)
            if now is not None:
                return now
        return Declined(principal, dict(headers))  # a copy: the task path names the client in it

    def _name_client(self, headers: dict[str, str], client: str | None) -> None:
        if client is not None and not (HOPS_HEADER in headers and self._from_a_server(client)):
            headers[CLIENT_HEADER] = client  # only a forward from a server may say who produced

    async def _pass_on(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Hand the request to FastAPI with its body read first, refusing (413) one over
        :data:`MAX_ADMIN_BODY`: its routes read whole bodies, and none of them needs a large one."""
        declared = dict(scope["headers"]).get(b"content-length", b"").decode("latin-1") or None
        try:
            body = await read_body(receive, MAX_ADMIN_BODY, declared)
        except ApiError as exc:
            await _send(send, error_reply(exc))
            return
        except ConnectionResetError:
            return
        replayed = False

        async def replay() -> MutableMapping[str, Any]:
            nonlocal replayed
            if replayed:
                return await receive()  # only a disconnect can come now
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    def _from_a_server(self, client: str) -> bool:
        """Whether ``client`` (``host:port``) is on the host of a live server of the cluster, whose forwards
        carry the producer's address; anyone else saying so is not believed."""
        cluster = self._broker().cluster
        if cluster is None:
            return False
        host = client.rpartition(":")[0]
        return any(urlsplit(server.url).hostname == host for server in cluster.servers.values())

    async def _authenticate(self, headers: dict[str, str]) -> Principal:
        """Who asks (the tenant header named by :func:`_name_tenant`)."""
        principal = await self._broker().security.authenticate(headers)
        _name_tenant(headers, principal)
        return principal


def _name_tenant(headers: dict[str, str], principal: Principal) -> None:
    """The tenant header becomes the authenticated tenant's (only the admin may name one, as servers do when they
    write on a tenant's behalf)."""
    if principal.tenant is not None:
        headers[TENANT_HEADER] = principal.tenant


def client_address(scope: Mapping[str, object]) -> str | None:
    """``host:port`` of the request's peer, from an ASGI scope."""
    peer = scope.get("client")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, (tuple, list)) and len(peer) == 2 else None


def _for_routes(scope: Scope, principal: Principal) -> None:
    """What the FastAPI routes read of the authentication: the principal, and the tenant header in the scope's
    headers. Only a request handed on pays for this; the fast path's own requests use the headers dict."""
    if principal.tenant is not None:
        scope["headers"] = [(k, v) for k, v in scope["headers"] if k != _TENANT_HEADER_RAW] + [
            (_TENANT_HEADER_RAW, principal.tenant.encode())
        ]
    scope.setdefault("state", {})["principal"] = principal


async def _send(send: Send, reply: Reply) -> None:
    raw_headers = [
        (b"content-type", reply.content_type.encode()),
        (b"content-length", str(len(reply.body)).encode()),
    ]
    raw_headers += [(k.encode(), v.encode()) for k, v in reply.headers.items()]
    await send({"type": "http.response.start", "status": reply.status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": reply.body})
