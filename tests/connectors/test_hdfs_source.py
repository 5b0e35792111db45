"""The HDFS source against a real HDFS (WebHDFS) and a real Talos server: files appear and grow while the
runner is killed -9 at random points; in the end every line is in the topic exactly once."""

from __future__ import annotations

import itertools
import posixpath
from collections import Counter
from typing import Any

import orjson
import pytest
from hdfs import InsecureClient

from connectors.checkpoints import CheckpointStore
from connectors.source import CONNECTOR_HEADER, SOURCE_HEADER
from server.devservices import HdfsCluster, wait_until
from talos import Admin, Consumer, Message
from tests.connectors.conftest import Feeder, crash_loop, one_connector, talos_cli

pytestmark = [pytest.mark.hdfs, pytest.mark.slow]


def topic_count(url: str, topic: str) -> int:
    with Admin(url) as admin:
        return sum(p.latest or 0 for p in admin.describe_topic(topic).partition_offsets)


def read_topic(url: str, topic: str) -> list[Message]:
    total = topic_count(url, topic)
    out: list[Message] = []
    with Consumer(url, topics=[topic]) as consumer:
        while len(out) < total:
            out += consumer.poll(timeout=1.0)
    return out


def source_config(name: str, hdfs: HdfsCluster, tasks: int = 2, **settings: Any) -> dict[str, Any]:
    # A killed runner's tasks hold their leases this long: the restarted runner waits it out.
    config = {"namenode": hdfs.webhdfs_url, "path": f"/in/{name}", "lease_s": 1.5, **settings}
    return one_connector(name, "hdfs-source", config, tasks=tasks)


class Files:
    """Lines written to HDFS files, remembered so the test knows exactly what the topic must hold."""

    def __init__(self, client: InsecureClient, directory: str) -> None:
        self.client = client
        self.directory = directory
        self.lines: list[str] = []
        self.client.makedirs(directory)

    def write(self, file: str, count: int, *, append: bool) -> None:
        start = len(self.lines)
        lines = [orjson.dumps({"id": f"{file}#{start + i}", "file": file}).decode() for i in range(count)]
        self.lines += lines
        data = "".join(line + "\n" for line in lines)
        self.client.write(posixpath.join(self.directory, file), data=data, append=append, overwrite=not append)


def check_exactly_once(
    messages: list[Message], lines: list[str], name: str, renamed: dict[str, str] | None = None
) -> None:
    ids = Counter(orjson.loads(m.value or b"")["id"] for m in messages)
    duplicated = [i for i, n in ids.items() if n > 1]
    missing = {orjson.loads(line)["id"] for line in lines} - set(ids)
    assert not duplicated, f"lines written twice: {duplicated[:10]}"
    assert not missing, f"lines missing: {sorted(missing)[:10]}"
    assert len(messages) == len(lines)
    for message in messages:
        assert message.header(CONNECTOR_HEADER) == name.encode()
        source = (message.header(SOURCE_HEADER) or b"").decode()
        file = orjson.loads(message.value or b"")["file"]
        assert source.startswith((f"/in/{name}/{file}#", f"/in/{name}/{(renamed or {}).get(file)}#"))
        assert message.key == orjson.loads(message.value or b"")["id"].encode()  # key_field


def test_kill_9_at_random_points_writes_every_line_exactly_once(
    talos_url: str, hdfs: HdfsCluster, connect_runner: Any, name: str
) -> None:
    Admin(talos_url).create_topic(name, partitions=2)
    files = Files(InsecureClient(hdfs.webhdfs_url), f"/in/{name}")
    for n in range(6):
        files.write(f"app-{n}.jsonl", 15000, append=False)  # enough that every kill lands mid-way
    runner = connect_runner(talos_url, source_config(name, hdfs, key_field="id", batch_size=200, poll_ms=100))
    steps = itertools.count()

    def feed() -> None:  # grow the files, and now and then start a new one
        step = next(steps)
        if step % 10 == 9:
            files.write(f"new-{step}.jsonl", 20, append=False)
        else:
            files.write(f"app-{step % 6}.jsonl", 10, append=True)

    with Feeder(feed, interval_s=0.1):
        at_kill = crash_loop(runner, kills=6, progress=lambda: topic_count(talos_url, name), seed=10, max_extra_s=0.3)
    assert all(0 < n < len(files.lines) for n in at_kill), f"every kill must land mid-run: {at_kill}"

    runner.start()
    wait_until(lambda: topic_count(talos_url, name) >= len(files.lines), timeout=120, what="every line")
    assert runner.terminate() == 0
    check_exactly_once(read_topic(talos_url, name), files.lines, name)


def test_two_runners_of_one_source_one_works_the_other_takes_over_when_it_dies(
    talos_url: str, hdfs: HdfsCluster, connect_runner: Any, name: str
) -> None:
    """Before named producers, two runners of one source config each wrote every line (issue 22, part 1)."""
    Admin(talos_url).create_topic(name, partitions=2)
    files = Files(InsecureClient(hdfs.webhdfs_url), f"/in/{name}")
    for n in range(4):
        files.write(f"app-{n}.jsonl", 3000, append=False)
    config = source_config(name, hdfs, key_field="id", batch_size=200, poll_ms=50)
    first = connect_runner(talos_url, config).start()
    wait_until(lambda: topic_count(talos_url, name) > 0, timeout=60, what="the first runner to work")
    second = connect_runner(talos_url, config).start()
    wait_until(
        lambda: {t["state"] for t in second.tasks()} == {"standby"}, timeout=30, what="the second runner to stand by"
    )
    assert {t["state"] for t in first.tasks()} <= {"running", "finished"}
    files.write("app-0.jsonl", 500, append=True)  # more work while both run
    first.kill()  # kill -9 mid-run: its leases lapse, then the second takes over
    wait_until(lambda: {t["state"] for t in second.tasks()} == {"running"}, timeout=30, what="the takeover")
    files.write("late.jsonl", 500, append=False)
    wait_until(lambda: topic_count(talos_url, name) >= len(files.lines), timeout=120, what="every line")
    assert second.terminate() == 0
    check_exactly_once(read_topic(talos_url, name), files.lines, name)


