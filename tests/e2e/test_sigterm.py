"""SIGTERM ends a server within its shutdown deadline in every state (issue 35, "Nothing hangs"): starting
(ZooKeeper unreachable; its server id held by another session), serving under a produce load (and nothing
acknowledged is lost), storage hung (HDFS stopped with SIGSTOP under pending produces), and shutting down (more
SIGTERMs while it drains, or while its shutdown is stuck, move no deadline).

The servers run with a short deadline (``TALOS_SHUTDOWN_TIMEOUT_S``); each exit must come within it plus a slack
for process start-up noise on a loaded 2-core machine. A clean stop ends by the signal itself (status -SIGTERM);
a stop the deadline cut short exits 124 with a log line naming what still ran."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import orjson
import pytest
from kazoo.client import KazooClient

from server.__main__ import SHUTDOWN_INCOMPLETE_EXIT
from server.coordination import paths
from server.devservices import (
    ClusterServer,
    ClusterSettings,
    HdfsCluster,
    ManagedProcess,
    StandaloneServer,
    ZooKeeperServer,
    free_port,
    wait_until,
)
from talos import Admin
from tests.e2e.test_crash_safety import produce_until_stopped

pytestmark = pytest.mark.serial  # exits within a deadline, measured

DEADLINE_S = 4.0
SLACK_S = 4.0
ENV = {"TALOS_SHUTDOWN_TIMEOUT_S": str(DEADLINE_S)}


def _running(process: ManagedProcess | None) -> ManagedProcess:
    assert process is not None and process.alive()
    return process


def _wait_log(process: ManagedProcess, text: str, timeout: float = 30.0) -> None:
    def logged() -> bool:
        process.check_alive()
        return text in process.log_path.read_text(errors="replace")

    wait_until(logged, timeout=timeout, what=f"{text!r} in {process.log_path}")


def _sigterm(process: ManagedProcess, *, again_at: tuple[float, ...] = ()) -> tuple[int, float]:
    """SIGTERM (and again at each of ``again_at`` seconds after, if still running); the exit status and how
    long after the first SIGTERM the process ended."""
    started = time.monotonic()
    process.signal(signal.SIGTERM)
    for at in again_at:
        time.sleep(max(0.0, started + at - time.monotonic()))
        process.signal(signal.SIGTERM)
    status = process.wait(DEADLINE_S + SLACK_S + 20)  # the finally blocks SIGKILL it if this times out
    return status, time.monotonic() - started


def _long_poll(url: str, topic: str) -> threading.Thread:
    """A fetch waiting 30 s for messages that never come: it holds the drain up (until the drain's bound)."""

    def poll() -> None:
        with contextlib.suppress(OSError):  # the server went away
            urllib.request.urlopen(f"{url}/v1/topics/{topic}/partitions/0/messages?offset=0&wait_ms=30000", timeout=60)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    return thread


def _post(url: str, body: dict[str, object], timeout: float = 60.0) -> None:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout):
        pass


# ---------------------------------------------------------------- starting


