"""A transparent TCP proxy that delays what it carries: ``tc netem`` for kernels without it.

nftables redirects a namespace's new outgoing connections here (``redirect to :PORT`` in a nat output
chain); the proxy asks the kernel where each was going (``SO_ORIGINAL_DST``), connects there itself with
a socket mark the redirect skips, and forwards each chunk in both directions after ``delay ± jitter``
milliseconds, keeping the byte order of each direction (a chunk never overtakes the previous one).

Run inside a namespace: ``ip netns exec NS python -m tests.netfaults.proxy --port P --mark M --delay-ms D
--jitter-ms J``. It prints ``listening`` once it accepts connections, and runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import socket
import struct
import time

SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h
SO_MARK = 36  # asm-generic/socket.h (Python's socket module has no name for it before 3.12)


class Delays:
    def __init__(self, delay_ms: float, jitter_ms: float) -> None:
        self.delay_s = delay_ms / 1000
        self.jitter_s = jitter_ms / 1000

    def sample(self) -> float:
        return max(0.0, self.delay_s + random.uniform(-self.jitter_s, self.jitter_s))


def original_destination(sock: socket.socket) -> tuple[str, int]:
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port, address = struct.unpack_from("!H4s", raw, 2)
    return socket.inet_ntoa(address), port


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delays: Delays) -> None:
    """Forward one direction; each chunk leaves ``delay ± jitter`` after it came, never before the previous."""
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                with contextlib.suppress(OSError):
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    delivery = asyncio.create_task(deliver())
    last_due = 0.0
    try:
        while True:
            data = await reader.read(65536)
            last_due = max(last_due, time.monotonic() + delays.sample())
            queue.put_nowait((last_due, data))
            if not data:
                break
        await delivery
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        delivery.cancel()


async def handle(
    client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter, delays: Delays, mark: int
) -> None:
    client_socket = client_writer.get_extra_info("socket")
    upstream_writer = None
    try:
        host, port = original_destination(client_socket)
        upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        upstream.setsockopt(socket.SOL_SOCKET, SO_MARK, mark)
        upstream.setblocking(False)
        await asyncio.sleep(delays.sample())  # the SYN's trip
        await asyncio.wait_for(asyncio.get_running_loop().sock_connect(upstream, (host, port)), 10)
        upstream_reader, upstream_writer = await asyncio.open_connection(sock=upstream)
        await asyncio.gather(pipe(client_reader, upstream_writer, delays), pipe(upstream_reader, client_writer, delays))
    except (OSError, TimeoutError):
        pass
    finally:
        for writer in (client_writer, upstream_writer):
            if writer is not None:
                writer.close()


async def serve(port: int, delays: Delays, mark: int) -> None:
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, delays, mark), host="127.0.0.1", port=port, reuse_address=True
    )
    # Nothing to flush or save: on SIGTERM the connections just end, as a cable pulled would end them.
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, os._exit, 0)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mark", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, required=True)
    parser.add_argument("--jitter-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.port, Delays(args.delay_ms, args.jitter_ms), args.mark))


if __name__ == "__main__":
    main()
