"""Fenced sink tasks (issue 22, part 2): a sink runner paused by a real SIGSTOP past its session, at the worst
moment of a flush, while a second runner of the same configuration takes its partitions over, then resumed.
Real ``talos standalone``, real HDFS (WebHDFS), real search server, ``talos connect run`` as real processes.

The worst moments are the sink's fault-injection points (``connectors.sink``): ``TALOS_CONNECT_PAUSE_BEFORE``
makes the runner stop itself right before the commit (records staged: a temporary file in HDFS, documents in
the search server) or right before publishing (commit accepted: the HDFS file not yet renamed into place).
Either way the files must hold every record of the topic exactly once.
"""

from __future__ import annotations

import posixpath
import signal
from pathlib import Path
from typing import Any

import orjson
import pytest
from hdfs import InsecureClient
from opensearchpy import OpenSearch

from connectors.config import HdfsSinkSettings
from connectors.hdfs.files import file_name, temp_name
from connectors.hdfs.sink import TMP_DIR, HdfsSinkWriter
from connectors.sink import PAUSE_ENV, group_name
from server.devservices import HdfsCluster, SearchServer, wait_until
from talos import Admin
from tests.connectors.conftest import ConnectProcess, one_connector
from tests.connectors.test_elasticsearch_sink import all_documents, count
from tests.connectors.test_hdfs_sink import (
    PARTITIONS,
    check_exactly_once,
    produce,
    topic_contents,
    visible_records,
)

SESSION_S = 2


