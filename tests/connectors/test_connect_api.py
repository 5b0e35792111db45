"""Connectors run by the server, made through the REST API shaped like Kafka Connect's, against a real ``talos
standalone`` with auth on and a real HDFS: a tenant's HDFS sink carries its topic to files, as that tenant; pause,
resume, restart, a new configuration and delete act on the task's process; another tenant sees none of it and cannot
touch it; a bad configuration is refused with every problem named."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from hdfs import InsecureClient

from server.devservices import HdfsCluster, wait_until
from tests.connectors.test_hdfs_sink import PARTITIONS, check_exactly_once, produce, visible_records
from tests.helpers import SecuredStandalone, process_alive, secured_standalone

pytestmark = [pytest.mark.hdfs]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredStandalone]:
    with secured_standalone(tmp_path_factory.mktemp("connect-api"), {"alice": None, "bob": None}) as server:
        yield server


def sink(hdfs: HdfsCluster, topic: str, root: str, **extra: str) -> dict[str, str]:
    """An HDFS sink's configuration, as Kafka Connect's clients send one: every value a string."""
    return {
        "connector.class": "hdfs-sink",
        "tasks.max": "1",
        "topics": topic,
        "namenode": hdfs.webhdfs_url,
        "path": root,
        "roll_bytes": "2000",
        "roll_ms": "300",
        "session_timeout_s": "3",
        **extra,
    }


def task_pid(client: httpx.Client, name: str, task: int = 0) -> int | None:
    status = client.get(f"/connectors/{name}/status").json()
    entry = status["tasks"][task]
    return entry.get("pid") if entry["state"] == "RUNNING" else None


def test_plugins_and_a_refused_configuration(secured: SecuredStandalone) -> None:
    with secured.bearer(secured.token("alice")) as alice:
        plugins = alice.get("/connector-plugins").json()
        assert {p["class"]: p["type"] for p in plugins} == {
            "hdfs-sink": "sink",
            "hdfs-source": "source",
            "elasticsearch-sink": "sink",
            "elasticsearch-source": "source",
        }
        bad = alice.post(
            "/connectors",
            json={"name": "bad", "config": {"connector.class": "hdfs-sink", "topics": "t", "roll_byte": "1"}},
        )
        assert bad.status_code == 400, bad.text
        message = bad.json()["message"]
        assert bad.json()["error_code"] == 400 and bad.json()["error"]["code"] == "INVALID_CONFIG"
        for problem in ("namenode: Field required", "path: Field required", "roll_byte: unknown setting"):
            assert problem in message, message
        unknown = alice.post("/connectors", json={"name": "bad", "config": {"connector.class": "ftp-sink"}})
        assert unknown.status_code == 400 and "connector.class must be one of" in unknown.json()["message"]
        checked = alice.put("/connector-plugins/hdfs-sink/config/validate", json={"topics": "t", "path": "x"})
        assert checked.status_code == 200 and checked.json()["error_count"] == 2, checked.text  # namenode; path
        assert alice.get("/connectors").json() == []  # nothing was made
        # Made paused (Kafka Connect's initial_state): no task runs until it is resumed.
        later = {"connector.class": "hdfs-sink", "topics": "t", "namenode": "http://127.0.0.1:9", "path": "/later"}
        odd = alice.post("/connectors", json={"name": "later", "config": later, "initial_state": "SOON"})
        assert odd.status_code == 400, odd.text
        made = alice.post("/connectors", json={"name": "later", "config": later, "initial_state": "PAUSED"})
        assert made.status_code == 201, made.text
        status = alice.get("/connectors/later/status").json()
        assert status["connector"]["state"] == "PAUSED" and status["tasks"][0]["state"] == "PAUSED", status
        assert alice.delete("/connectors/later").status_code == 204


@pytest.mark.slow
def test_a_tenants_sink_runs_as_it_and_follows_pause_resume_restart_and_delete(
    secured: SecuredStandalone, hdfs: HdfsCluster
) -> None:
    topic, name, root = "alice-orders", "alice-orders-to-hdfs", "/connect-api/alice"
    with secured.admin("alice") as admin:
        admin.create_topic(topic, partitions=PARTITIONS)
    alice_token = secured.token("alice")
    assert alice_token is not None
    os.environ["TALOS_TOKEN"] = alice_token
    try:
        produce(secured.url, topic, range(300))
    finally:
        del os.environ["TALOS_TOKEN"]
    files = InsecureClient(hdfs.webhdfs_url)
    with secured.bearer(alice_token) as alice, secured.bearer(secured.token("bob")) as bob:
        made = alice.post("/connectors", json={"name": name, "config": sink(hdfs, topic, root)})
        assert made.status_code == 201, made.text
        assert made.json()["tasks"] == [{"connector": name, "task": 0}] and made.json()["type"] == "sink"
        assert alice.post("/connectors", json={"name": name, "config": sink(hdfs, topic, root)}).status_code == 409
        wait_until(lambda: visible_records(files, root, topic) >= 300, timeout=90, what="the sink's files")
        status = alice.get(f"/connectors/{name}/status").json()
        assert status["connector"]["state"] == "RUNNING" and status["tasks"][0]["state"] == "RUNNING", status
        assert status["tasks"][0]["worker_id"] == secured.url
        # The task acts as alice: its consumer group is hers, which bob does not see.
        with secured.admin("alice") as admin:
            assert f"connect-{name}" in admin.list_groups()
        with secured.admin("bob") as admin:
            assert f"connect-{name}" not in admin.list_groups()

        # Bob sees nothing of it, and can neither change nor take its name.
        assert bob.get("/connectors").json() == []
        for method, path in [
            ("GET", f"/connectors/{name}"),
            ("GET", f"/connectors/{name}/status"),
            ("GET", f"/connectors/{name}/config"),
            ("PUT", f"/connectors/{name}/pause"),
            ("POST", f"/connectors/{name}/restart"),
            ("DELETE", f"/connectors/{name}"),
        ]:
            answer = bob.request(method, path)
            assert answer.status_code == 404, (method, path, answer.text)
        taken = bob.put(f"/connectors/{name}/config", json=sink(hdfs, "bob-topic", "/connect-api/bob"))
        assert taken.status_code == 409, taken.text
        assert bob.get(f"/connectors/{name}/tasks/0/status", params={"local": "true"}).status_code == 403

        # Pause: the task's process ends and nothing more is written; resume: it catches up.
        pid = task_pid(alice, name)
        assert pid is not None and process_alive(pid)
        assert alice.put(f"/connectors/{name}/pause").status_code == 202
        wait_until(lambda: not process_alive(pid), timeout=60, what="the paused task's process to end")
        assert alice.get(f"/connectors/{name}/status").json()["connector"]["state"] == "PAUSED"
        os.environ["TALOS_TOKEN"] = alice_token
        try:
            produce(secured.url, topic, range(300, 400))
        finally:
            del os.environ["TALOS_TOKEN"]
        assert visible_records(files, root, topic) == 300
        assert alice.put(f"/connectors/{name}/resume").status_code == 202
        wait_until(lambda: visible_records(files, root, topic) >= 400, timeout=90, what="the resumed sink")

        # Restart: a new process; a new configuration (two tasks): two processes.
        resumed = _wait_pid(alice, name)
        assert alice.post(f"/connectors/{name}/restart").status_code == 204
        wait_until(lambda: _wait_pid(alice, name) not in (None, resumed), timeout=60, what="a restarted task")
        assert not process_alive(resumed)
        changed = alice.put(f"/connectors/{name}/config", json=sink(hdfs, topic, root, **{"tasks.max": "2"}))
        assert changed.status_code == 200 and len(changed.json()["tasks"]) == 2, changed.text
        wait_until(
            lambda: [t["state"] for t in alice.get(f"/connectors/{name}/status").json()["tasks"]] == ["RUNNING"] * 2,
            timeout=60,
            what="two running tasks",
        )
        assert alice.get(f"/connectors/{name}/config").json()["tasks.max"] == "2"

        # Delete: the tasks stop and the connector is gone; what it wrote is every record once.
        pids = [task_pid(alice, name, task) for task in range(2)]
        assert alice.delete(f"/connectors/{name}").status_code == 204
        assert alice.get(f"/connectors/{name}").status_code == 404
        wait_until(
            lambda: not any(p is not None and process_alive(p) for p in pids), timeout=60, what="the tasks to stop"
        )
        # Every change is in alice's audit log, and none in bob's.
        actions = [(e["action"], e["actor"]) for e in alice.get("/v1/audit").json()["entries"] if e["target"] == name]
        assert actions[::-1] == [
            (action, "alice")
            for action in (
                "connector.create",
                "connector.pause",
                "connector.resume",
                "connector.restart",
                "connector.config",
                "connector.delete",
            )
        ]
        assert not [e for e in bob.get("/v1/audit").json()["entries"] if e["target"] == name]
    os.environ["TALOS_TOKEN"] = alice_token
    try:
        assert check_exactly_once(files, root, topic, secured.url) == 400
    finally:
        del os.environ["TALOS_TOKEN"]


def _wait_pid(client: httpx.Client, name: str) -> Any:
    found: list[int] = []

    def running() -> bool:
        pid = task_pid(client, name)
        if pid is None:
            return False
        found.append(pid)
        return True

    wait_until(running, timeout=60, what="a running task")
    return found[-1]


@pytest.mark.slow
def test_a_sink_on_another_tenants_topic_fails_as_its_tenant(secured: SecuredStandalone, hdfs: HdfsCluster) -> None:
    with secured.admin("bob") as admin:
        admin.create_topic("bob-secrets", partitions=1)
    with secured.bearer(secured.token("alice")) as alice:
        config = sink(hdfs, "bob-secrets", "/connect-api/stolen")
        assert alice.post("/connectors", json={"name": "alice.steal", "config": config}).status_code == 201
        wait_until(
            lambda: alice.get("/connectors/alice.steal/status").json()["tasks"][0]["state"] == "FAILED",
            timeout=60,
            what="the task to fail",
        )
        trace = alice.get("/connectors/alice.steal/status").json()["tasks"][0].get("trace", "")
        # As alice, bob's topic is one that does not exist (the admin, whose token the task carries, would see it).
        assert "UNKNOWN_TOPIC" in trace and "bob-secrets" in trace, trace
        assert alice.delete("/connectors/alice.steal").status_code == 204
    files = InsecureClient(hdfs.webhdfs_url)
    assert files.status("/connect-api/stolen/bob-secrets", strict=False) is None


def cli(secured: SecuredStandalone, who: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``talos ARGS`` against the server as ``who`` (TALOS_TOKEN), its output captured."""
    env = {**os.environ, "TALOS_TOKEN": secured.token(who) or "", "TALOS_URL": secured.url}
    argv = [sys.executable, "-m", "talos.cli", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, env=env)