def test_a_smaller_tasks_retires_the_removed_tasks_checkpoints_and_loses_nothing(
    talos_url: str, hdfs: HdfsCluster, connect_runner: Any, name: str
) -> None:
    Admin(talos_url).create_topic(name, partitions=2)
    files = Files(InsecureClient(hdfs.webhdfs_url), f"/in/{name}")
    for n in range(6):
        files.write(f"app-{n}.jsonl", 200, append=False)
    three = connect_runner(talos_url, source_config(name, hdfs, tasks=3, key_field="id", batch_size=50, poll_ms=50))
    three.start()
    wait_until(lambda: topic_count(talos_url, name) >= len(files.lines), timeout=60, what="every line")
    assert three.terminate() == 0
    checkpoints = CheckpointStore(talos_url)
    assert sorted(checkpoints.load(name)) == ["0", "1", "2"]

    for n in range(6):
        files.write(f"app-{n}.jsonl", 20, append=True)  # read by the one task left, after the others' positions
    one = connect_runner(talos_url, source_config(name, hdfs, tasks=1, key_field="id", batch_size=50, poll_ms=50))
    one.start()
    wait_until(lambda: sorted(checkpoints.load(name)) == ["0"], timeout=60, what="the removed tasks' retirement")
    wait_until(lambda: topic_count(talos_url, name) >= len(files.lines), timeout=60, what="the appended lines")
    assert one.terminate() == 0
    check_exactly_once(read_topic(talos_url, name), files.lines, name)
    assert len(checkpoints.load(name)["0"]["state"]["files"]) == 6  # it holds every file's position now


def test_complete_lines_only_and_a_new_runner_resumes_from_the_checkpoint(
    talos_url: str, hdfs: HdfsCluster, connect_runner: Any, name: str
) -> None:
    Admin(talos_url).create_topic(name, partitions=2)
    client = InsecureClient(hdfs.webhdfs_url)
    files = Files(client, f"/in/{name}")
    files.write("a.jsonl", 5, append=False)
    path = posixpath.join(f"/in/{name}", "a.jsonl")
    client.write(path, data='{"id": "a.jsonl#5", "fi', append=True)  # a line still being written
    client.write(posixpath.join(f"/in/{name}", "_skipped.jsonl"), data='{"id": "hidden"}\n')
    client.write(posixpath.join(f"/in/{name}", "b.jsonl._COPYING_"), data='{"id": "copying"}\n')
    runner = connect_runner(talos_url, source_config(name, hdfs, tasks=1, key_field="id", poll_ms=50)).start()
    wait_until(lambda: topic_count(talos_url, name) >= 5, timeout=30, what="5 lines")
    assert runner.terminate() == 0
    assert topic_count(talos_url, name) == 5  # not the incomplete line, nor hidden or half-copied files

    client.write(path, data='le": "a.jsonl"}\n', append=True)
    files.lines.append('{"id": "a.jsonl#5", "file": "a.jsonl"}')
    files.write("a.jsonl", 3, append=True)
    runner.start()
    wait_until(lambda: topic_count(talos_url, name) >= 9, timeout=30, what="the rest")
    assert runner.terminate() == 0
    check_exactly_once(read_topic(talos_url, name), files.lines, name)
    size = client.status(path)["length"]
    status = talos_cli("connect", "status", str(runner.config_path), "--url", talos_url)
    assert f"{name} (hdfs-source): checkpoints of 1 task(s)\n  task 0: 1 file(s), {size} bytes read" in status.stdout


def test_a_rotated_file_keeps_its_position_and_a_replaced_one_is_read_from_its_start(
    talos_url: str, hdfs: HdfsCluster, connect_runner: Any, name: str
) -> None:
    Admin(talos_url).create_topic(name, partitions=1)
    client = InsecureClient(hdfs.webhdfs_url)
    files = Files(client, f"/in/{name}")
    files.write("app.log", 4, append=False)
    files.write("other.log", 2, append=False)
    runner = connect_runner(talos_url, source_config(name, hdfs, tasks=1, poll_ms=50, key_field="id"))
    runner.start()
    wait_until(lambda: topic_count(talos_url, name) >= 6, timeout=30, what="6 lines")
    assert runner.terminate() == 0

    directory = f"/in/{name}"
    client.rename(posixpath.join(directory, "app.log"), posixpath.join(directory, "app.log.1"))  # rotated
    files.write("app.log", 3, append=False)  # a new file under the old name
    files.write("other.log", 2, append=False)  # replaced by another file (overwrite): read from its start
    runner.start()
    wait_until(lambda: topic_count(talos_url, name) >= 11, timeout=30, what="the new files")
    assert runner.terminate() == 0
    check_exactly_once(read_topic(talos_url, name), files.lines, name, renamed={"app.log": "app.log.1"})
