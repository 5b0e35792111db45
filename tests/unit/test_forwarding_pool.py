"""The forwarder's connection pool: an owner that never answers holds only its own connections, so forwards to
the other owners go on at once; an owner that accepts no connection is reported unreachable after the connect
timeout, not the whole request timeout."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from server.cluster import Owner
from server.errors import ApiError
from server.peers import Forwarder


@contextlib.asynccontextmanager
async def _silent_owner() -> AsyncIterator[str]:
    """Accepts connections and reads requests, never answers (a server whose loop is blocked, or cut off)."""
    held: list[asyncio.StreamWriter] = []

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for writer in held:
            writer.close()
        server.close()


@contextlib.asynccontextmanager
async def _answering_owner() -> AsyncIterator[str]:
    async def ok(_request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/ok", ok)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def test_an_owner_that_never_answers_does_not_stall_forwards_to_the_others() -> None:
    async def scenario() -> float:
        forwarder = Forwarder(max_hops=2, timeout_s=3.0, pool_size=2)
        try:
            async with _silent_owner() as silent, _answering_owner() as answering:
                stuck = [
                    asyncio.ensure_future(
                        forwarder.send(Owner("s3", silent, False), "GET", "/x", query={}, headers={}, body=None)
                    )
                    for _ in range(4)  # twice its pool: the last two wait for a connection of its own
                ]
                await asyncio.sleep(0.3)
                began = time.monotonic()
                reply = await forwarder.send(
                    Owner("s2", answering, False), "GET", "/ok", query={}, headers={}, body=None
                )
                took = time.monotonic() - began
                assert reply.status == 200
                for task in stuck:
                    with pytest.raises(ApiError, match="did not answer"):
                        await task
                return took
        finally:
            await forwarder.close()

    assert asyncio.run(scenario()) < 1.0, "a forward to an answering owner waited for the silent owner's requests"


def test_an_owner_that_accepts_no_connection_is_unreachable_after_the_connect_timeout() -> None:
    # A listening socket with a full backlog that is never accepted: SYNs go unanswered, as to a host cut off.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(8):
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)

    async def scenario() -> tuple[float, ApiError]:
        forwarder = Forwarder(max_hops=2, timeout_s=30.0, connect_timeout_s=0.5)
        try:
            began = time.monotonic()
            with pytest.raises(ApiError) as raised:
                await forwarder.send(
                    Owner("s3", f"http://127.0.0.1:{port}", False), "GET", "/x", query={}, headers={}, body=None
                )
            return time.monotonic() - began, raised.value
        finally:
            await forwarder.close()

    try:
        took, error = asyncio.run(scenario())
    finally:
        for sock in [*fillers, listener]:
            sock.close()
    assert error.status == 503 and error.code == "OWNER_UNREACHABLE" and error.retriable
    assert took < 5.0, f"waited {took:.1f} s: the connect timeout (0.5 s) did not apply"
