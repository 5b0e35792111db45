"""One request of a hot endpoint (produce, fetch, offsets), answered by the server's HTTP protocol without ASGI.

uvicorn turns every request into an ASGI conversation: a scope, ``receive``/``send`` message dicts, an event per
body chunk, each response header checked by two regular expressions. For a single-message produce that is a large
part of the request's cost (docs/performance.md). The protocol (``server.http.connections``) parses the request
with httptools as before and, for the hot endpoints, makes this cycle instead of uvicorn's: it has the same
attributes the protocol drives (body, more_body, message_event, response_complete, keep_alive, disconnected), so
keep-alive, pipelining, flow control and the connection limits work unchanged, but it calls
:meth:`FastPath.answer <server.http.fastpath.FastPath.answer>` directly and writes the answer as one buffer. The
handlers are the same functions FastAPI's routes call; the OpenAPI schema still documents them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, RequestResponseCycle

from server.errors import ApiError
from server.http.fastpath import Declined, FastPath, HeadMemo, Route, error_reply
from server.http.messages import FetchWait, PendingReply
from server.messaging.forwarder import JSON, Reply
from server.partition.loaded import LoadedPartition
from server.web import check_declared_length

__all__ = ["HotCycle", "settled", "write_reply"]

log = logging.getLogger("talos.server")


class HotCycle(RequestResponseCycle):
    """A hot request's cycle: ``run_asgi`` ignores the ASGI app and answers through :class:`FastPath`.

    It sets uvicorn's cycle attributes itself rather than through uvicorn's ``__init__``, and makes the
    ``asyncio.Event`` only if something waits for the body (a produce answered without a task never does)."""

    def __init__(
        self,
        fast: FastPath,
        memo: HeadMemo,
        hot: Route,
        body_limit: int,
        raw_query: bytes,
        *,
        scope: dict[str, Any],
        client: str | None,
        transport: asyncio.Transport,
        flow: FlowControl,
        access_logger: logging.Logger,
        access_log: bool,
        default_headers: list[tuple[bytes, bytes]],
        expect_100_continue: bool,
        keep_alive: bool,
        on_response: Callable[[], None],
        tasks: set[asyncio.Task[None]],
    ) -> None:
        self.scope = scope  # type: ignore[assignment]  # the few keys this cycle and the access log read
        self.transport = transport
        self.flow = flow
        self.logger = log
        self.access_logger = access_logger
        self.access_log = access_log
        self.default_headers = default_headers
        self.on_response = on_response
        self._event: asyncio.Event | None = None
        self.disconnected = False
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = expect_100_continue
        self.body = bytearray()
        self.more_body = True
        self.response_started = False
        self.response_complete = False
        self.chunked_encoding = None
        self.expected_content_length = 0
        self._fast = fast
        self.hot = hot
        self._body_limit = body_limit
        self._raw_query = raw_query
        self._client = client
        self._memo = memo
        self.raw_headers: list[tuple[bytes, bytes]] = scope["headers"]
        self._declined: Declined | None = None
        self._reply: Callable[[], Reply] = _nothing_to_say
        self._tasks = tasks
        self._timer: asyncio.TimerHandle | None = None  # a long poll's end
        self._wait_until: float | None = None  # when a long poll that began to wait here must be answered
        self._waiting_on: LoadedPartition | None = None  # the partition a long poll waits for
        # A produce waits for its whole body before anything runs (a fetch, for the end of its head): then
        # :meth:`answer_now` may answer it without a task (the protocol starts ``run_asgi`` only if it cannot, or
        # if the body goes over the limit). One that declares a body over the limit is refused at once, by
        # ``run_asgi``.
        self.deferred = (
            hot.kind in ("produce", "fetch") and not expect_100_continue and _declared(scope["headers"]) <= body_limit
        )

    @property
    def message_event(self) -> asyncio.Event:
        """Set when the body is complete or over the limit, or the client went away (made when first used)."""
        if self._event is None:
            self._event = asyncio.Event()
        return self._event

    @message_event.setter
    def message_event(self, event: asyncio.Event) -> None:
        self._event = event

    def body_complete(self) -> None:
        """The protocol read the last of the body: wake whoever waits for it."""
        self.more_body = False
        self._wake()

    def _wake(self) -> None:
        if self._event is not None:  # nobody made it: nobody waits
            self._event.set()

    def take(self, chunk: bytes, flow: FlowControl) -> bool:
        """A chunk of the body, from the protocol; True once the body is over the limit. The handler is woken
        once the body is complete (by ``on_message_complete``) or over the limit, not per chunk."""
        self.body += chunk
        if len(self.body) > self._body_limit:
            flow.pause_reading()
            self.message_event.set()
            return True
        return False

    def answer_now(self) -> bool:
        """Answer the request, its body complete, without a task: at once, from its flush's callback, or (a long
        poll) once its partition has flushed or its wait is over; False if it needs ``run_asgi`` (which then does
        it all: nothing was stored)."""
        self.deferred = False
        now = self._now(waited=False)
        if isinstance(now, Declined):
            self._declined = now  # run_asgi goes on from there
            return False
        self.body = bytearray()
        self._take(now)
        return True

    def _now(self, *, waited: bool) -> Reply | PendingReply | FetchWait | Declined:
        try:
            return self._fast.answer_now(
                self.hot,
                self.raw_headers,
                self.body,
                client=self._client,
                memo=self._memo,
                raw_query=self._raw_query,
                waited=waited,
            )
        except Exception:
            log.exception("unexpected error in a hot request")
            return _INTERNAL

    def _take(self, now: Reply | PendingReply | FetchWait) -> None:
        if isinstance(now, Reply):
            self._respond(now)
            self.on_response = _nothing
        elif isinstance(now, FetchWait):
            if self._timer is None:  # the wait begins: its end is the request's
                self._timer = asyncio.get_running_loop().call_at(now.deadline, self._timed_out)
                self._wait_until = now.deadline
            self._waiting_on = now.partition
            now.partition.when_data(self._data_came)
        else:
            self._reply = now.reply
            now.durable.after(self._durable)

    # A long poll waits without a task: the partition calls it back after its next flush, the timer at the end of
    # its wait, whichever comes first; each looks again, as the task's wait (``LoadedPartition.wait_for_data``)
    # would. The task path takes over only if the fetch then needs an await (the partition stopped, say).

    def stop_waiting(self) -> None:
        """The server is shutting down: a long poll waiting without a task is answered now, with what there is."""
        if self._timer is not None:
            self._timer.cancel()
            self._timed_out()

    def _data_came(self) -> None:
        self._waiting_on = None
        self._look_again(waited=False)

    def _timed_out(self) -> None:
        self._timer = None
        if self._waiting_on is not None:
            self._waiting_on.forget_waiting(self._data_came)
            self._waiting_on = None
        self._look_again(waited=True)

    def _look_again(self, *, waited: bool) -> None:
        if self.response_complete:
            return
        now = None if self.disconnected else self._now(waited=waited)
        # Still nothing at its offset: on waiting, to the same end (``_take`` keeps the timer); else the wait is over.
        if not isinstance(now, FetchWait) and self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if now is None:  # the client went away
            self.on_response = _nothing
        elif isinstance(now, Declined):
            self._declined = now
            task = asyncio.get_running_loop().create_task(self.run_asgi(None))
            task.add_done_callback(self._tasks.discard)
            self._tasks.add(task)  # uvicorn's shutdown waits for it, as for the tasks it starts
        else:
            self._take(now)

    def _durable(self) -> None:
        answer = settled(self._reply)
        if not self.disconnected:
            self._respond(answer)
        self.on_response = _nothing

    async def run_asgi(self, app: object) -> None:
        try:
            if self._declined is not None and self._declined.headers is not None:
                headers, principal = self._declined.headers, self._declined.principal
            else:
                headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in self.scope["headers"]}
                principal = None
            try:
                client = self._client if self.hot.kind == "produce" else None
                reply = await self._fast.answer(
                    self.hot,
                    headers,
                    self._raw_query,
                    self._read_body,
                    client=client,
                    principal=principal,
                    wait_until=self._wait_until,
                )
            except ConnectionResetError:
                return
            if not self.disconnected:
                self._respond(reply)
        except Exception:  # answer() answers errors itself: this is a bug, and the connection's state unknown
            log.exception("unexpected error in a hot request")
            self.transport.close()
        finally:
            self.on_response = _nothing

    async def _read_body(self, limit: int, declared: str | None) -> bytearray:
        check_declared_length(limit, declared)
        while self.more_body:
            if len(self.body) > limit:
                raise ApiError(413, "REQUEST_TOO_LARGE", f"request body over the limit of {limit} bytes")
            if self.waiting_for_100_continue and not self.transport.is_closing():
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                self.waiting_for_100_continue = False
            if self.disconnected:
                raise ConnectionResetError("client went away")
            self.flow.resume_reading()
            await self.message_event.wait()
            self.message_event.clear()
        if self.disconnected:
            raise ConnectionResetError("client went away")
        if len(self.body) > limit:
            raise ApiError(413, "REQUEST_TOO_LARGE", f"request body over the limit of {limit} bytes")
        body, self.body = self.body, bytearray()
        return body  # the bytearray itself: a batch produce stores it without a copy

    def _respond(self, reply: Reply) -> None:
        self.response_started = True
        self.waiting_for_100_continue = False
        if self.access_log:
            self.access_logger.info(
                '%s - "%s %s HTTP/%s" %d',
                client[0] if (client := self.scope.get("client")) else "-",
                self.scope["method"],
                self.scope["path"],
                self.scope["http_version"],
                reply.status,
            )
        write_reply(self.transport, reply, self.default_headers, keep_alive=self.keep_alive)
        self.response_complete = True
        self._wake()
        if not self.keep_alive:
            self.transport.close()
        self.on_response()


def settled(reply: Callable[[], Reply]) -> Reply:
    """The answer of a produce whose flush is over (``PendingReply.reply``), an error answered as one."""
    try:
        return reply()
    except ApiError as exc:
        return error_reply(exc)
    except Exception:
        log.exception("unexpected error in a hot request")
        return _INTERNAL


def _head_start(status: int, default_headers: list[tuple[bytes, bytes]], content_type: str) -> list[bytes]:
    """An answer's head up to its content-length's value."""
    head = [STATUS_LINE[status]]
    for default, value in default_headers:
        head += (default, b": ", value, b"\r\n")
    head += (b"content-type: ", content_type.encode(), b"\r\ncontent-length: ")
    return head


_ok_head: list[Any] = [None, b""]  # uvicorn's default headers, and the head of a 200 JSON answer made with them


def write_reply(
    transport: asyncio.Transport, reply: Reply, default_headers: list[tuple[bytes, bytes]], *, keep_alive: bool
) -> None:
    """The answer as HTTP/1.1: one write (one system call), or for a large body, the head and the body without a
    copy of it."""
    body = reply.body
    if reply.status == 200 and keep_alive and not reply.headers and reply.content_type == JSON and len(body) < 65536:
        # A produce's answer: the head up to the length is the same until uvicorn's default headers (the date)
        # are replaced, once a second.
        if _ok_head[0] is not default_headers:
            start = _head_start(200, default_headers, JSON)
            _ok_head[:] = (default_headers, b"".join(start))
        transport.write(b"".join((_ok_head[1], b"%d\r\n\r\n" % len(body), body)))
        return
    head = _head_start(reply.status, default_headers, reply.content_type)
    head.append(b"%d" % len(body))
    for name, text in reply.headers.items():
        head += (b"\r\n", name.encode("latin-1"), b": ", text.encode("latin-1"))
    if not keep_alive:
        head.append(b"\r\nconnection: close")
    head.append(b"\r\n\r\n")
    if len(reply.body) < 65536:
        head.append(reply.body)
        transport.write(b"".join(head))
    else:  # a large fetch
        transport.writelines([b"".join(head), reply.body])


def _nothing() -> None:
    pass


def _nothing_to_say() -> Reply:
    raise AssertionError("a hot request answered from its flush without a reply")


def _declared(headers: Iterable[tuple[bytes, bytes]]) -> int:
    """The request's ``content-length`` (0 if none, or not a number: ``run_asgi`` answers that)."""
    for name, value in headers:
        if name == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


_INTERNAL = error_reply(ApiError(500, "INTERNAL", "internal error", retriable=True))
