"""A TCP and UDP echo server for the harness's own tests: ``python -m tests.netfaults.echo HOST PORT``.

Prints ``listening`` once both sockets are bound; runs until killed.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading


def serve_tcp(listener: socket.socket) -> None:
    while True:
        connection, _ = listener.accept()
        threading.Thread(target=echo_tcp, args=(connection,), daemon=True).start()


def echo_tcp(connection: socket.socket) -> None:
    with connection:
        while data := connection.recv(65536):
            connection.sendall(data)


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    listener = socket.create_server((host, port))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((host, port))
    threading.Thread(target=serve_tcp, args=(listener,), daemon=True).start()
    print("listening", flush=True)
    while True:
        data, sender = udp.recvfrom(65536)
        with contextlib.suppress(PermissionError):  # an nftables drop of the answer: the datagram is lost
            udp.sendto(data, sender)


if __name__ == "__main__":
    main()
