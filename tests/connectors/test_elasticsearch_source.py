"""The Elasticsearch source against a real search server (osmem-server) and a real Talos server."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from typing import Any

import orjson
import pytest
from opensearchpy import OpenSearch

from connectors.checkpoints import CheckpointStore
from connectors.source import SOURCE_HEADER
from server.devservices import SearchServer, wait_until
from talos import Admin
from tests.connectors.conftest import Feeder, crash_loop, one_connector
from tests.connectors.test_hdfs_source import read_topic, topic_count

pytestmark = [pytest.mark.search, pytest.mark.slow]


class Index:
    """Documents indexed into the search server, remembered by id."""

    def __init__(self, client: OpenSearch, name: str) -> None:
        self.client = client
        self.name = name
        self.ids: list[str] = []
        client.indices.create(index=name, body={"mappings": {"properties": {"ts": {"type": "long"}}}})

    def add(self, count: int) -> None:
        for start in range(0, count, 2000):  # bulks the search server indexes in well under its timeout
            lines = []
            for _ in range(min(2000, count - start)):
                n = len(self.ids)
                self.ids.append(f"doc-{n}")
                lines.append(orjson.dumps({"index": {"_index": self.name, "_id": f"doc-{n}"}}))
                lines.append(orjson.dumps({"ts": 1_700_000_000_000 + n // 3, "n": n}))  # ties: three per timestamp
            answer = self.client.bulk(body=b"\n".join(lines) + b"\n", refresh=True)
            assert not answer["errors"]


def source_config(name: str, search: SearchServer, **settings: Any) -> dict[str, Any]:
    # A killed runner's task holds its lease this long: the restarted runner waits it out.
    config = {"hosts": [search.url], "index": name, "timestamp_field": "ts", "lease_s": 1.5, **settings}
    return one_connector(name, "elasticsearch-source", config)


def check_exactly_once(url: str, name: str, ids: list[str]) -> None:
    messages = read_topic(url, name)
    keys = Counter((m.key or b"").decode() for m in messages)
    assert not [k for k, n in keys.items() if n > 1], "documents written twice"
    assert set(keys) == set(ids)
    for message in messages:
        assert message.header(SOURCE_HEADER) == f"{name}/{message.key.decode()}".encode()  # type: ignore[union-attr]
        assert f"doc-{orjson.loads(message.value or b'')['n']}".encode() == message.key


def test_kill_9_at_random_points_writes_every_document_exactly_once(
    talos_url: str, search: SearchServer, connect_runner: Any, name: str
) -> None:
    Admin(talos_url).create_topic(name, partitions=2)
    index = Index(OpenSearch(hosts=[search.url], timeout=60), name)
    index.add(30_000)
    runner = connect_runner(talos_url, source_config(name, search, follow=True, batch_size=200, poll_ms=100))
    steps = itertools.count()

    with Feeder(lambda: next(steps) < 1000 and index.add(20), interval_s=0.1):
        at_kill = crash_loop(runner, kills=6, progress=lambda: topic_count(talos_url, name), seed=11, max_extra_s=0.3)
    assert all(0 < n < len(index.ids) for n in at_kill), f"every kill must land mid-run: {at_kill}"

    runner.start()
    wait_until(lambda: topic_count(talos_url, name) >= len(index.ids), timeout=120, what="every document")
    assert runner.terminate() == 0
    check_exactly_once(talos_url, name, index.ids)


def test_without_follow_the_runner_finishes_and_a_rerun_adds_only_new_documents(
    talos_url: str, search: SearchServer, connect_runner: Any, name: str
) -> None:
    Admin(talos_url).create_topic(name, partitions=2)
    index = Index(OpenSearch(hosts=[search.url], timeout=60), name)
    index.add(250)
    runner = connect_runner(talos_url, source_config(name, search, batch_size=100))
    for _ in range(2):
        assert runner.start(wait=False).wait() == 0  # read to the end, then exits by itself
        assert "finished" in runner.logs()
        index.add(40)
    assert runner.start(wait=False).wait() == 0
    check_exactly_once(talos_url, name, index.ids)


def test_following_finds_documents_with_the_newest_timestamp_that_became_searchable_later(
    talos_url: str, search: SearchServer, connect_runner: Any, name: str
) -> None:
    Admin(talos_url).create_topic(name, partitions=1)
    client = OpenSearch(hosts=[search.url], timeout=60)
    index = Index(client, name)

    def add(doc_id: str, ts: int | None) -> None:
        body = {"n": int(doc_id.split("-")[1])} if ts is None else {"ts": ts, "n": int(doc_id.split("-")[1])}
        client.index(index=name, id=doc_id, body=body, refresh=True)
        index.ids.append(doc_id)

    add("doc-5", 1000)
    add("doc-6", 1000)
    add("doc-1", 900)
    runner = connect_runner(talos_url, source_config(name, search, follow=True, batch_size=2, poll_ms=50)).start()
    wait_until(lambda: topic_count(talos_url, name) >= 3, timeout=30, what="3 documents")
    add("doc-2", 1000)  # same timestamp as the newest read, lower id: after it in no search_after order
    add("doc-7", 1001)
    wait_until(lambda: topic_count(talos_url, name) >= 5, timeout=30, what="the late ones")
    client.index(index=name, id="doc-9", body={"n": 9}, refresh=True)  # no timestamp: never read
    add("doc-8", 1002)  # ... and it hides nothing after it
    wait_until(lambda: topic_count(talos_url, name) >= 6, timeout=30, what="the one after")
    checkpoints = Admin(talos_url).offsets("__connect_offsets", CheckpointStore(talos_url).partition(name))
    time.sleep(1.0)  # 20 polls with nothing new: the newest timestamp's documents come back, and are not news
    again = Admin(talos_url).offsets("__connect_offsets", CheckpointStore(talos_url).partition(name))
    assert again["latest"] == checkpoints["latest"]
    assert runner.terminate() == 0
    runner.start()  # a restart reads nothing again
    add("doc-3", 1002)
    wait_until(lambda: topic_count(talos_url, name) >= 7, timeout=30, what="after the restart")
    assert runner.terminate() == 0
    check_exactly_once(talos_url, name, index.ids)
