"""Fixtures of the network-fault harness: a network of namespaces per test, removed afterwards.

The harness needs root, ``ip`` and ``nft`` (``scripts/install --dev`` installs nftables; CI runs as root):
without them these tests are skipped, with the reason.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.netfaults.network import REPO, Network, leftovers, missing_tools


@pytest.fixture(autouse=True)
def _needs_namespaces() -> None:
    reason = missing_tools()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture
def network() -> Iterator[Network]:
    """Two single-node namespaces (a, b) and the clients (the root namespace)."""
    net = Network({"a": ["a"], "b": ["b"]})
    try:
        yield net.create()
    finally:
        net.close()
    assert leftovers(net.prefix) == [], "the network was not removed"


@contextmanager
def echo_server(net: Network, node: str, port: int = 7000) -> Iterator[None]:
    """A TCP and UDP echo server at ``node``'s address, stopped by PID on exit."""
    argv = net.exec_argv(node, [sys.executable, "-m", "tests.netfaults.echo", net.address(node), str(port)])
    process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "listening"
        yield
    finally:
        process.terminate()
        process.wait(10)
