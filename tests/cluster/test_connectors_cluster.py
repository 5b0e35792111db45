"""Connectors run by a cluster of three servers (issue 41): an HDFS sink and an Elasticsearch sink made over the REST
API spread their tasks over the servers; the server running most of them is killed -9 while records keep coming;
its task processes die with it, the tasks move to the live servers and resume, and every record is in HDFS and in
the index exactly once. Then the console, signed in on a server that is not the connectors' coordinator, lists both
and pauses and resumes one through the coordinator (headless Chromium; screenshots in
``test-artifacts/console-connectors-cluster/``)."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import httpx
import pytest
from hdfs import InsecureClient
from opensearchpy import OpenSearch
from selenium.webdriver.common.by import By

from server.devservices import HdfsCluster, SearchServer, wait_until
from talos import Admin
from tests.cluster.conftest import AUTH, CLUSTER_TOKEN, Cluster
from tests.conftest import ARTIFACTS
from tests.connectors.conftest import Feeder, search  # noqa: F401  (the session's search server)
from tests.connectors.test_elasticsearch_sink import all_documents, count
from tests.connectors.test_hdfs_sink import PARTITIONS, check_exactly_once, produce, topic_contents, visible_records
from tests.e2e.test_portal_browser import click_and_load, sign_in
from tests.helpers import headless_chromium, page_screenshot, process_alive

pytestmark = [pytest.mark.hdfs, pytest.mark.search, pytest.mark.quick_reassign, pytest.mark.browser]

SHOTS = ARTIFACTS / "console-connectors-cluster"

TOPIC = "orders"


def status(cluster: Cluster, name: str) -> dict[str, Any] | None:
    """The connector's status from any live server; None while its coordinator moves."""
    try:
        answer = httpx.get(f"{cluster.any_alive().url}/connectors/{name}/status", headers=AUTH, timeout=10)
    except httpx.HTTPError:
        return None
    return answer.json() if answer.status_code == 200 else None


def running_on(cluster: Cluster, name: str) -> list[str] | None:
    """The worker of each task, if every task is running."""
    found = status(cluster, name)
    if found is None or any(t["state"] != "RUNNING" for t in found["tasks"]):
        return None
    return [t["worker_id"] for t in found["tasks"]]


def test_sinks_made_over_rest_keep_every_record_once_through_kill_9_of_their_server(
    cluster: Cluster,
    hdfs: HdfsCluster,
    search: SearchServer,  # noqa: F811
) -> None:
    entry = cluster.servers["s1"].url
    with Admin(entry) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS)
    produce(entry, TOPIC, range(1000))
    common = {"tasks.max": "2", "topics": TOPIC, "session_timeout_s": "3"}
    configs = {
        "orders-to-hdfs": {
            "connector.class": "hdfs-sink",
            "namenode": hdfs.webhdfs_url,
            "path": "/cluster-sink",
            "roll_bytes": "3000",
            "roll_ms": "300",
            **common,
        },
        "orders-to-search": {
            "connector.class": "elasticsearch-sink",
            "hosts": search.url,
            "index": "orders-cluster",
            "batch_size": "50",
            "flush_ms": "200",
            **common,
        },
    }
    for name, config in configs.items():  # made through different servers
        via = cluster.servers["s2" if name.endswith("search") else "s3"].url
        made = httpx.post(f"{via}/connectors", json={"name": name, "config": config}, headers=AUTH, timeout=30)
        assert made.status_code == 201, made.text
    listed = httpx.get(f"{cluster.servers['s1'].url}/connectors", headers=AUTH, timeout=10).json()
    assert sorted(listed) == sorted(configs)

    files = InsecureClient(hdfs.webhdfs_url)
    index = OpenSearch(hosts=[search.url], timeout=60)
    wait_until(lambda: visible_records(files, "/cluster-sink", TOPIC) > 0, timeout=90, what="the HDFS sink's files")
    wait_until(lambda: count(index, "orders-cluster") > 0, timeout=90, what="the search sink's documents")
    placed = {name: running_on(cluster, name) for name in configs}
    assert all(placed.values()), placed
    workers = Counter(worker for tasks in placed.values() for worker in tasks or [])
    # Four tasks on the ring: spread over more than one server.
    assert len(workers) > 1, workers
    victim_url = workers.most_common(1)[0][0]
    victim = next(s for s in cluster.servers.values() if s.url == victim_url)
    pids = [
        t["pid"]
        for name in configs
        for t in (status(cluster, name) or {"tasks": []})["tasks"]
        if t["worker_id"] == victim_url
    ]
    assert pids and all(process_alive(pid) for pid in pids)

    numbers = itertools.count(1000, 20)

    def feed() -> None:
        start = next(numbers)
        produce(cluster.any_alive(besides=victim.server_id).url, TOPIC, range(start, start + 20))

    with Feeder(feed, interval_s=0.1):
        wait_until(lambda: visible_records(files, "/cluster-sink", TOPIC) >= 500, timeout=90, what="HDFS progress")
        victim.kill()
        wait_until(lambda: not any(process_alive(pid) for pid in pids), timeout=10, what="its tasks to die with it")

        def moved() -> bool:
            for name in configs:
                tasks = running_on(cluster, name)
                if tasks is None or victim_url in tasks:
                    return False
            return True

        wait_until(moved, timeout=90, what="every task running on a live server")
    survivor = cluster.any_alive().url
    total = len(topic_contents(survivor, TOPIC))
    wait_until(lambda: visible_records(files, "/cluster-sink", TOPIC) >= total, timeout=120, what="HDFS to catch up")
    wait_until(lambda: count(index, "orders-cluster") >= total, timeout=120, what="the index to catch up")
    assert check_exactly_once(files, "/cluster-sink", TOPIC, survivor) == total
    documents = all_documents(index, "orders-cluster")
    expected = topic_contents(survivor, TOPIC)
    assert len(documents) == len(expected) == total
    for partition, offset in expected:
        assert documents[f"orders-{partition}-{offset}"]["talos"]["offset"] == offset

    # The console on a server that is not the coordinator: every page and action goes through the coordinator.
    coordinator = next(iter(cluster.routes("__connectors").values()))
    console = next(s for s in cluster.servers.values() if s.alive() and s.server_id != coordinator)
    with headless_chromium("1280,1400", SHOTS / "last-page.html") as driver:
        sign_in(driver, console.url, CLUSTER_TOKEN)
        driver.get(f"{console.url}/portal/connectors")
        rows = {
            str(r.get_attribute("data-connector")) for r in driver.find_elements(By.CSS_SELECTOR, "tr.connector-row")
        }
        assert rows == set(configs)
        page_screenshot(driver, SHOTS / "connectors.png")
        driver.get(f"{console.url}/portal/connectors/orders-to-search")
        workers = {cell.text for cell in driver.find_elements(By.CSS_SELECTOR, "tr.task-row td.task-worker")}
        assert workers and victim_url not in workers, workers
        page_screenshot(driver, SHOTS / "orders-to-search.png")
        click_and_load(driver, "pause-submit")
        assert driver.find_element(By.ID, "connector-state").text == "PAUSED"
        assert (status(cluster, "orders-to-search") or {})["connector"]["state"] == "PAUSED"
        page_screenshot(driver, SHOTS / "orders-to-search-paused.png")
        click_and_load(driver, "resume-submit")
        wait_until(lambda: running_on(cluster, "orders-to-search") is not None, timeout=60, what="resumed tasks")
