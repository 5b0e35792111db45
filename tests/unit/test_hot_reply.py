"""How a hot request's answer is written (``server.http.hot_cycle.write_reply``): a produce's 200 through the head
kept per set of uvicorn's default headers, anything else through the general one; both are HTTP/1.1 that says
what the reply holds."""

from __future__ import annotations

import asyncio
from typing import cast

from server.http.hot_cycle import write_reply
from server.peers import Reply


class _Transport:
    def __init__(self) -> None:
        self.written = b""

    def write(self, data: bytes) -> None:
        self.written += data

    def writelines(self, parts: list[bytes]) -> None:
        self.written += b"".join(parts)


def _written(reply: Reply, defaults: list[tuple[bytes, bytes]], *, keep_alive: bool = True) -> bytes:
    transport = _Transport()
    write_reply(cast(asyncio.Transport, transport), reply, defaults, keep_alive=keep_alive)
    return transport.written


def test_a_produce_answer_carries_the_default_headers_of_the_moment() -> None:
    first = [(b"date", b"Sat, 28 Nov 2026 02:00:00 GMT"), (b"server", b"talos")]
    body = b'{"results":[]}'
    expected = (
        b"HTTP/1.1 200 OK\r\ndate: Sat, 28 Nov 2026 02:00:00 GMT\r\nserver: talos\r\n"
        b"content-type: application/json\r\ncontent-length: 14\r\n\r\n" + body
    )
    assert _written(Reply(200, body), first) == expected
    assert _written(Reply(200, body), first) == expected  # the kept head, again
    later = [(b"date", b"Sat, 28 Nov 2026 02:00:01 GMT"), (b"server", b"talos")]  # uvicorn's next second
    assert _written(Reply(200, body), later) == expected.replace(b"02:00:00", b"02:00:01")


def test_other_answers_say_their_status_headers_type_and_closing() -> None:
    defaults = [(b"server", b"talos")]
    refused = _written(Reply(429, b"{}", headers={"Retry-After": "1"}), defaults)
    assert refused == (
        b"HTTP/1.1 429 Too Many Requests\r\nserver: talos\r\ncontent-type: application/json\r\n"
        b"content-length: 2\r\nRetry-After: 1\r\n\r\n{}"
    )
    closing = _written(Reply(200, b"{}"), defaults, keep_alive=False)
    assert closing.endswith(b"content-length: 2\r\nconnection: close\r\n\r\n{}")
    text = _written(Reply(200, b"hi", content_type="text/plain"), defaults)
    assert b"content-type: text/plain\r\ncontent-length: 2\r\n\r\nhi" in text
    large = _written(Reply(200, b"x" * 70_000), defaults)
    assert large.endswith(b"content-length: 70000\r\n\r\n" + b"x" * 70_000)