@pytest.mark.slow
def test_the_cli_submits_a_file_to_the_cluster_and_manages_what_runs(
    secured: SecuredStandalone, hdfs: HdfsCluster, tmp_path: Path
) -> None:
    topic, name = "alice-cli", "alice-cli-to-hdfs"
    with secured.admin("alice") as admin:
        admin.create_topic(topic, partitions=1)
    document = {
        "connectors": [
            {
                "name": name,
                "type": "hdfs-sink",
                "topics": [topic],
                "config": {"namenode": hdfs.webhdfs_url, "path": "/connect-cli", "roll_ms": 300},
            }
        ]
    }
    file = tmp_path / "connect.yaml"
    file.write_text(yaml.safe_dump(document))
    submitted = cli(secured, "alice", "connect", "submit", str(file))
    assert submitted.returncode == 0, submitted.stderr
    assert f"{name}: sink, 1 task(s) submitted" in submitted.stdout
    with secured.admin("alice") as admin:
        wait_until(
            lambda: admin.connector_status(name)["tasks"][0]["state"] == "RUNNING", timeout=60, what="a running task"
        )
        assert admin.describe_connector(name)["config"]["roll_ms"] == 300  # a JSON value, kept as it was
    listed = cli(secured, "alice", "connect", "list")
    assert name in listed.stdout and "RUNNING" in listed.stdout and "1/1 task(s) running" in listed.stdout
    assert name not in cli(secured, "bob", "connect", "list").stdout
    described = cli(secured, "alice", "connect", "describe", name)
    assert f"task 0: RUNNING    on {secured.url}" in described.stdout, described.stdout
    refused = cli(secured, "bob", "connect", "pause", name)
    assert refused.returncode == 1 and "not found" in refused.stderr
    assert cli(secured, "alice", "connect", "pause", name).returncode == 0
    with secured.admin("alice") as admin:
        assert admin.connector_status(name)["connector"]["state"] == "PAUSED"
    assert cli(secured, "alice", "connect", "resume", name).returncode == 0
    assert cli(secured, "alice", "connect", "restart", name, "--task", "0").returncode == 0
    assert cli(secured, "alice", "connect", "delete", name, "--yes").returncode == 0
    with secured.admin("alice") as admin:
        assert name not in admin.list_connectors()