@pytest.mark.slow
def test_sigterm_while_zookeeper_is_unreachable_ends_the_start_up(tmp_path: Path) -> None:
    nobody = free_port()  # no ZooKeeper listens here: start-up would wait 30 s for it
    settings = ClusterSettings(admin_token="sigterm", env=ENV)
    storage = f"file://{tmp_path / 'storage'}"
    zk = f"127.0.0.1:{nobody}"
    server = ClusterServer("s1", free_port(), zk=zk, storage=storage, log_dir=tmp_path, settings=settings)
    try:
        server.start(wait=False)
        process = _running(server.process)
        _wait_log(process, "Waiting for application startup")
        time.sleep(1.0)  # kazoo is trying to connect: the lifespan waits for it
        status, took = _sigterm(process)
        assert took <= DEADLINE_S + SLACK_S, f"exited {took:.1f} s after SIGTERM"
        assert status == -signal.SIGTERM, process.tail()  # stopped cleanly, not by the watchdog
        log = process.log_path.read_text()
        assert "SIGTERM during start-up: stopped before serving" in log
        assert "Traceback" not in log and "startup failed" not in log
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.zookeeper
def test_sigterm_while_waiting_for_a_held_server_id(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    chroot = f"/sigterm-{uuid.uuid4().hex[:8]}"
    holder = KazooClient(hosts=zookeeper.address, timeout=30)
    holder.start(timeout=30)
    settings = ClusterSettings(admin_token="sigterm", env=ENV, zk_session_timeout_s=10)
    storage = f"file://{tmp_path / 'storage'}"
    server = ClusterServer(
        "s1", free_port(), zk=zookeeper.address + chroot, storage=storage, log_dir=tmp_path, settings=settings
    )
    try:
        # Another live session holds the id: the server would wait up to 3 session timeouts (30 s) for it.
        held = f"{chroot}{paths.SERVERS}/s1"  # the server's own view: {paths.SERVERS}/s1 under its chroot
        holder.create(held, orjson.dumps({"url": "http://127.0.0.1:1"}), ephemeral=True, makepath=True)
        server.start(wait=False)
        process = _running(server.process)
        _wait_log(process, "waiting for server id s1")
        status, took = _sigterm(process)
        assert took <= DEADLINE_S + SLACK_S, f"exited {took:.1f} s after SIGTERM"
        assert status == -signal.SIGTERM, process.tail()
        # It never deleted the registration it was waiting for: that is the other server's.
        stat = holder.exists(held)
        assert stat is not None and stat.ephemeralOwner == holder.client_id[0]
    finally:
        server.stop()
        holder.stop()
        holder.close()


# ---------------------------------------------------------------- serving


def _stored(url: str, topic: str, partitions: int) -> dict[tuple[int, int], str]:
    stored: dict[tuple[int, int], str] = {}
    for partition in range(partitions):
        offset = 0
        while True:
            query = f"{url}/v1/topics/{topic}/partitions/{partition}/messages?offset={offset}&max_messages=1000"
            with urllib.request.urlopen(query, timeout=30) as answer:
                page = json.load(answer)
            for message in page["messages"]:
                stored[(partition, message["offset"])] = message["value"]
            if page["next_offset"] >= page["high_watermark"] or not page["messages"]:
                break
            offset = page["next_offset"]
    return stored


@pytest.mark.slow
def test_sigterm_under_produce_load_exits_in_time_and_loses_nothing_acknowledged(tmp_path: Path) -> None:
    server = StandaloneServer(tmp_path / "data", env=ENV)
    acked: dict[tuple[int, int], bytes] = {}
    stop = threading.Event()
    writers = [
        threading.Thread(
            target=produce_until_stopped,
            args=(server.url, n, stop, acked),
            kwargs={"topic": "load", "per_round": 50, "random_tail": False, "delivery_timeout_s": 1.0},
        )
        for n in range(3)
    ]
    try:
        server.start()
        Admin(server.url).create_topic("load", partitions=4)
        Admin(server.url).create_topic("idle", partitions=1)
        for thread in writers:
            thread.start()
        wait_until(lambda: len(acked) > 500, timeout=30, what="500 acknowledged messages")
        _long_poll(server.url, "idle")
        time.sleep(0.2)
        status, took = _sigterm(_running(server.process))
        stop.set()
        assert took <= DEADLINE_S + SLACK_S, f"exited {took:.1f} s after SIGTERM"
        assert status == -signal.SIGTERM, server.process.tail() if server.process else ""  # drained, sealed
        for thread in writers:
            thread.join(30)
        server.start()  # the same data directory
        stored = _stored(server.url, "load", 4)
        missing = {key: value for key, value in acked.items() if stored.get(key) != value.decode()}
        assert not missing, f"{len(missing)} acknowledged messages not stored as acknowledged"
        assert len(acked) > 500
    finally:
        stop.set()
        server.stop()


# ---------------------------------------------------------------- storage failing, shutting down


@pytest.mark.slow
@pytest.mark.hdfs
def test_sigterm_with_storage_hung_exits_by_the_deadline(hdfs: HdfsCluster, tmp_path: Path) -> None:
    storage = f"{hdfs.url}/sigterm-{uuid.uuid4().hex[:8]}"
    server = StandaloneServer(tmp_path / "data", args=("--storage", storage), env=ENV)
    hung = [p for p in (hdfs.namenode, hdfs.datanode) if p is not None]
    try:
        server.start()
        Admin(server.url).create_topic("hung", partitions=1)
        _post(f"{server.url}/v1/topics/hung/messages", {"messages": [{"value": "before"}]})  # loaded, writing
        for process in hung:
            process.signal(signal.SIGSTOP)
        body = {"messages": [{"value": "pending"}]}
        pending = [
            threading.Thread(target=_try_post, args=(f"{server.url}/v1/topics/hung/messages", body), daemon=True)
            for _ in range(3)
        ]
        for thread in pending:
            thread.start()
        time.sleep(1.0)  # the produces wait for a flush that HDFS does not answer
        # A second SIGTERM once the shutdown is stuck (past the drain) moves no deadline either. The signals are
        # taken by a thread of their own, so they are seen even if the event loop is stuck in a storage call.
        status, took = _sigterm(_running(server.process), again_at=(DEADLINE_S * 0.8,))
        assert took <= DEADLINE_S + SLACK_S, f"exited {took:.1f} s after SIGTERM"
        log = server.process.log_path.read_text() if server.process else ""
        assert status == SHUTDOWN_INCOMPLETE_EXIT, log[-3000:]
        assert "SIGTERM again" in log and "the same deadline" in log
        assert "still running:" in log and "fencing/hdfs.py" in log and "exiting with code 124" in log
    finally:
        for process in hung:
            process.signal(signal.SIGCONT)
        server.stop()
        hdfs.wait_ready(60)


def _try_post(url: str, body: dict[str, object]) -> None:
    with contextlib.suppress(OSError):  # answered 503, or the server went away
        _post(url, body)


@pytest.mark.slow
def test_more_sigterms_while_draining_keep_the_deadline(tmp_path: Path) -> None:
    server = StandaloneServer(tmp_path / "data", env=ENV)
    try:
        server.start()
        Admin(server.url).create_topic("drain", partitions=2)
        _post(f"{server.url}/v1/topics/drain/messages", {"messages": [{"value": "a"}, {"value": "b"}]})
        Admin(server.url).create_topic("idle", partitions=1)
        _long_poll(server.url, "idle")
        time.sleep(0.2)
        status, took = _sigterm(_running(server.process), again_at=(0.5, 1.0, 2.0))
        assert took <= DEADLINE_S + SLACK_S, f"exited {took:.1f} s after the first SIGTERM"
        log = server.process.log_path.read_text() if server.process else ""
        assert status == -signal.SIGTERM, log[-3000:]  # drained (the long poll cut at its bound), sealed
        assert log.count("SIGTERM again") == 3
        server.start()
        assert len(_stored(server.url, "drain", 2)) == 2
    finally:
        server.stop()
