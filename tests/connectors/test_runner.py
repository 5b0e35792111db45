"""``talos connect``: bad configuration fails clearly before anything starts; unreachable targets are
retried (the runner stays up, its status says why) and the work resumes once they are back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from opensearchpy import OpenSearch

from server.devservices import HdfsCluster, SearchServer, free_port, wait_until
from talos import Admin
from tests.connectors.conftest import talos_cli
from tests.connectors.test_elasticsearch_sink import count, sink_config
from tests.connectors.test_hdfs_sink import produce

BAD = {
    "connectors": [
        {
            "name": "a",
            "type": "hdfs-sink",
            "config": {"namenode": "127.0.0.1:9870", "path": "relative", "roll_byte": 1},
        },
        {"name": "a", "type": "elasticsearch-sink", "topics": ["t"], "config": {"hosts": ["http://x:9200"]}},
        {"name": "b", "type": "elasticsearch-source", "topic": "t", "tasks": 2, "config": {"hosts": [], "index": "i"}},
        {"name": "c", "type": "hdfs-source", "topic": "bad/topic", "config": {"namenode": "http://h:1", "path": "/x"}},
        {"name": "d", "type": "ftp-sink", "topics": ["t"]},
    ]
}


@pytest.mark.slow
def test_validate_lists_every_problem_with_where_it_is(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(BAD))
    result = talos_cli("connect", "validate", str(path))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    for expected in [
        "connectors[0]: a hdfs-sink needs `topics: [...]`",
        "connectors[2]: an elasticsearch-source runs one task",
        "connectors[3]: invalid topic name 'bad/topic'",
        "connectors[4].type: Input should be 'hdfs-sink', 'hdfs-source', 'elasticsearch-sink' or "
        "'elasticsearch-source'",
    ]:
        assert expected in result.stderr, result.stderr

    # Once the shape is right, each type's settings are checked, every problem at once.
    BAD["connectors"] = [
        {
            "name": "a",
            "type": "hdfs-sink",
            "topics": ["t"],
            "config": {"namenode": "127.0.0.1:9870", "path": "rel", "roll_byte": 1},
        },
        {
            "name": "b",
            "type": "elasticsearch-sink",
            "topics": ["t"],
            "config": {"hosts": ["http://x:9200"], "index": "{nope}"},
        },
        {"name": "b", "type": "hdfs-source", "topic": "t", "config": {"namenode": "http://h:1", "path": "/x"}},
    ]
    path.write_text(yaml.safe_dump(BAD))
    result = talos_cli("connect", "validate", str(path))
    assert result.returncode == 1
    assert "two connectors are named 'b'" in result.stderr
    BAD["connectors"][2]["name"] = "c"
    path.write_text(yaml.safe_dump(BAD))
    result = talos_cli("connect", "run", str(path))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    for expected in [
        "connectors[0].config.namenode: the NameNode's WebHDFS address must be an http:// or https:// URL",
        "connectors[0].config.path: an absolute HDFS path is needed, not 'rel'",
        "connectors[0].config.roll_byte: unknown setting",
        "connectors[1].config.index: unknown placeholder {nope}",
    ]:
        assert expected in result.stderr, result.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("connectors: [", "is not valid YAML"),
        ("- just a list", "expected a mapping with `connectors: [...]`"),
        ("connectors: []", "connectors: List should have at least 1 item"),
    ],
)
def test_unreadable_files_fail_clearly(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    result = talos_cli("connect", "run", str(path))
    assert result.returncode == 1
    assert message in result.stderr and "Traceback" not in result.stderr
    missing = talos_cli("connect", "run", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 1 and "cannot read" in missing.stderr


def test_valid_configuration_is_summarised(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "connectors": [
                    {
                        "name": "s",
                        "type": "elasticsearch-sink",
                        "topics": ["a", "b"],
                        "tasks": 2,
                        "config": {"hosts": ["http://h:9200"]},
                    },
                    {
                        "name": "f",
                        "type": "hdfs-source",
                        "topic": "logs",
                        "config": {"namenode": "http://n:9870", "path": "/in"},
                    },
                ]
            }
        )
    )
    result = talos_cli("connect", "validate", str(path))
    assert result.returncode == 0, result.stderr
    assert "s: elasticsearch-sink, 2 task(s), <- a, b" in result.stdout
    assert "f: hdfs-source, 1 task(s), -> logs" in result.stdout


@pytest.mark.slow
@pytest.mark.search
def test_an_unreachable_search_server_is_retried_until_it_comes_back(
    talos_url: str, connect_runner: Any, name: str, tmp_path: Path
) -> None:
    Admin(talos_url).create_topic(name, partitions=3)
    produce(talos_url, name, range(300))
    later = SearchServer(tmp_path, port=free_port())  # nothing listens on its port yet
    runner = connect_runner(talos_url, sink_config(name, later, batch_size=50)).start()

    def retrying() -> bool:
        tasks = runner.tasks()
        return any(t["state"] == "retrying" and f"127.0.0.1:{later.port}" in (t["error"] or "") for t in tasks)

    wait_until(retrying, timeout=30, what="the task to report the unreachable search server")
    assert runner.alive()
    try:
        later.start()
        client = OpenSearch(hosts=[later.url], timeout=60)
        wait_until(lambda: count(client, f"{name}-*") == 300, timeout=60, what="the documents, once it is up")
        assert all(t["state"] == "running" and t["error"] is None for t in runner.tasks())
        assert runner.terminate() == 0
        status = talos_cli("connect", "status", str(runner.config_path), "--url", talos_url)
        assert status.returncode == 0, status.stderr
        assert f"{name} (elasticsearch-sink): 0 task(s) running, lag 0 (group connect-{name})" in status.stdout
    finally:
        later.stop()


@pytest.mark.slow
@pytest.mark.hdfs
def test_an_unreachable_namenode_and_talos_are_retried_with_backoff(
    talos_url: str, hdfs: HdfsCluster, connect_runner: Any, name: str
) -> None:
    Admin(talos_url).create_topic(name, partitions=1)
    produce(talos_url, name, range(10))
    dead = f"http://127.0.0.1:{free_port()}"
    config = {
        "status_interval_s": 1,
        "connectors": [
            {"name": name, "type": "hdfs-sink", "topics": [name], "config": {"namenode": dead, "path": "/x"}},
            {
                "name": f"{name}-src",
                "type": "hdfs-source",
                "topic": name,
                "config": {"namenode": hdfs.webhdfs_url, "path": "/x"},
            },
        ],
    }
    runner = connect_runner(talos_url, config).start()
    wait_until(lambda: runner.tasks()[0]["restarts"] >= 2, timeout=30, what="two restarts of the sink")
    sink = runner.tasks()[0]
    assert sink["state"] == "retrying"
    assert "Connection refused" in sink["error"], sink["error"]
    assert runner.alive()
    assert runner.terminate() == 0

    offline = connect_runner(f"http://127.0.0.1:{free_port()}", config).start()
    wait_until(lambda: offline.tasks()[1]["restarts"] >= 1, timeout=30, what="the source to retry Talos")
    assert "TransportError" in offline.tasks()[1]["error"]
    assert offline.alive()
    assert offline.terminate() == 0


def test_a_status_port_in_use_is_a_clear_error_before_anything_starts(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "ok.yaml"
    connector = {"name": "s", "type": "elasticsearch-sink", "topics": ["a"], "config": {"hosts": ["http://h:9200"]}}
    path.write_text(yaml.safe_dump({"connectors": [connector]}))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = talos_cli("connect", "run", str(path), "--status-port", str(port), "--url", "http://127.0.0.1:1")
    assert result.returncode == 1
    assert f"cannot serve the status on port {port}" in result.stderr
    assert "Traceback" not in result.stderr and "task(s) of" not in result.stderr
