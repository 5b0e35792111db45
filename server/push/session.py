"""One subscriber's WebSocket (``GET /v1/subscribe``): messages pushed to it as they arrive, its
acknowledgements relayed to the coordinator.

Frames are JSON text. The server sends:

- ``{"type": "messages", "messages": [{topic, partition, offset, timestamp, key | key_b64, value | value_b64,
  headers, delivery}, ...]}``: what one pull leased, in one frame rather than one per message, since a frame's
  cost in the server's WebSocket layer was most of a pushed message's;
- ``{"type": "settled", "op", "results": [{partition, offset, delivery, status}]}`` once the coordinator has
  written what the subscriber settled (status ``ok``; ``stale``: that delivery is over, the message went out
  again or was settled otherwise; ``unknown``: never delivered; or ``error`` with ``error``, to send again if
  retriable; docs/subscriptions.md, "Settlement statuses");
- ``{"type": "error", "error": {code, message, retriable}}``.

The subscriber sends ``{"type": "ack" | "nack" | "extend", partition, offset, delivery}`` or the same with
``"messages": [{partition, offset, delivery}, ...]``, with ``delay_ms`` (nack: delivered again after it) or
``ms`` (extend: the lease ends that long from now; 0 or none: the ack timeout); and ``{"type": "window", "size": n}``.

Flow control is a window (credit): at most ``window`` delivered messages are unsettled at the subscriber;
the next are pulled only as it settles some. A subscriber that closes its connection gives its unsettled
messages back at once; one that stops answering (paused, partitioned) holds them until ``ack_timeout_ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import orjson
from starlette.websockets import WebSocket, WebSocketDisconnect

from server.errors import ApiError
from server.subscriptions.link import CoordinatorLink
from server.subscriptions.making import MAX_WINDOW

__all__ = ["MAX_WINDOW", "OPS", "Session", "error_frame"]

log = logging.getLogger("talos.subscriptions")

OPS = ("ack", "nack", "extend")
_PULL_WAIT_S = 10.0
_MAX_PULL = 500
_BACKOFF_S = 0.2
_MAX_FRAME = 1024 * 1024

Item = tuple[int, int, int]  # partition, offset, delivery


def error_frame(exc: ApiError) -> bytes:
    return orjson.dumps(
        {"type": "error", "error": {"code": exc.code, "message": exc.message, "retriable": exc.retriable}}
    )


def _items(doc: dict[str, Any]) -> list[Item]:
    raw = doc.get("messages")
    listed = raw if isinstance(raw, list) else [doc]
    if len(listed) > MAX_WINDOW:
        raise ApiError(400, "INVALID_REQUEST", f"at most {MAX_WINDOW} messages per frame")
    out = []
    for item in listed:
        if not isinstance(item, dict):
            raise ApiError(400, "INVALID_REQUEST", "each message is an object {partition, offset, delivery}")
        values = (item.get("partition"), item.get("offset"), item.get("delivery"))
        if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63 for v in values):
            raise ApiError(400, "INVALID_REQUEST", "partition, offset and delivery are non-negative integers")
        out.append((int(values[0]), int(values[1]), int(values[2])))  # type: ignore[arg-type]
    return out


def _ms(doc: dict[str, Any], name: str) -> int:
    value = doc.get(name, 0)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 7 * 24 * 3600 * 1000:
        raise ApiError(400, "INVALID_REQUEST", f"{name} must be an integer between 0 and {7 * 24 * 3600 * 1000}")
    return value


class Session:
    def __init__(self, ws: WebSocket, link: CoordinatorLink, holder: str, window: int) -> None:
        self._ws = ws
        self._link = link
        self._holder = holder
        self._window = window
        self._outstanding: set[Item] = set()
        self._credit = asyncio.Event()
        self._queued: dict[tuple[str, int], list[Item]] = {}
        self._has_queued = asyncio.Event()
        self._send_lock = asyncio.Lock()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(self._push()), loop.create_task(self._receive()), loop.create_task(self._settle())]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                exc = None if task.cancelled() else task.exception()
                if exc is not None and not isinstance(exc, WebSocketDisconnect | ConnectionError):
                    log.warning("subscriber %s: %r", self._holder, exc)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
            with contextlib.suppress(ApiError, OSError):
                await self._link.release(self._holder)

    async def _send(self, frame: bytes) -> None:
        async with self._send_lock:
            await self._ws.send_text(frame.decode())

    async def _push(self) -> None:
        while True:
            room = self._window - len(self._outstanding)
            if room <= 0:
                self._credit.clear()
                await self._credit.wait()
                continue
            try:
                found = await self._link.pull(self._holder, min(room, _MAX_PULL), _PULL_WAIT_S)
            except ApiError as exc:
                if not exc.retriable:
                    await self._send(error_frame(exc))
                    await self._ws.close(code=4000 + exc.status if 400 <= exc.status < 600 else 1011)
                    return
                await asyncio.sleep(_BACKOFF_S)  # the coordinator is moving or its server is down
                continue
            if not found:
                continue
            for item in found:
                self._outstanding.add((int(item["partition"]), int(item["offset"]), int(item["delivery"])))  # type: ignore[call-overload]
            await self._send(orjson.dumps({"type": "messages", "messages": found}))  # one frame per pull

    async def _receive(self) -> None:
        while True:
            raw = await self._ws.receive_text()
            try:
                if len(raw) > _MAX_FRAME:
                    raise ApiError(413, "REQUEST_TOO_LARGE", f"a frame over {_MAX_FRAME} bytes")
                try:
                    doc = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    raise ApiError(400, "INVALID_REQUEST", "a frame is one JSON object") from None
                if not isinstance(doc, dict):
                    raise ApiError(400, "INVALID_REQUEST", "a frame is one JSON object")
                kind = doc.get("type")
                if kind in OPS:
                    ms = _ms(doc, "delay_ms") if kind == "nack" else _ms(doc, "ms")  # extend, 0: the ack timeout
                    self._queued.setdefault((str(kind), 0 if kind == "ack" else ms), []).extend(_items(doc))
                    self._has_queued.set()
                elif kind == "window":
                    size = doc.get("size")
                    if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= MAX_WINDOW:
                        raise ApiError(400, "INVALID_REQUEST", f"window size must be between 1 and {MAX_WINDOW}")
                    self._window = size
                    self._credit.set()
                elif kind == "ping":
                    await self._send(b'{"type":"pong"}')
                else:
                    raise ApiError(400, "INVALID_REQUEST", "type must be ack, nack, extend, window or ping")
            except ApiError as exc:  # a bad frame is answered, and the connection goes on
                await self._send(error_frame(exc))

    async def _settle(self) -> None:
        while True:
            await self._has_queued.wait()
            self._has_queued.clear()
            queued, self._queued = self._queued, {}
            for (op, ms), items in queued.items():
                try:
                    statuses = await self._link.settle(self._holder, op, items, ms)
                    results = [
                        {"partition": p, "offset": o, "delivery": d, "status": s}
                        for (p, o, d), s in zip(items, statuses, strict=False)
                    ]
                except ApiError as exc:
                    error = {"code": exc.code, "message": exc.message, "retriable": exc.retriable}
                    results = [
                        {"partition": p, "offset": o, "delivery": d, "status": "error", "error": error}
                        for p, o, d in items
                    ]
                    statuses = ["error"] * len(items)
                if op != "extend":
                    for item, status in zip(items, statuses, strict=False):
                        if status != "error":
                            self._outstanding.discard(item)
                    self._credit.set()
                await self._send(orjson.dumps({"type": "settled", "op": op, "results": results}))