def stopped(runner: ConnectProcess) -> bool:
    """The runner's process is stopped (SIGSTOP): its state in /proc is ``T``."""
    assert runner.process is not None
    stat = Path(f"/proc/{runner.process.pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def start_paused_at(runner: ConnectProcess, step: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Start ``runner`` with the fault-injection hook armed at ``step`` (only this process inherits it)."""
    with monkeypatch.context() as env:
        env.setenv(PAUSE_ENV, step)
        runner.start()


def wait_paused(runner: ConnectProcess, step: str) -> None:
    wait_until(
        lambda: f"fault injection: pausing before {step}" in runner.logs() and stopped(runner),
        timeout=60,
        what=f"the runner to stop itself before {step}",
        interval=0.05,
    )


def resume(runner: ConnectProcess) -> None:
    assert runner.process is not None
    runner.process.signal(signal.SIGCONT)
    wait_until(lambda: not stopped(runner) and runner.status() is not None, timeout=30, what="the runner to resume")


def committed_offsets(url: str, topic: str) -> dict[int, int | None]:
    """The sink group's committed offset of each partition of ``topic`` (None: never committed)."""
    with Admin(url) as admin:
        rows = admin.describe_group(group_name(topic))["partitions"]
    return {row["partition"]: row["committed"] for row in rows if row["topic"] == topic}


@pytest.mark.slow
@pytest.mark.hdfs
@pytest.mark.parametrize("step", ["commit", "publish"])
def test_a_runner_paused_past_its_session_mid_flush_leaves_every_record_in_exactly_one_file(
    talos_url: str,
    hdfs: HdfsCluster,
    connect_runner: Any,
    name: str,
    step: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    Admin(talos_url).create_topic(name, partitions=PARTITIONS)
    root = f"/sink/{name}"
    settings = {"namenode": hdfs.webhdfs_url, "path": root, "session_timeout_s": SESSION_S, "roll_ms": 300}
    config = one_connector(name, "hdfs-sink", settings)
    client = InsecureClient(hdfs.webhdfs_url)

    paused = connect_runner(talos_url, config)
    start_paused_at(paused, step, monkeypatch)  # up before there is anything to write: it answers its status
    produce(talos_url, name, range(300))
    wait_paused(paused, step)
    # What it holds is staged under +tmp; nothing is visible yet.
    assert visible_records(client, root, name) == 0
    tmp_dirs = [posixpath.join(root, TMP_DIR, name, str(partition)) for partition in range(PARTITIONS)]
    staged = [file for d in tmp_dirs if client.status(d, strict=False) is not None for file in client.list(d)]
    assert staged, "the paused runner staged no file"

    # More records, so that the successor's files end elsewhere than the paused runner's staged ones: a stale
    # rename would then overlap them, not merely collide with an identical name.
    produce(talos_url, name, range(300, 600))
    successor = connect_runner(talos_url, config).start()  # gets the partitions once the paused runner's locks lapse
    wait_until(lambda: visible_records(client, root, name) >= 600, timeout=60, what="the successor to write all")
    assert stopped(paused)  # still paused: everything so far is the successor's doing

    resume(paused)  # its flush goes on: commit (refused) or rename (after the successor completed it)
    produce(talos_url, name, range(600, 700))
    wait_until(lambda: visible_records(client, root, name) >= 700, timeout=60, what="the last records")
    # The stale flush ended harmlessly: no task failed (a rename whose file had gone used to raise).
    assert [task["restarts"] for task in paused.tasks()] == [0], paused.logs()
    assert paused.terminate() == 0
    assert successor.terminate() == 0

    assert check_exactly_once(client, root, name, talos_url) == 700
    expected = topic_contents(talos_url, name)
    totals = {p: len([k for k in expected if k[0] == p]) for p in range(PARTITIONS)}
    assert committed_offsets(talos_url, name) == totals
    if step == "commit":
        assert "commit refused" in paused.logs()  # fenced by the coordinator: nothing of it was published
    else:
        assert "were committed but not renamed; renamed into place" in successor.logs()


def write(client: InsecureClient, path: str, data: bytes) -> None:
    client.write(path, data=data, overwrite=True)


def stage(client: InsecureClient, directory: str, final: str, token: str, data: bytes) -> None:
    """A complete staged file, as a sink task leaves it before its commit."""
    write(client, posixpath.join(directory, temp_name(final, token, len(data))), data)


@pytest.mark.slow
@pytest.mark.hdfs
def test_open_renames_committed_staged_files_and_deletes_the_others(hdfs: HdfsCluster, name: str) -> None:
    """The successor's ``open``, against real HDFS through the sink's own WebHDFS client: a staged file that
    continues the partition's files and ends below the committed offset was committed by a predecessor that
    never renamed it (renamed now); the others were never committed (deleted); it resumes after the files."""
    root = f"/fencing/{name}"
    client = InsecureClient(hdfs.webhdfs_url)
    tp = (name, 0)
    directory = posixpath.join(root, name, "0")
    tmp = posixpath.join(root, TMP_DIR, name, "0")

    def final(first: int, last: int) -> str:
        return file_name(name, 0, first, last, "jsonl")

    write(client, posixpath.join(directory, final(0, 9)), b"published\n")
    stage(client, tmp, final(10, 19), "aaaa", b"committed 10-19\n")
    # A stale writer's file of the same range, paused half way: not complete, so never renamed into place.
    write(client, posixpath.join(tmp, temp_name(final(10, 19), "0000", 100)), b"committed 10-1")
    stage(client, tmp, final(20, 24), "bbbb", b"committed 20-24\n")
    stage(client, tmp, final(25, 29), "cccc", b"staged, never committed\n")
    stage(client, tmp, final(5, 14), "dddd", b"a stale overlapping one\n")
    stage(client, tmp, final(10, 14), "eeee", b"a shorter stale one\n")

    writer = HdfsSinkWriter(HdfsSinkSettings(namenode=hdfs.webhdfs_url, path=root))
    try:
        assert writer.open([tp], {tp: 25}) == {tp: 25}
    finally:
        writer.close()
    assert sorted(client.list(directory)) == [final(0, 9), final(10, 19), final(20, 24)]
    with client.read(posixpath.join(directory, final(10, 19))) as reader:
        assert reader.read() == b"committed 10-19\n"
    with client.read(posixpath.join(directory, final(20, 24))) as reader:
        assert reader.read() == b"committed 20-24\n"
    assert client.status(tmp, strict=False) is None  # the never committed ones are gone

    # A staged file whose final file exists already (its writer renamed it after all) is only deleted; with no
    # committed offset, nothing staged is committed.
    stage(client, tmp, final(20, 24), "ffff", b"renamed already\n")
    stage(client, tmp, final(25, 29), "gggg", b"never committed\n")
    writer = HdfsSinkWriter(HdfsSinkSettings(namenode=hdfs.webhdfs_url, path=root))
    try:
        assert writer.open([tp], {}) == {tp: 25}
    finally:
        writer.close()
    assert sorted(client.list(directory)) == [final(0, 9), final(10, 19), final(20, 24)]
    with client.read(posixpath.join(directory, final(20, 24))) as reader:
        assert reader.read() == b"committed 20-24\n"
    assert client.status(tmp, strict=False) is None

    # No file yet: the committed staged file is the partition's first.
    other = (name, 1)
    stage(client, posixpath.join(root, TMP_DIR, name, "1"), file_name(name, 1, 3, 7, "jsonl"), "h", b"x\n")
    writer = HdfsSinkWriter(HdfsSinkSettings(namenode=hdfs.webhdfs_url, path=root))
    try:
        assert writer.open([other], {other: 8}) == {other: 8}
    finally:
        writer.close()
    assert client.list(posixpath.join(root, name, "1")) == [file_name(name, 1, 3, 7, "jsonl")]


@pytest.mark.slow
@pytest.mark.search
def test_an_elasticsearch_runner_paused_before_its_commit_is_refused_and_nothing_is_lost_or_doubled(
    talos_url: str, search: SearchServer, connect_runner: Any, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    Admin(talos_url).create_topic(name, partitions=PARTITIONS)
    settings = {
        "hosts": [search.url],
        "index": name,
        "session_timeout_s": SESSION_S,
        "batch_size": 1000,
        "flush_ms": 300,
    }
    config = one_connector(name, "elasticsearch-sink", settings)
    search_client = OpenSearch(hosts=[search.url], timeout=60)

    paused = connect_runner(talos_url, config)
    start_paused_at(paused, "commit", monkeypatch)
    produce(talos_url, name, range(300))
    wait_paused(paused, "commit")
    indexed_while_paused = count(search_client, name)
    assert indexed_while_paused > 0  # its documents are in, its offsets not committed
    assert committed_offsets(talos_url, name) == dict.fromkeys(range(PARTITIONS))  # none committed

    produce(talos_url, name, range(300, 600))
    successor = connect_runner(talos_url, config).start()
    wait_until(lambda: count(search_client, name) >= 600, timeout=60, what="the successor to index all")
    wait_until(
        lambda: sum(o or 0 for o in committed_offsets(talos_url, name).values()) == 600,
        timeout=30,
        what="the successor to commit all",
    )
    committed_by_successor = committed_offsets(talos_url, name)

    resume(paused)
    wait_until(lambda: "commit refused" in paused.logs(), timeout=30, what="the paused runner's commit to be refused")
    # Refused, so the offsets are the successor's still (the paused runner's would be lower: it had 300 records).
    assert committed_offsets(talos_url, name) == committed_by_successor
    produce(talos_url, name, range(600, 700))
    wait_until(lambda: count(search_client, name) >= 700, timeout=60, what="the last records")
    assert paused.terminate() == 0
    assert successor.terminate() == 0

    expected = topic_contents(talos_url, name)
    documents = all_documents(search_client, name)  # raises on an id seen twice
    assert len(documents) == len(expected) == 700
    for (partition, offset), value in expected.items():
        assert value is not None
        assert documents[f"{name}-{partition}-{offset}"]["n"] == orjson.loads(value)["n"]
    totals = {p: len([k for k in expected if k[0] == p]) for p in range(PARTITIONS)}
    assert committed_offsets(talos_url, name) == totals  # both stopped gracefully: all committed
