"""A stream reader for the Kafka listener that hands out request frames with at most one copy.

asyncio's ``StreamReader`` keeps what arrives in one bytearray: every chunk is appended to it (the array is
reallocated as it grows, and shrunk again once a large frame is taken out), and ``readexactly`` copies the
frame out twice (a slice, then ``bytes``). For a produce request of a megabyte that was about a quarter of the
listener's event-loop time (``load_tests/kafka_bench.py``). :class:`FrameReader` keeps the chunks as they
arrived: a frame inside one chunk is a view of it (no copy), one across chunks is joined once.

Only what the listener uses is reimplemented (``readexactly``, and what ``StreamReaderProtocol`` and
``StreamWriter`` call); it relies on ``StreamReader``'s private waiting and flow-control helpers, which are the
same from Python 3.8 to 3.13.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["FrameReader", "frame_reader_protocol"]


class FrameReader(asyncio.StreamReader):
    """``readexactly`` over the chunks as received; returns a ``memoryview`` (read-only, of bytes that are never
    reused) or ``bytes``."""

    # StreamReader's own state, used as StreamReader uses it (private to asyncio, so not in its stubs).
    _eof: bool
    _limit: int
    _paused: bool
    _transport: Any

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self._chunks: deque[memoryview] = deque()
        self._size = 0  # bytes in _chunks

    def feed_data(self, data: bytes) -> None:  # type: ignore[override]  # what a protocol receives: bytes
        assert not self._eof, "feed_data after feed_eof"
        if not data:
            return
        self._chunks.append(memoryview(data))
        self._size += len(data)
        self._wakeup_waiter()  # type: ignore[attr-defined]
        transport = self._transport
        if transport is not None and not self._paused and self._size > 2 * self._limit:
            try:
                transport.pause_reading()
            except NotImplementedError:
                self._transport = None
            else:
                self._paused = True

    def at_eof(self) -> bool:
        return self._eof and not self._size

    async def readexactly(self, n: int) -> memoryview | bytes:  # type: ignore[override]
        if n < 0:
            raise ValueError("readexactly size can not be less than zero")
        exception = self.exception()
        if exception is not None:
            raise exception
        if n == 0:
            return b""
        while self._size < n:
            if self._eof:
                partial = b"".join(self._chunks)
                self._chunks.clear()
                self._size = 0
                raise asyncio.IncompleteReadError(partial, n)
            await self._wait_for_data("readexactly")  # type: ignore[attr-defined]
        data = self._take(n)
        self._maybe_resume_transport()
        return data

    def _take(self, n: int) -> memoryview | bytes:
        chunks = self._chunks
        self._size -= n
        first = chunks[0]
        if len(first) > n:
            chunks[0] = first[n:]
            return first[:n]
        if len(first) == n:
            return chunks.popleft()
        pieces = []
        need = n
        while need:
            chunk = chunks[0]
            if len(chunk) <= need:
                pieces.append(chunks.popleft())
                need -= len(chunk)
            else:
                pieces.append(chunk[:need])
                chunks[0] = chunk[need:]
                need = 0
        return b"".join(pieces)  # one copy, into memory that is not zeroed first

    def _maybe_resume_transport(self) -> None:
        if self._paused and self._size <= self._limit:
            self._paused = False
            self._transport.resume_reading()


def frame_reader_protocol(
    serve: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]], *, limit: int
) -> asyncio.StreamReaderProtocol:
    """What ``asyncio.start_server`` makes per connection, with a :class:`FrameReader` (for ``create_server``)."""
    loop = asyncio.get_running_loop()
    return asyncio.StreamReaderProtocol(FrameReader(limit, loop), serve, loop=loop)
