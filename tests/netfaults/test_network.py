"""The harness itself: namespaces reach each other over the bridge, each fault does what it says and stops
doing it when its block ends, and nothing (namespace, link, nftables table, proxy) is left afterwards."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from tests.netfaults.conftest import echo_server
from tests.netfaults.network import REPO, Network, leftovers

# namespaces, links and timed faults: seconds per test; the namespaces take the machine's address space
pytestmark = [pytest.mark.slow, pytest.mark.serial]

PROBE = """
import json, socket, sys, time
kind, host, port, tries, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
answered, times = 0, []
for n in range(tries):
    try:
        started = time.monotonic()
        if kind == "tcp":
            with socket.create_connection((host, port), timeout=timeout) as s:
                s.sendall(b"ping")
                answered += s.recv(16) == b"ping"
        else:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.settimeout(timeout)
                s.sendto(str(n).encode(), (host, port))
                answered += s.recvfrom(16)[0] == str(n).encode()
        times.append(time.monotonic() - started)
    except OSError:
        pass
print(json.dumps({"answered": answered, "times": times}))
"""


def probe(
    net: Network, source: str, target: str, *, kind: str = "tcp", tries: int = 1, timeout: float = 1.0
) -> tuple[int, list[float]]:
    """From ``source``'s namespace, ``tries`` round trips to ``target``'s echo server: (answered, their times)."""
    argv = [sys.executable, "-c", PROBE, kind, net.address(target), "7000", str(tries), str(timeout)]
    done = subprocess.run(net.exec_argv(source, argv), capture_output=True, text=True, timeout=120, check=True)
    result = json.loads(done.stdout)
    return int(result["answered"]), [float(t) for t in result["times"]]


def test_every_node_reaches_every_other(network: Network) -> None:
    with echo_server(network, "a"), echo_server(network, "b"):
        for source, target in [("clients", "a"), ("a", "b"), ("b", "a"), ("b", "clients")]:
            if target == "clients":
                continue  # the root namespace runs no echo server; b → a covers the way back
            assert probe(network, source, target)[0] == 1, f"{source} cannot reach {target}"


def test_cut_drops_both_directions_and_heals(network: Network) -> None:
    with echo_server(network, "a"), echo_server(network, "b"):
        with network.cut("a", "b"):
            assert probe(network, "a", "b", timeout=0.5)[0] == 0
            assert probe(network, "b", "a", timeout=0.5)[0] == 0
            assert probe(network, "clients", "a")[0] == 1, "a cut between a and b must not touch the clients"
        assert probe(network, "a", "b")[0] == 1
        assert probe(network, "b", "a")[0] == 1


UDP_SINK = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 7001))
s.settimeout(1.0)
print("listening", flush=True)
try:
    print(s.recvfrom(16)[0].decode())
except TimeoutError:
    print("nothing")
"""

UDP_SEND = """
import socket, sys
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    for _ in range(3):
        try:
            s.sendto(b"arrived", (sys.argv[1], 7001))
        except PermissionError:  # what an nftables drop in the sender's output chain looks like
            pass
"""


def datagram_arrives(net: Network, source: str, target: str) -> bool:
    """Does a datagram from ``source`` reach ``target`` (no answer needed, so one direction is tested)?"""
    sink = net.exec_argv(target, [sys.executable, "-c", UDP_SINK, net.address(target)])
    listener = subprocess.Popen(sink, stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout is not None and listener.stdout.readline().strip() == "listening"
        send = [sys.executable, "-c", UDP_SEND, net.address(target)]
        subprocess.run(net.exec_argv(source, send), check=True, timeout=30)
        return listener.stdout.readline().strip() == "arrived"
    finally:
        listener.kill()
        listener.wait(10)


def test_cut_one_way_drops_only_that_way(network: Network) -> None:
    assert datagram_arrives(network, "a", "b") and datagram_arrives(network, "b", "a")
    with network.cut_one_way("a", "b"):
        assert not datagram_arrives(network, "a", "b")
        assert datagram_arrives(network, "b", "a")
        assert datagram_arrives(network, "clients", "b"), "only a → b is cut"
    assert datagram_arrives(network, "a", "b")


def test_lossy_drops_a_share_of_packets_on_every_link(network: Network) -> None:
    with echo_server(network, "a"):
        assert probe(network, "clients", "a", kind="udp", tries=100, timeout=0.2)[0] == 100
        with network.lossy(30):
            # A round trip survives two 30 % drops: 49 % expected; far from both 0 and 100 %.
            answered, _ = probe(network, "clients", "a", kind="udp", tries=200, timeout=0.05)
            assert 50 < answered < 150, answered
            answered, _ = probe(network, "b", "a", kind="udp", tries=200, timeout=0.05)
            assert 50 < answered < 150, answered
        assert probe(network, "clients", "a", kind="udp", tries=100, timeout=0.2)[0] == 100


def test_delay_slows_every_connection_including_those_open_before(network: Network) -> None:
    with echo_server(network, "a"):
        before = socket.create_connection((network.address("a"), 7000), timeout=5)
        try:
            _, plain = probe(network, "b", "a", tries=3)
            assert max(plain) < 0.15
            with network.delay(200, 50):
                _, delayed = probe(network, "b", "a", tries=3, timeout=5)
                # The connect waits one delay, the request and the answer one each: at least 3 times 150 ms.
                assert len(delayed) == 3 and min(delayed) >= 0.45, delayed
                _, from_clients = probe(network, "clients", "a", tries=1, timeout=5)
                assert from_clients and from_clients[0] >= 0.45
                with pytest.raises(ConnectionResetError):  # it would bypass the delay: reset, to reconnect
                    before.sendall(b"ping")
                    before.recv(16)
            _, after = probe(network, "b", "a", tries=3)
            assert max(after) < 0.15, "the delay outlived its block"
        finally:
            before.close()


def test_flap_cuts_and_heals_in_turn(network: Network) -> None:
    with echo_server(network, "a"):
        outcomes = []
        with network.flap("a", "clients", period_s=1.0) as cuts:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                outcomes.append(probe(network, "clients", "a", kind="udp", timeout=0.2)[0])
                time.sleep(0.1)
        assert len(cuts) >= 2
        assert 0 in outcomes and 1 in outcomes, outcomes
        assert probe(network, "clients", "a")[0] == 1, "a flap must end healed"


def test_nothing_is_left_behind_even_when_the_block_fails() -> None:
    net = Network({"x": ["x"], "y": ["y", "z"]})
    proxies = []
    with pytest.raises(RuntimeError, match="boom"), net, net.delay(10), net.cut("x", ["y", "z"]), net.lossy(5):
        proxies = list(net._proxies)
        assert len(proxies) == 3  # one per namespace, the root one included
        assert leftovers(net.prefix), "the faults made nothing to look for"
        raise RuntimeError("boom")
    assert leftovers(net.prefix) == []
    assert all(p.poll() is not None for p in proxies), "a delaying proxy outlived its network"
    assert REPO.exists()
