"""The real services the tests and `talos dev services` start: usable, restartable, stopped by PID."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from fencing import open_storage
from server.devservices import HdfsCluster, ZooKeeperServer
from server.devservices._zookeeper import four_letter


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_zookeeper_serves_a_real_client(zookeeper: ZooKeeperServer) -> None:
    assert "Mode: standalone" in four_letter("127.0.0.1", zookeeper.port, "srvr")
    client = KazooClient(hosts=zookeeper.address, timeout=10)
    client.start(timeout=10)
    try:
        client.ensure_path("/talos-test")
        client.create("/talos-test/node", b"value", ephemeral=True)
        assert client.get("/talos-test/node")[0] == b"value"
    finally:
        client.stop()
        client.close()


def test_webhdfs_answers(hdfs: HdfsCluster) -> None:
    fs, _ = open_storage(f"{hdfs.url}/webhdfs-check")
    fs.write_file("/webhdfs-check/file", b"data")
    with urllib.request.urlopen(f"{hdfs.webhdfs_url}/webhdfs/v1/webhdfs-check?op=LISTSTATUS", timeout=10) as answer:
        listing = json.load(answer)["FileStatuses"]["FileStatus"]
    assert [(s["pathSuffix"], s["length"]) for s in listing] == [("file", 4)]


@pytest.mark.slow
def test_datanode_restart(hdfs: HdfsCluster) -> None:
    hdfs.stop_datanode()
    hdfs.start_datanode()
    hdfs.wait_ready(timeout=90)
    fs, _ = open_storage(f"{hdfs.url}/after-restart")
    fs.write_file("/after-restart/file", b"ok")
    assert fs.read("/after-restart/file") == b"ok"


def test_zookeeper_stop_ends_the_process(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path)
    server.start()
    assert server.process is not None
    pid = server.process.pid
    server.stop()
    assert not pid_alive(pid)


@pytest.mark.slow
def test_cli_runs_both_services_and_stops_them_on_sigterm(tmp_path: Path) -> None:
    cli = subprocess.Popen(
        [sys.executable, "-m", "talos.cli", "dev", "services", "--dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert cli.stdout is not None
        zk_line = cli.stdout.readline().split()
        hdfs_line = cli.stdout.readline().split()
        assert zk_line[0] == "zookeeper"
        assert hdfs_line[0] == "hdfs"
        host, port = zk_line[1].split(":")
        assert "Zookeeper version" in four_letter(host, int(port), "srvr")
        fs, _ = open_storage(f"{hdfs_line[1]}/cli")
        fs.write_file("/cli/file", b"x")
        pids = [int(zk_line[2].removeprefix("pid="))]
        pids += [int(field.split("=")[1]) for field in hdfs_line if "_pid=" in field]
        assert len(pids) == 3
        cli.send_signal(signal.SIGTERM)
        assert cli.wait(60) == 0
        deadline = time.monotonic() + 10
        while any(map(pid_alive, pids)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(map(pid_alive, pids))
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
