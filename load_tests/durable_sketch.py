"""The Python ceiling for single-message durable produce: the least a durable, group-committed HTTP server in
Python can do per request, for ``load_tests/performance.py`` to measure Talos against in the same run.

    .venv/bin/python load_tests/durable_sketch.py PORT LOG_FILE

uvloop and httptools take a request; orjson reads its one message; the message is appended to a buffer; one
``write`` + ``fdatasync`` per group runs in a thread while the next group gathers; every request of the group
is answered once its group is on disk. No topics, partitions, checks, metering or errors: a sketch."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from typing import cast

import httptools
import orjson
import uvloop


class GroupLog:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.buffer, self.waiters, self.offset, self.flushing = bytearray(), [], 0, False

    def append(self, value: bytes, answer: Callable[[int], None]) -> None:
        self.buffer += len(value).to_bytes(4, "big") + value
        self.waiters.append((self.offset, answer))
        self.offset += 1
        if not self.flushing:
            self.flushing = True
            asyncio.get_running_loop().create_task(self.flush())

    async def flush(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self.waiters:
                buffer, waiters, self.buffer, self.waiters = self.buffer, self.waiters, bytearray(), []
                await loop.run_in_executor(None, self.sync, buffer)
                for offset, answer in waiters:
                    answer(offset)
        finally:
            self.flushing = False

    def sync(self, buffer: bytearray) -> None:
        os.write(self.fd, buffer)
        os.fdatasync(self.fd)


class Connection(asyncio.Protocol):
    log: GroupLog

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's: a transport, not of asyncio's class
        self.parser, self.body = httptools.HttpRequestParser(self), bytearray()

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_body(self, chunk: bytes) -> None:
        self.body += chunk

    def on_message_complete(self) -> None:
        value = orjson.loads(self.body)["messages"][0]["value"].encode()
        self.body = bytearray()
        self.log.append(value, self.answer)

    def answer(self, offset: int) -> None:
        if not self.transport.is_closing():
            body = orjson.dumps({"results": [{"partition": 0, "offset": offset}]})
            head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
            self.transport.write(head + body)


async def serve(port: int, path: str) -> None:
    Connection.log = GroupLog(path)
    server = await asyncio.get_running_loop().create_server(Connection, "127.0.0.1", port)
    print(f"listening on 127.0.0.1:{port}", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1]), sys.argv[2]))
