"""The Elasticsearch sink against a real search server (osmem-server) and a real Talos server."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest
from opensearchpy import OpenSearch

from server.devservices import SearchServer, wait_until
from talos import Admin, Producer
from tests.connectors.conftest import Feeder, crash_loop, one_connector
from tests.connectors.test_hdfs_sink import PARTITIONS, produce, topic_contents

pytestmark = [pytest.mark.search, pytest.mark.slow]


def count(client: OpenSearch, index: str) -> int:
    client.indices.refresh(index=index, params={"ignore_unavailable": "true", "allow_no_indices": "true"})
    answer = client.count(index=index, params={"ignore_unavailable": "true", "allow_no_indices": "true"})
    return int(answer["count"])


def all_documents(client: OpenSearch, index: str) -> dict[str, dict[str, Any]]:
    docs: dict[str, dict[str, Any]] = {}
    after = None
    while True:
        body: dict[str, Any] = {"size": 1000, "sort": [{"_id": "asc"}], "query": {"match_all": {}}}
        if after:
            body["search_after"] = after
        hits = client.search(index=index, body=body)["hits"]["hits"]
        if not hits:
            return docs
        for hit in hits:
            assert hit["_id"] not in docs
            docs[hit["_id"]] = hit["_source"]
        after = hits[-1]["sort"]


def sink_config(name: str, search: SearchServer, **settings: Any) -> dict[str, Any]:
    config = {"hosts": [search.url], "index": f"{name}-{{yyyy.MM.dd}}", "session_timeout_s": 2, **settings}
    return one_connector(name, "elasticsearch-sink", config, tasks=2)


def test_kill_9_at_random_points_leaves_every_record_indexed_exactly_once(
    talos_url: str, search: SearchServer, connect_runner: Any, name: str
) -> None:
    Admin(talos_url).create_topic(name, partitions=PARTITIONS)
    produce(talos_url, name, range(3000))
    client = OpenSearch(hosts=[search.url], timeout=60)
    runner = connect_runner(talos_url, sink_config(name, search, batch_size=40, flush_ms=200))
    batches = itertools.count(150)

    def feed() -> None:
        start = next(batches) * 20
        produce(talos_url, name, range(start, start + 20))

    with Feeder(feed, interval_s=0.1):
        at_kill = crash_loop(runner, kills=6, progress=lambda: count(client, f"{name}-*"), seed=9)
    expected = topic_contents(talos_url, name)
    assert all(0 < n < len(expected) for n in at_kill), f"every kill must land mid-run: {at_kill}"

    runner.start()
    wait_until(lambda: count(client, f"{name}-*") >= len(expected), timeout=120, what="the sink to catch up")
    assert runner.terminate() == 0
    documents = all_documents(client, f"{name}-*")
    assert len(documents) == len(expected)
    for (partition, offset), value in expected.items():
        document = documents[f"{name}-{partition}-{offset}"]
        assert value is not None
        assert document["n"] == orjson.loads(value)["n"]
        assert document["talos"]["offset"] == offset
        assert document["talos"]["key"] == f"k{document['n']}"


def test_template_date_indices_and_non_json_values(
    talos_url: str, search: SearchServer, connect_runner: Any, name: str
) -> None:
    Admin(talos_url).create_topic(name, partitions=1)
    day = 1_700_000_000_000  # 2023-11-14 UTC
    with Producer(talos_url) as producer:
        producer.send(name, value=b'{"amount": 5}', timestamp=day)
        producer.send(name, value=b"plain text", timestamp=day + 86_400_000)
        producer.send(name, value=b"\xff\x00", timestamp=day + 86_400_000)
    template = {"index_patterns": [f"{name}-*"], "template": {"mappings": {"properties": {"amount": {"type": "long"}}}}}
    config = sink_config(name, search, batch_size=10, flush_ms=100, template=template)
    config["connectors"][0]["tasks"] = 1
    runner = connect_runner(talos_url, config).start()
    client = OpenSearch(hosts=[search.url], timeout=60)
    wait_until(lambda: count(client, f"{name}-*") == 3, timeout=30, what="3 documents")
    assert runner.terminate() == 0
    assert client.indices.get_index_template(name=name)["index_templates"][0]["name"] == name
    assert set(client.indices.get(index=f"{name}-*")) == {f"{name}-2023.11.14", f"{name}-2023.11.15"}
    documents = all_documents(client, f"{name}-*")
    assert documents[f"{name}-0-0"]["amount"] == 5
    assert documents[f"{name}-0-1"]["value"] == "plain text"
    assert documents[f"{name}-0-2"]["value_b64"] == "/wA="


def test_documents_that_cannot_be_indexed_fail_the_task_or_are_skipped(
    talos_url: str, search: SearchServer, connect_runner: Any, name: str
) -> None:
    Admin(talos_url).create_topic(name, partitions=1)
    with Producer(talos_url) as producer:
        producer.send(name, value=b'{"amount": 5}')
        producer.send(name, value=b'{"amount": {"not": "a number"}}')  # refused by the mapping: 400
        producer.send(name, value=b'{"amount": 6}', timestamp=10**17)  # no date: no index name
        producer.send(name, value=b'{"amount": 7}')
    template = {"index_patterns": [f"{name}-*"], "template": {"mappings": {"properties": {"amount": {"type": "long"}}}}}
    config = sink_config(name, search, batch_size=10, flush_ms=100, template=template)
    config["connectors"][0]["tasks"] = 1
    failing = connect_runner(talos_url, config).start()
    wait_until(
        lambda: "DocumentRefusedError" in (failing.tasks()[0]["error"] or ""), timeout=30, what="the task to fail"
    )
    assert failing.tasks()[0]["state"] == "retrying" and failing.alive()
    assert failing.terminate() == 0

    config["connectors"][0]["config"]["on_error"] = "skip"
    skipping = connect_runner(talos_url, config).start()
    client = OpenSearch(hosts=[search.url], timeout=60)
    wait_until(lambda: skipping.tasks()[0]["skipped"] == 2, timeout=30, what="two documents skipped")
    wait_until(lambda: count(client, f"{name}-*") == 2, timeout=30, what="the two good documents")
    # The failing run's bulk request indexed the good documents already, and a task counts its skips as it goes
    # but its records once the batch is committed: wait for that count rather than read it at once.
    wait_until(lambda: skipping.tasks()[0]["records"] == 2, timeout=30, what="two records written")
    assert skipping.terminate() == 0
    assert sorted(d["amount"] for d in all_documents(client, f"{name}-*").values()) == [5, 7]
