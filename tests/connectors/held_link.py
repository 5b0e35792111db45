"""A loopback TCP forwarder that can hold what clients send: a request the network delays past any deadline.

``hold()`` keeps every connection clients open from then on from reaching the server until ``release()``:
what they send waits in the link (so the server's head timeout does not start), and a test can have a request
leave the client, be stuck "in the network", and reach the server at a moment it picks.
"""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["HeldLink"]


class HeldLink:
    def __init__(self, target_port: int) -> None:
        self._target = ("127.0.0.1", target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, name="held-link", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def hold(self) -> None:
        """From now on, hold new connections; the open ones are cut (clients reconnect, and wait)."""
        self._flowing.clear()
        self._cut()

    def release(self) -> None:
        self._flowing.set()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._sockets.append(client)
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        self._flowing.wait()
        if self._closed.is_set():
            return
        server = socket.create_connection(self._target)
        self._sockets.append(server)
        threading.Thread(target=self._pump, args=(client, server), daemon=True).start()
        threading.Thread(target=self._pump, args=(server, client), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()
        self._listener.close()
        self._cut()

    def _cut(self) -> None:
        sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
