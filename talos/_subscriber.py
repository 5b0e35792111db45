"""Push subscriptions: ``Subscriber`` and ``AsyncSubscriber`` receive a subscription's messages over a
WebSocket (``GET /v1/subscribe``) and settle each one on its own::

    with Subscriber("http://127.0.0.1:8080", "billing", topic="invoices") as subscriber:
        for message in subscriber:
            handle(message.value)
            message.ack()          # or message.nack(delay=5.0), message.extend(30.0)

Many subscribers of one subscription share its messages message by message. A message not acknowledged
within the subscription's ack timeout goes to another subscriber; after ``max_deliveries`` deliveries it
goes to the dead-letter topic ``__sub-dlq.<name>``. The client keeps no offsets.

``ack()`` returns a future that resolves to True once the server has written the acknowledgement, or False
if the message had gone to another subscriber meanwhile (it was redelivered after the ack timeout). After a
lost connection the subscriber connects again (to the next of its URLs) and sends whatever was not yet
confirmed again; the server confirms an acknowledgement it already holds.

One sans-I/O core (:class:`_Core`) turns frames into messages and settlements into frames; the two clients
only differ in how they wait.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import queue
import ssl
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Self, TypedDict, Unpack

import orjson
from websockets.asyncio.client import ClientConnection as AsyncConnection
from websockets.asyncio.client import connect as connect_async
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from talos._errors import ApiError, TransportError, api_error
from talos._tls import TLSOption, client_context
from talos._transport import _token

__all__ = ["AsyncSubscriber", "SubscribedMessage", "Subscriber", "SubscriberOptions"]


@dataclass(eq=False)
class SubscribedMessage:
    """A pushed message. Settle it once: :meth:`ack`, :meth:`nack` or (to keep it longer) :meth:`extend`."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]  # as a Consumer's Message has them
    delivery: int  # 1 on the first delivery, 2 on the second, ...
    _settle: Callable[[str, SubscribedMessage, int], Any] = field(repr=False, default=lambda *_: None)

    def ack(self) -> Any:
        """Done with it. A future: True once the server has written it, False if it went to another subscriber."""
        return self._settle("ack", self, 0)

    def nack(self, delay: float = 0.0) -> Any:
        """Give it back, to be delivered again (maybe to another subscriber) after ``delay`` seconds."""
        return self._settle("nack", self, int(delay * 1000))

    def extend(self, seconds: float) -> Any:
        """Keep it for ``seconds`` from now before it may go to another subscriber."""
        return self._settle("extend", self, int(seconds * 1000))


def _bytes(doc: dict[str, Any], name: str) -> bytes | None:
    if name + "_b64" in doc:
        return base64.b64decode(doc[name + "_b64"])
    value = doc.get(name)
    return None if value is None else str(value).encode()


def _header_values(raw: dict[str, Any]) -> tuple[tuple[str, bytes | None], ...]:
    return tuple((k, None if v is None else str(v).encode()) for k, v in raw.items())


def websocket_url(url: str, subscription: str, params: dict[str, str]) -> str:
    parts = urllib.parse.urlsplit(url.rstrip("/"))
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    query = urllib.parse.urlencode({"subscription": subscription, **params})
    return urllib.parse.urlunsplit((scheme, parts.netloc, parts.path + "/v1/subscribe", query, ""))


Key = tuple[str, int, int, int]  # op, partition, offset, delivery: what a confirmation names


def _message(doc: dict[str, Any], settle: Callable[[str, SubscribedMessage, int], Any]) -> SubscribedMessage:
    return SubscribedMessage(
        topic=doc["topic"],
        partition=int(doc["partition"]),
        offset=int(doc["offset"]),
        timestamp=int(doc.get("timestamp", 0)),
        key=_bytes(doc, "key"),
        value=_bytes(doc, "value"),
        headers=_header_values(doc.get("headers") or {}),
        delivery=int(doc["delivery"]),
        _settle=settle,
    )


