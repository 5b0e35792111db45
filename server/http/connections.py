"""Limits on client connections that uvicorn lacks, so hostile connections cannot stop other clients (issue 20).

uvicorn's httptools protocol closes idle keep-alive connections and nothing else: a connection that never finishes
its request head, or stalls in its body, stays open for ever, and every accepted connection holds a file
descriptor until the process hits EMFILE (then /healthz, produce and the security re-read fail). This subclass adds:

* deadlines per request: a head not complete within ``header_timeout_s`` gets 408; a body with no bytes for
  ``body_idle_timeout_s``, or not complete within ``body_timeout_s``, gets 408 (or a close, if the answer has
  started); a keep-alive connection with no byte of a next request for ``keep_alive_timeout_s`` is closed. One
  watchdog timer per connection enforces them all: a request only moves the deadlines (floats), and the timer,
  when it fires, acts on a deadline that has passed or sleeps until the next one. uvicorn instead arms and
  cancels a keep-alive timer per request, and a timer per request showed in the hot path's profile;
* a cap on the request head's size (httptools buffers a header of any length);
* a cap on open connections: one over it is answered 503 (retriable) and closed at once, so it costs a descriptor
  for microseconds and connections already open (well-behaved keep-alive clients) carry on;
* a cap on requests per keep-alive connection (the last answer says ``connection: close``).
"""

from __future__ import annotations

import asyncio
import logging
import re
import resource
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from server import metrics
from server.config import ServerConfig
from server.errors import ApiError, error_body
from server.http.fastpath import Declined, FastPath, HeadMemo, Route, route
from server.http.hot_cycle import HotCycle, settled, write_reply
from server.http.messages import PendingReply
from server.messaging.forwarder import Reply
from server.tls import CERTIFICATE_HEADER, certificate_name

__all__ = [
    "AUTO_MAX_CONNECTIONS",
    "ConnectionLimits",
    "connection_cap",
    "connection_limits",
    "protocol_class",
    "raise_fd_limit",
]

# The automatic cap never goes above this: each connection also costs memory (up to max_header_bytes while its
# head arrives), and a hard limit of a million descriptors would otherwise allow ~750 k connections.
AUTO_MAX_CONNECTIONS = 10_000

log = logging.getLogger("talos.server")

