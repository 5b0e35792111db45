"""The steps runners (talos._steps): one behaviour, carried out the same by the blocking and asyncio runners."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from talos import AsyncFunctionTransport, FunctionTransport, Response, TransportError
from talos._steps import Request, Steps, http, pause, run, run_async


def _handler(method: str, url: str, params: Mapping[str, str | int], body: bytes | None) -> Response:
    if url.endswith("/down"):
        raise TransportError(f"{method} {url}: refused")
    return Response(200, {}, f"{method} {url} {dict(params)} {body!r}".encode())


def _behaviour(log: list[str]) -> Steps[str]:
    """Two requests (the second fails and is handled here), a pause, and a value returned."""
    first = yield from http(Request("POST", "http://h/a", params={"x": 1}, body=b"b"))
    log.append(first.body.decode())
    try:
        yield from http(Request("GET", "http://h/down"))
    except TransportError as exc:
        log.append(f"handled {exc}")
    yield from pause(0.0)
    return "done"


def _unhandled() -> Steps[None]:
    yield from http(Request("GET", "http://h/down"))


def test_blocking_and_asyncio_runners_carry_out_the_same_steps() -> None:
    blocking: list[str] = []
    assert run(_behaviour(blocking), FunctionTransport(_handler)) == "done"
    awaited: list[str] = []
    assert asyncio.run(run_async(_behaviour(awaited), AsyncFunctionTransport(_handler))) == "done"
    assert blocking == awaited == ["POST http://h/a {'x': 1} b'b'", "handled GET http://h/down: refused"]


def test_an_error_the_steps_do_not_handle_reaches_the_caller() -> None:
    with pytest.raises(TransportError, match="refused"):
        run(_unhandled(), FunctionTransport(_handler))
    with pytest.raises(TransportError, match="refused"):
        asyncio.run(run_async(_unhandled(), AsyncFunctionTransport(_handler)))