class _Core:
    """What both subscribers do between the socket and the caller: frames in, messages out; settlements in,
    frames out. Settlements wait in an outbox, so all made while a frame was being sent go in the next one.
    ``future`` makes the settlement futures (concurrent or asyncio)."""

    def __init__(
        self,
        urls: str | Sequence[str],
        subscription: str,
        *,
        token: str | None,
        window: int,
        create: dict[str, object],
        future: Callable[[], Any],
        follow_coordinator: bool,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.urls = [urls] if isinstance(urls, str) else list(urls)
        if not self.urls:
            raise ValueError("at least one URL")
        params = {"window": str(window)}
        params.update(
            {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in create.items() if v is not None}
        )
        self._params = params
        self.subscription = subscription
        self.token = _token(token)
        self._tls = tls
        self._future = future
        self.pending: dict[Key, tuple[Any, int]] = {}  # settlements not yet confirmed -> (future, ms)
        self._outbox: dict[Key, None] = {}  # settlements to send (again)
        self.last_error: dict[str, Any] = {}
        self.follow = follow_coordinator
        self.redirect: str | None = None  # connect there next (set by a hello naming another coordinator)
        self._hops = 0
        self._turn = 0

    def next_url(self) -> str:
        if self.redirect is not None:  # the coordinator a server named: one hop fewer for every message
            base, self.redirect = self.redirect, None
            return websocket_url(base, self.subscription, self._params)
        url = websocket_url(self.urls[self._turn % len(self.urls)], self.subscription, self._params)
        self._turn += 1
        return url

    def tls_for(self, url: str) -> dict[str, Any]:
        """``connect``'s ``ssl`` option for ``url`` (websockets refuses one for a ``ws://`` URL)."""
        return {"ssl": self._tls} if self._tls is not None and url.startswith("wss:") else {}

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def settle(self, op: str, message: SubscribedMessage, ms: int) -> Any:
        key = (op, message.partition, message.offset, message.delivery)
        found = self.pending.get(key)
        if found is None:  # (the same settlement again before its confirmation: the first one stands)
            found = self.pending[key] = (self._future(), ms)
            self._outbox[key] = None
        return found[0]

    def send_all_again(self) -> None:
        """On a new connection: everything not yet confirmed goes out again."""
        self._outbox = dict.fromkeys(self.pending)

    def take_frames(self) -> list[str]:
        """The outbox as frames, one per kind of settlement."""
        groups: dict[tuple[str, int], list[dict[str, int]]] = {}
        for key in self._outbox:
            if key not in self.pending:
                continue  # confirmed meanwhile
            op, partition, offset, delivery = key
            ms = self.pending[key][1]
            groups.setdefault((op, ms), []).append({"partition": partition, "offset": offset, "delivery": delivery})
        self._outbox = {}
        frames = []
        for (op, ms), items in groups.items():
            doc: dict[str, object] = {"type": op, "messages": items}
            if op == "nack":
                doc["delay_ms"] = ms
            elif op == "extend":
                doc["ms"] = ms
            frames.append(orjson.dumps(doc).decode())
        return frames

    def on_frame(
        self, raw: str | bytes, settle: Callable[[str, SubscribedMessage, int], Any]
    ) -> list[SubscribedMessage]:
        """The messages a frame brings (none for a confirmation or an error)."""
        doc = orjson.loads(raw)
        kind = doc.get("type")
        if kind == "messages":
            return [_message(item, settle) for item in doc.get("messages", [])]
        if kind == "settled":
            op = doc["op"]
            for result in doc.get("results", []):
                key = (op, int(result["partition"]), int(result["offset"]), int(result["delivery"]))
                if key not in self.pending:
                    continue
                if result.get("status") == "error":  # the server could not now (its coordinator moving)
                    self._outbox[key] = None
                    continue
                future = self.pending.pop(key)[0]
                if not future.done():
                    future.set_result(result.get("status") == "ok")
        elif kind == "hello":  # the first frame: which server coordinates the subscription
            target = doc.get("coordinator_url")
            if self.follow and not doc.get("local") and isinstance(target, str) and self._hops < 2:
                self.redirect = target
                self._hops += 1
            elif doc.get("local"):
                self._hops = 0
        elif kind == "error":  # a frame of ours it refused, or (followed by a close) why it closes
            self.last_error = doc.get("error") or {}
        return []

    @property
    def has_outbox(self) -> bool:
        return bool(self._outbox)

    def close_error(self, code: int | None) -> ApiError | None:
        """The error a close code from the server stands for (4000 + an HTTP status); None for a plain close."""
        if code is None or not 4000 <= code < 4600:
            return None
        error = {"code": "CLOSED", "message": f"the server closed the subscription ({code})", **self.last_error}
        return api_error(code - 4000, {"error": error})

    def fail_all(self, exc: BaseException) -> None:
        for future, _ms in self.pending.values():
            if not future.done():
                future.set_exception(exc)
        self.pending.clear()
        self._outbox = {}


_END = object()  # the reader stopped: the error in ``_error``, or closed


class SubscriberOptions(TypedDict, total=False):
    """The keyword options of :class:`Subscriber` and :class:`AsyncSubscriber`.

    ``topic`` (and the settings after it: ``ack_timeout`` seconds, ``max_deliveries``, ``key_ordered``,
    ``start``) makes the subscription if it does not exist yet. ``token``: else ``TALOS_TOKEN``. ``window``:
    how many unsettled messages it may hold (100). ``reconnect_backoff`` (0.5 s) and ``open_timeout`` (10 s)
    for connections. ``follow_coordinator`` (True): connect to the server coordinating the subscription when
    the first one names it, one hop fewer per message (off where clients cannot reach the servers' advertised
    URLs). ``tls``: for ``https://`` servers (``wss://``), as the other clients take it (``talos.TLS``)."""

    topic: str | None
    token: str | None
    window: int
    ack_timeout: float | None
    max_deliveries: int | None
    key_ordered: bool | None
    start: str | None
    reconnect_backoff: float
    open_timeout: float
    follow_coordinator: bool
    tls: TLSOption


def _configure(
    url: str | Sequence[str], subscription: str, future: Callable[[], Any], options: SubscriberOptions
) -> tuple[_Core, float, float]:
    """The core, reconnect backoff and open timeout of a subscriber made with ``options``."""
    unknown = set(options) - set(SubscriberOptions.__annotations__)
    if unknown:
        raise TypeError(f"unknown options: {', '.join(sorted(unknown))}")
    ack_timeout = options.get("ack_timeout")
    create: dict[str, object] = {
        "topic": options.get("topic"),
        "ack_timeout_ms": None if ack_timeout is None else int(ack_timeout * 1000),
        "max_deliveries": options.get("max_deliveries"),
        "key_ordered": options.get("key_ordered"),
        "start": options.get("start"),
    }
    core = _Core(
        url,
        subscription,
        token=options.get("token"),
        window=options.get("window", 100),
        create=create,
        future=future,
        follow_coordinator=options.get("follow_coordinator", True),
        tls=client_context(options.get("tls")),
    )
    return core, options.get("reconnect_backoff", 0.5), options.get("open_timeout", 10.0)


def _handshake_error(exc: BaseException) -> ApiError | None:
    """A refused handshake that trying again will not mend (a 4xx answer)."""
    if isinstance(exc, InvalidStatus) and exc.response.status_code < 500:
        return api_error(exc.response.status_code, None)
    return None


class Subscriber:
    """A blocking subscriber: iterate it, or call :meth:`receive`. A thread reads the socket, so ``ack()``'s
    future resolves while the caller works. ``url``: one server's URL or several (any server of a cluster;
    the next is tried after a lost connection). Options: :class:`SubscriberOptions`."""

    def __init__(self, url: str | Sequence[str], subscription: str, **options: Unpack[SubscriberOptions]) -> None:
        self._core, self._backoff, self._open_timeout = _configure(
            url, subscription, concurrent.futures.Future, options
        )
        self._lock = threading.Lock()
        self._received: queue.Queue[Any] = queue.Queue()
        self._ws: ClientConnection | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._to_send = threading.Event()
        self._sender: threading.Thread | None = None
        self._error: BaseException | None = None

    def __enter__(self) -> Self:
        self._begin()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[SubscribedMessage]:
        while not self._stopping.is_set():
            message = self.receive(timeout=None)
            if message is not None:
                yield message

    def _begin(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._read, name="talos-subscriber", daemon=True)
            self._thread.start()
            self._sender = threading.Thread(target=self._send, name="talos-subscriber-acks", daemon=True)
            self._sender.start()

    def _read(self) -> None:
        try:
            while not self._stopping.is_set():
                ws = self._open()
                if ws is None:
                    return
                with contextlib.suppress(ConnectionClosed), ws:  # closed when the loop ends
                    self._relay(ws)
                error = self._core.close_error(ws.close_code)
                if error is not None and not (error.status >= 500 or error.retriable):
                    raise error
                with self._lock:
                    self._ws = None
                if self._core.redirect is None:
                    self._stopping.wait(self._backoff)
        except BaseException as exc:  # handed to the caller by receive()
            self._error = exc
            with self._lock:
                self._core.fail_all(exc)
        finally:
            self._received.put(_END)

    def _relay(self, ws: ClientConnection) -> None:
        for raw in ws:
            with self._lock:
                messages = self._core.on_frame(raw, self._settle)
                outbox = self._core.has_outbox
            if self._core.redirect is not None:
                ws.close()  # and connect to the coordinator (nothing was delivered here yet)
                return
            if outbox:
                self._to_send.set()
            for message in messages:
                self._received.put(message)

    def _send(self) -> None:
        """The sender thread: whatever was settled while it sent the last frames goes in the next ones."""
        while not self._stopping.is_set():
            self._to_send.wait()
            self._to_send.clear()
            with self._lock:
                ws = self._ws
                frames = self._core.take_frames() if ws is not None else []
            if ws is None:
                continue  # sent with everything unconfirmed when the next connection opens
            with contextlib.suppress(ConnectionClosed):
                for frame in frames:
                    ws.send(frame)

    def _open(self) -> ClientConnection | None:
        while not self._stopping.is_set():
            url = self._core.next_url()
            try:
                ws: ClientConnection = connect(
                    url,
                    additional_headers=self._core.headers(),
                    open_timeout=self._open_timeout,
                    compression=None,
                    **self._core.tls_for(url),
                )
            except (OSError, InvalidHandshake, TimeoutError) as exc:
                refused = _handshake_error(exc)
                if refused is not None:
                    raise refused from exc
                self._stopping.wait(self._backoff)
                continue
            with self._lock:
                self._ws = ws
                self._core.send_all_again()
            self._to_send.set()
            return ws
        return None

    def receive(self, timeout: float | None = None) -> SubscribedMessage | None:
        """The next message, or None if none came within ``timeout`` seconds (None: wait for ever)."""
        self._begin()
        try:
            item = self._received.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is _END:
            self._received.put(_END)  # for the next call too
            if self._error is not None:
                raise self._error
            raise TransportError("the subscriber is closed")
        return item  # type: ignore[no-any-return]

    def _settle(self, op: str, message: SubscribedMessage, ms: int) -> concurrent.futures.Future[bool]:
        with self._lock:
            future = self._core.settle(op, message, ms)
        self._to_send.set()
        return future  # type: ignore[no-any-return]

    def close(self, timeout: float = 5.0) -> None:
        """Wait (up to ``timeout``) until the settlements sent are confirmed, then close; the messages not
        settled go to the other subscribers at once."""
        deadline = time.monotonic() + timeout
        while self._thread is not None and self._thread.is_alive() and time.monotonic() < deadline:
            with self._lock:
                if not self._core.pending:
                    break
            time.sleep(0.01)
        self._stopping.set()
        self._to_send.set()
        with self._lock:
            ws, self._ws = self._ws, None
        if ws is not None:
            ws.close()
        for thread in (self._thread, self._sender):
            if thread is not None:
                thread.join(timeout=max(1.0, timeout))


class AsyncSubscriber:
    """The asyncio twin of :class:`Subscriber` (``async for message in subscriber``; ``await message.ack()``)."""

    def __init__(self, url: str | Sequence[str], subscription: str, **options: Unpack[SubscriberOptions]) -> None:
        self._core, self._backoff, self._open_timeout = _configure(url, subscription, self._new_future, options)
        self._received: asyncio.Queue[Any] = asyncio.Queue()
        self._ws: AsyncConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self._sender: asyncio.Task[None] | None = None
        self._to_send = asyncio.Event()
        self._stopping = False
        self._error: BaseException | None = None

    @staticmethod
    def _new_future() -> asyncio.Future[bool]:
        return asyncio.get_running_loop().create_future()

    async def __aenter__(self) -> Self:
        self._begin()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def __aiter__(self) -> AsyncIterator[SubscribedMessage]:
        while not self._stopping:
            message = await self.receive(timeout=None)
            if message is not None:
                yield message

    def _begin(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._read())
            self._sender = asyncio.get_running_loop().create_task(self._send())

    async def _read(self) -> None:
        try:
            while not self._stopping:
                ws = await self._open()
                with contextlib.suppress(ConnectionClosed):
                    async with ws:  # closed when the loop ends
                        async for raw in ws:
                            for message in self._core.on_frame(raw, self._settle):
                                self._received.put_nowait(message)
                            if self._core.redirect is not None:
                                break  # and connect to the coordinator (nothing was delivered here yet)
                            if self._core.has_outbox:
                                self._to_send.set()
                error = self._core.close_error(ws.close_code)
                if error is not None and not (error.status >= 500 or error.retriable):
                    raise error
                self._ws = None
                if not self._stopping and self._core.redirect is None:
                    await asyncio.sleep(self._backoff)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._error = exc
            self._core.fail_all(exc)
        finally:
            self._received.put_nowait(_END)

    async def _open(self) -> AsyncConnection:
        while True:
            url = self._core.next_url()
            try:
                ws = await connect_async(
                    url,
                    additional_headers=self._core.headers(),
                    open_timeout=self._open_timeout,
                    compression=None,
                    **self._core.tls_for(url),
                )
            except (OSError, InvalidHandshake, TimeoutError) as exc:
                refused = _handshake_error(exc)
                if refused is not None:
                    raise refused from exc
                await asyncio.sleep(self._backoff)
                continue
            self._ws = ws
            self._core.send_all_again()
            self._to_send.set()
            return ws

    async def receive(self, timeout: float | None = None) -> SubscribedMessage | None:
        self._begin()
        try:
            item = await asyncio.wait_for(self._received.get(), timeout)
        except TimeoutError:
            return None
        if item is _END:
            self._received.put_nowait(_END)
            if self._error is not None:
                raise self._error
            raise TransportError("the subscriber is closed")
        return item  # type: ignore[no-any-return]

    def _settle(self, op: str, message: SubscribedMessage, ms: int) -> asyncio.Future[bool]:
        future = self._core.settle(op, message, ms)
        self._to_send.set()
        return future  # type: ignore[no-any-return]

    async def _send(self) -> None:
        while True:
            await self._to_send.wait()
            self._to_send.clear()
            ws = self._ws
            if ws is None:
                continue  # sent with everything unconfirmed when the next connection opens
            with contextlib.suppress(ConnectionClosed):
                for frame in self._core.take_frames():
                    await ws.send(frame)

    async def close(self, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while self._task is not None and not self._task.done() and self._core.pending:
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.01)
        self._stopping = True
        if self._ws is not None:
            await self._ws.close()
            self._ws = None
        for task in (self._task, self._sender):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