_HEAD, _BODY, _APP = 0, 1, 2  # awaiting or reading a request head; reading its body; the app has the request


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_timeout_s: float
    body_idle_timeout_s: float
    body_timeout_s: float
    max_connections: int
    max_requests_per_connection: int  # 0: unlimited
    max_header_bytes: int


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (where the OS allows it); return the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # e.g. macOS refuses more than kern.maxfilesperproc
            pass
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def connection_cap(fd_limit: int, configured: int) -> int:
    """The most open client connections: ``configured``, or (0) what the descriptor limit allows.

    The automatic cap leaves a quarter of the descriptors (at least min(1024, half)) to the server's own files:
    segments and indexes, the HDFS client, ZooKeeper, the forwarding pool.
    """
    if configured < 0:
        raise ValueError(f"max_connections must be >= 0 (0: from the descriptor limit), got {configured}")
    if configured:
        if configured > fd_limit - 64:
            raise ValueError(
                f"max_connections {configured} leaves the server no file descriptors: the limit is {fd_limit}"
            )
        return configured
    reserve = max(fd_limit // 4, min(1024, fd_limit // 2))
    return max(1, min(AUTO_MAX_CONNECTIONS, fd_limit - reserve))


def connection_limits(config: ServerConfig, fd_limit: int) -> ConnectionLimits:
    """The limits ``config`` asks for, checked; the connection cap from ``fd_limit`` when not set."""
    for name in ("header_timeout_s", "body_idle_timeout_s", "body_timeout_s", "keep_alive_timeout_s"):
        if not getattr(config, name) > 0:
            raise ValueError(f"{name} must be > 0, got {getattr(config, name)}")
    if config.max_requests_per_connection < 0:
        raise ValueError(
            f"max_requests_per_connection must be >= 0 (0: unlimited), got {config.max_requests_per_connection}"
        )
    if config.max_header_bytes < 1024:
        raise ValueError(f"max_header_bytes must be >= 1024, got {config.max_header_bytes}")
    return ConnectionLimits(
        header_timeout_s=config.header_timeout_s,
        body_idle_timeout_s=config.body_idle_timeout_s,
        body_timeout_s=config.body_timeout_s,
        max_connections=connection_cap(fd_limit, config.max_connections),
        max_requests_per_connection=config.max_requests_per_connection,
        max_header_bytes=config.max_header_bytes,
    )


def _raw_response(error: ApiError) -> bytes:
    body = error_body(error)
    head = [
        f"HTTP/1.1 {error.status} {'Request Timeout' if error.status == 408 else 'Error'}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
        *(f"{name}: {value}" for name, value in error.headers.items()),
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


_HEAD_TIMEOUT = _raw_response(
    ApiError(408, "REQUEST_TIMEOUT", "the request head did not arrive in time", retriable=True)
)
_BODY_TIMEOUT = _raw_response(ApiError(408, "REQUEST_TIMEOUT", "the request body stalled", retriable=True))
_HEAD_TOO_LARGE = _raw_response(ApiError(431, "HEADERS_TOO_LARGE", "the request head is too large"))
_TOO_MANY = _raw_response(
    ApiError(
        503,
        "TOO_MANY_CONNECTIONS",
        "the server is at its connection limit",
        retriable=True,
        headers={"Retry-After": "1"},
    )
)


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits above (set per server by :func:`protocol_class`)."""

    limits: ClassVar[ConnectionLimits]
    fast: ClassVar[FastPath | None] = None  # the hot endpoints, answered without ASGI (``server.http.hot_cycle``)
    _last_refusal_log: ClassVar[float] = 0.0
    _refused: ClassVar[int] = 0

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._watchdog: asyncio.TimerHandle | None = None
        self._watchdog_at = 0.0
        self._phase = _HEAD
        self._head_due = 0.0  # the head must be complete by then
        self._idle_until = 0.0  # keep-alive: 0.0 once a byte of the next request came
        self._head_bytes = 0
        self._requests = 0
        self._body_started = 0.0
        self._body_progress = 0.0
        self._client_text: str | None = None  # "host:port" of the peer, for the trace of what it produces
        self._memo = HeadMemo()  # what this connection's last produce learnt from its head
        self._chunk: bytes | None = None  # the chunk that began the request being read
        self._lane: _Lane | None = None  # the head of a produce this connection may repeat
        self._polls: _Polls | None = None  # the head of a fetch it may repeat, with another query
        self._lane_reply: Callable[[], Reply] | None = None  # the lane's request in flight
        self._backlog = bytearray()  # bytes that came while it was
        self._closing = False
        self._certified: tuple[bytes, bytes] | None = None  # the header naming the client certificate's tenant

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.limits.max_connections:
            self.transport = transport  # connection_lost closes it
            transport.write(_TOO_MANY)
            transport.close()
            self._log_refusal()
            return
        super().connection_made(transport)
        self._client_text = f"{self.client[0]}:{self.client[1]}" if self.client else None
        certified = certificate_name(transport)
        # Every request of the connection says whom its client certificate names (server.tls).
        self._certified = None if certified is None else (_CERTIFICATE_HEADER, certified.encode("utf-8"))
        self._head_due = self.loop.time() + self.limits.header_timeout_s
        self._watch(self._head_due)

    def connection_lost(self, exc: Exception | None) -> None:
        self._unwatch()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lane_reply is not None:  # a repeated produce is being answered: what comes next waits for it
            self._backlog += data
            self.flow.pause_reading()
            return
        if self._phase != _HEAD:
            super().data_received(data)
            return
        lane = self._lane
        if (
            lane is not None
            and self._head_bytes == 0
            and len(data) == lane.size
            and data.startswith(lane.head)
            and (self.cycle is None or self.cycle.response_complete)
            and self._repeat(lane, data)
        ):
            return
        polls = self._polls
        if (
            polls is not None
            and self._head_bytes == 0
            and len(data) > len(polls.target) + len(polls.rest)
            and data.startswith(polls.target)
            and data.endswith(polls.rest)
            and (self.cycle is None or self.cycle.response_complete)
            and self._poll(polls, data[len(polls.target) : len(data) - len(polls.rest)])
        ):
            return
        self._idle_until = 0.0
        self._chunk = data if self._head_bytes == 0 else None  # a request that comes whole may be repeated
        # The chunk may end the head and carry a body: only a head still incomplete after it is too large.
        self._head_bytes += len(data)
        super().data_received(data)
        if self._phase == _HEAD and self._head_bytes > self.limits.max_header_bytes:
            self._close_with(_HEAD_TOO_LARGE)

    # ---------------------------------------------------------------- the repeated produce (the lane)
    #
    # A keep-alive producer sends the same request head again and again (only the body differs, and with the same
    # length, not even the content-length). Once a head has been parsed by httptools, routed, and its produce
    # answered without a task, a later request on this connection that arrives whole in one chunk, with that head
    # byte for byte, is the same request but for the body: it goes straight to the produce (``FastPath.answer_now``,
    # whose checks all run, the memo of the head's caller included), with no parser callbacks, cycle or scope.
    # Anything else, and anything the produce declines, goes through the parser as before.

    def _remember(self, chunk: bytes, cycle: HotCycle, size: int) -> None:
        """``cycle`` (a produce of ``size`` body bytes, answered from its flush) began with ``chunk``: if it came
        whole in it, keep its head for the lane (the next request with that head is told by its length alone)."""
        end = chunk.find(b"\r\n\r\n") + 4
        if (
            end < 4
            or size <= 0
            or len(chunk) != end + size  # pipelined, or framed otherwise (chunked adds its framing's bytes)
            or not cycle.keep_alive
            or self.access_log  # the lane writes no access log line
        ):
            return
        self._lane = _Lane(chunk[:end], len(chunk), cycle.hot, cycle.raw_headers)

    def _repeat(self, lane: _Lane, data: bytes) -> bool:
        """Produce the repeated request ``data`` through the lane; False (nothing done) if it must be parsed."""
        limit = self.limits.max_requests_per_connection
        if limit and self._requests + 1 >= limit:  # its answer must close the connection: the full path's
            return False
        assert self.fast is not None
        now = self.fast.answer_now(
            lane.hot, lane.raw_headers, data[len(lane.head) :], client=self._client_text, memo=self._memo
        )
        if isinstance(now, Declined):
            return False  # nothing was stored: the parser's path does it all
        metrics.repeated_head()
        self._requests += 1
        self._idle_until = 0.0
        self._phase = _APP
        if isinstance(now, Reply):
            self._lane_write(now)
        else:
            assert isinstance(now, PendingReply)  # the lane carries produces only
            self._lane_reply = now.reply
            now.durable.after(self._lane_answer)
        return True

    # A consumer sends the same fetch again and again but for its query (the offset moves): a later request on the
    # connection whose request line starts with the same method and path, whose query is plain (letters, digits and
    # ``=&_.-``, no escapes), and whose head after the target is byte for byte the last fetch's, arriving whole in
    # one chunk, is that fetch with another query. It goes to ``FastPath.answer_now`` at once; only an answer at
    # hand is taken there (a wait, or anything declined, goes through the parser, which asks again).

    def _remember_poll(self, chunk: bytes, cycle: HotCycle) -> None:
        """``cycle`` (a fetch answered without a task, or waiting without one) began with ``chunk``: if it came
        whole in it, keep its head for the next fetch with another query."""
        line_end = chunk.find(b"\r\n")
        start = chunk.find(b"?", 0, line_end) + 1  # the query, on the request line (not in a header's value)
        space = chunk.find(b" ", start, line_end)
        if (
            not chunk.startswith(b"GET /")
            or start <= 0
            or space < 0
            or not chunk.endswith(b"\r\n\r\n")
            or chunk.find(b"\r\n\r\n") != len(chunk) - 4  # pipelined with another request
            or any(name in _FRAMING for name, _ in cycle.raw_headers)  # a body (in a later chunk, maybe)
            or not cycle.keep_alive
            or self.access_log
        ):
            return
        self._polls = _Polls(chunk[:start], chunk[space:], cycle.hot, cycle.raw_headers)

    def _poll(self, polls: _Polls, query: bytes) -> bool:
        """Answer the repeated fetch whose query is ``query`` through the lane; False (nothing done) if it must be
        parsed."""
        limit = self.limits.max_requests_per_connection
        if len(query) > _MAX_LANE_QUERY or not _PLAIN_QUERY.fullmatch(query) or (limit and self._requests + 1 >= limit):
            return False
        assert self.fast is not None
        now = self.fast.answer_now(polls.hot, polls.raw_headers, b"", client=None, memo=self._memo, raw_query=query)
        if not isinstance(now, Reply):
            return False  # a wait, or declined: nothing was metered; the parser's path does it all
        metrics.repeated_head()
        self._requests += 1
        self._idle_until = 0.0
        self._phase = _APP
        self._lane_write(now)
        return True

    def _lane_answer(self) -> None:
        reply, self._lane_reply = self._lane_reply, None
        assert reply is not None
        self._lane_write(settled(reply))  # settled also when the client has gone: it meters the request

    def _lane_write(self, answer: Reply) -> None:
        if self.transport.is_closing():
            return
        write_reply(self.transport, answer, self.server_state.default_headers, keep_alive=not self._closing)
        self.server_state.total_requests += 1
        if self._closing:  # a graceful shutdown began while the request was in flight
            self.transport.close()
            return
        self._await_next_head()
        if self._backlog:
            backlog, self._backlog = bytes(self._backlog), bytearray()
            self.flow.resume_reading()
            self.data_received(backlog)

    def shutdown(self) -> None:
        if self._lane_reply is not None:  # uvicorn waits for the connection: it closes once answered
            self._closing = True
            return
        super().shutdown()
        if type(self.cycle) is HotCycle:
            self.cycle.stop_waiting()  # a long poll is answered now (and closes): the drain need not wait for it

    def on_message_begin(self) -> None:
        # uvicorn's, without its ASGI scope (a dict of ten keys and a copy of the app state per request): a hot
        # request never needs one, and any other gets it when its head is complete (_asgi_scope).
        self.url = b""
        self.expect_100_continue = False
        self.headers = []
        if self._phase == _APP:  # a pipelined request: its head starts now
            self._head_due = self.loop.time() + self.limits.header_timeout_s
            self._watch(self._head_due)
        self._phase = _HEAD

    def on_header(self, name: bytes, value: bytes) -> None:
        # uvicorn's, with one more name to drop: only the server says whom a certificate names.
        name = name.lower()
        if name == _CERTIFICATE_HEADER:
            return
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self._certified is not None:
            self.headers.append(self._certified)
        self._phase = _BODY
        self._head_bytes = 0
        self._body_started = self._body_progress = now = self.loop.time()
        limits = self.limits
        self._watch(now + min(limits.body_idle_timeout_s, limits.body_timeout_s))
        if not self._start_hot():
            self._asgi_scope()
            super().on_headers_complete()
        self._requests += 1
        limit = self.limits.max_requests_per_connection
        if limit and self._requests >= limit and self.cycle is not None:
            self.cycle.keep_alive = False

    def _asgi_scope(self) -> None:
        """uvicorn's scope for this request, made by uvicorn's ``on_message_begin`` (which also resets what the
        head's callbacks gathered: kept)."""
        url, headers, expect = self.url, self.headers, self.expect_100_continue
        super().on_message_begin()
        self.url, self.headers, self.expect_100_continue = url, headers, expect
        self.scope["headers"] = headers

    def _start_hot(self) -> bool:
        """Start a hot endpoint's request as a :class:`HotCycle` (no ASGI); False for anything else, which uvicorn
        hands to the ASGI app as usual."""
        fast = self.fast
        url = self.url
        # An origin-form target without escapes or a fragment (what clients send): split here, not by parse_url.
        if fast is None or url[:1] != b"/" or b"%" in url or b"#" in url or self.parser.should_upgrade():
            return False
        method = self.parser.get_method().decode("ascii")
        raw_path, _, query = url.partition(b"?")
        path = raw_path.decode("ascii")
        hot = route(method, path)
        if hot is None:
            return False
        http_version = self.parser.get_http_version()
        scope: dict[str, Any] = {
            "client": self.client,
            "method": method,
            "path": path,
            "http_version": http_version,
            "headers": self.headers,
        }
        existing = self.cycle
        self.cycle = HotCycle(
            fast,
            self._memo,
            hot,
            fast.body_limit(hot),
            query,
            scope=scope,
            client=self._client_text,
            transport=self.transport,
            flow=self.flow,
            access_logger=self.access_logger,
            access_log=self.access_log,
            default_headers=self.server_state.default_headers,
            expect_100_continue=self.expect_100_continue,
            keep_alive=http_version != "1.0" and self.parser.should_keep_alive(),
            on_response=self.on_response_complete,
            tasks=self.tasks,
        )
        if existing is None or existing.response_complete:
            if not self.cycle.deferred:  # a produce starts once its body is in (on_message_complete)
                self._start_asgi_task(self.cycle, self.app)
        else:  # pipelined behind a request still being answered: in turn, as uvicorn does
            self.cycle.deferred = False  # its task answers it when its turn comes, never before
            self.flow.pause_reading()
            self.pipeline.appendleft((self.cycle, self.app))
        return True

    def on_body(self, body: bytes) -> None:
        self._body_progress = self.loop.time()
        cycle = self.cycle
        if type(cycle) is HotCycle:
            # A hot request's body is read whole (its size was checked against the limit when its head came):
            # no pause and no wake-up of the handler per 64 KiB, as uvicorn does for ASGI's ``receive``.
            if not cycle.response_complete and cycle.take(body, self.flow) and cycle.deferred:
                cycle.deferred = False  # over the limit: the handler answers 413
                self._start_asgi_task(cycle, self.app)
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        cycle = self.cycle
        if type(cycle) is HotCycle:  # uvicorn's, without making the cycle's event if nothing waits on it
            if not cycle.response_complete:
                cycle.body_complete()
        else:
            super().on_message_complete()
        # Answered before the body was in (e.g. 413): on to the next head.
        if cycle is not None and cycle.response_complete:
            self._await_next_head()
            return
        self._phase = _APP  # no deadline while the app answers (a fetch may wait for messages)
        chunk, self._chunk = self._chunk, None
        if type(cycle) is HotCycle and cycle.deferred:
            size = len(cycle.body)
            if not cycle.answer_now():
                self._start_asgi_task(cycle, self.app)
            elif chunk is not None and cycle.hot.kind == "fetch":
                self._remember_poll(chunk, cycle)
            elif not cycle.response_complete and chunk is not None:  # appended, answered from its flush
                self._remember(chunk, cycle, size)

    def on_response_complete(self) -> None:
        # uvicorn's, without its keep-alive timer per response: the watchdog closes an idle connection.
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        # Not while a pipelined request (now self.cycle) is being read or answered.
        if self._phase == _APP and self.cycle.response_complete:
            self._await_next_head()

    def _await_next_head(self) -> None:
        # uvicorn's keep-alive closes an idle connection but any byte ends it (a lone CRLF every few seconds
        # would keep the connection for ever): the head must also be complete by its deadline.
        self._phase = _HEAD
        now = self.loop.time()
        self._idle_until = now + self.timeout_keep_alive
        self._head_due = self._idle_until + self.limits.header_timeout_s
        self._watch(self._idle_until)

    def _watch(self, at: float) -> None:
        """Have the watchdog look at the connection at ``at`` at the latest."""
        if self._watchdog is not None:
            if self._watchdog_at <= at:
                return
            self._watchdog.cancel()
        self._watchdog_at = at
        self._watchdog = self.loop.call_at(at, self._expired)

    def _unwatch(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    def _expired(self) -> None:
        self._watchdog = None
        if self.transport.is_closing():
            return
        now = self.loop.time()
        if self._phase == _HEAD:
            if self._idle_until and now >= self._idle_until:  # no byte of a next request: uvicorn's keep-alive
                self.transport.close()
                return
            if now >= self._head_due:
                idle = self.cycle is None or self.cycle.response_complete
                self._close_with(_HEAD_TIMEOUT if idle else b"")
                return
            self._watch(min(self._head_due, self._idle_until or self._head_due))
            return
        if self._phase != _BODY:
            return  # the app has the request: watched again once it is answered
        if self.flow.read_paused:  # we, not the client, hold the body up
            self._body_progress = now
        due = min(
            self._body_progress + self.limits.body_idle_timeout_s, self._body_started + self.limits.body_timeout_s
        )
        if now < due:
            self._watch(due)
            return
        started = self.cycle is not None and self.cycle.response_started
        self._close_with(b"" if started else _BODY_TIMEOUT)

    def _close_with(self, response: bytes) -> None:
        self._unwatch()
        if response:
            self.transport.write(response)
        self.transport.close()

    def _log_refusal(self) -> None:
        """At most one warning per 10 s: a flood must not also flood the log."""
        cls = GuardedHttpProtocol
        cls._refused += 1
        now = self.loop.time()
        if now - cls._last_refusal_log >= 10.0:
            log.warning(
                "at the connection limit (%d): refused %d connections", self.limits.max_connections, cls._refused
            )
            cls._last_refusal_log = now
            cls._refused = 0


class _Lane(NamedTuple):
    head: bytes  # the request head, byte for byte
    size: int  # the whole request's bytes: the head and its content-length
    hot: Route
    raw_headers: list[tuple[bytes, bytes]]


class _Polls(NamedTuple):
    target: bytes  # the request line up to its query: ``GET /v1/topics/t/partitions/0/messages?``
    rest: bytes  # from the space after the query to the end of the head, byte for byte
    hot: Route
    raw_headers: list[tuple[bytes, bytes]]


_CERTIFICATE_HEADER = CERTIFICATE_HEADER.encode("ascii")
_FRAMING = (b"content-length", b"transfer-encoding")  # header names as uvicorn keeps them (lower case)
_PLAIN_QUERY = re.compile(rb"[A-Za-z0-9_=&.\-]*")
_MAX_LANE_QUERY = 1024


def protocol_class(limits: ConnectionLimits, fast: FastPath | None = None) -> type[GuardedHttpProtocol]:
    """The protocol class to give uvicorn as ``http=``, with these limits; with ``fast`` (the app uvicorn runs), the
    hot endpoints are answered without ASGI."""

    class Configured(GuardedHttpProtocol):
        pass

    Configured.limits = limits
    Configured.fast = fast
    return Configured
