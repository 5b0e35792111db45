"""The console's cluster page (``/portal/cluster``) on a real cluster of three, in headless Chromium.

The admin, signed in on s1, sees the three servers serving, the ring's members with their virtual nodes, the
partitions per owner adding up to every partition there is and matching ``GET /v1/routes``, and every server's
traffic (s1's own, the others' ``/metrics``). One owner is killed with SIGKILL; once the ring dropped it, the
reloaded page shows it gone, its partitions with the survivors, and the ring change that moved them. A tenant
is refused the page. A screenshot of every page goes to ``test-artifacts/console-cluster/``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

import pytest
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from talos import Admin
from tests.cluster.conftest import CLUSTER_TOKEN, Cluster, get_json, post_json
from tests.conftest import ARTIFACTS
from tests.e2e.test_portal_browser import sign_in
from tests.helpers import headless_chromium, page_screenshot

pytestmark = [pytest.mark.hdfs, pytest.mark.zookeeper, pytest.mark.browser]

SHOTS = ARTIFACTS / "console-cluster"
TOPIC = "spread"
PARTITIONS = 12


@pytest.fixture
def browser() -> Iterator[Chrome]:
    with headless_chromium("1280,1400", SHOTS / "cluster-last-page.html") as driver:
        yield driver


def shot(driver: Chrome, name: str) -> None:
    page_screenshot(driver, SHOTS / f"{name}.png")


def all_routes(url: str) -> dict[str, dict[int, str]]:
    """Every topic's partition → owner, as ``GET /v1/routes`` says (the admin sees every topic)."""
    topics = get_json(f"{url}/v1/routes")["topics"]
    assert isinstance(topics, dict)
    return {name: {int(e["partition"]): str(e["owner"]) for e in entries} for name, entries in topics.items()}


def shown_owners(driver: WebDriver) -> dict[str, int]:
    return {
        str(row.get_attribute("data-server")): int(row.get_attribute("data-partitions") or -1)
        for row in driver.find_elements(By.CSS_SELECTOR, "#ownership tr.owner")
    }


def shown_partitions(driver: WebDriver, server: str, topic: str) -> set[int]:
    """The partitions of ``topic`` the page lists for ``server`` (in its ``<details>``, open or not)."""
    # (a script, not find_elements: none found would wait out the driver's implicit wait)
    found = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), li => li.dataset.partitions)",
        f"#owned-{server} li.owned[data-topic='{topic}']",
    )
    return {int(p) for partitions in found for p in partitions.split()}


def shown_number(driver: WebDriver, selector: str) -> int:
    return int(driver.find_element(By.CSS_SELECTOR, selector).text.replace(",", ""))


def check_ownership(driver: WebDriver, routes: dict[str, dict[int, str]], servers: set[str]) -> None:
    counts: dict[str, int] = defaultdict(int)
    for table in routes.values():
        for owner in table.values():
            counts[owner] += 1
    shown = shown_owners(driver)
    assert set(shown) == servers
    assert shown == {server: counts[server] for server in servers}
    assert sum(shown.values()) == sum(len(t) for t in routes.values())
    assert int(driver.find_element(By.ID, "partitions-total").text) == sum(shown.values())
    for server in servers:
        assert shown_partitions(driver, server, TOPIC) == {p for p, o in routes[TOPIC].items() if o == server}


def open_cluster_page(driver: Chrome, url: str) -> dict[str, dict[int, str]]:
    """Load the page; the routes it must agree with, the same before and after it loaded (the servers create
    their internal topics when they first need them: one created meanwhile would be on one side only)."""
    for _attempt in range(5):
        before = all_routes(url)
        driver.get(f"{url}/portal/cluster")
        assert driver.find_element(By.ID, "servers")
        if all_routes(url) == before:
            return before
    raise AssertionError("the topics kept changing while the page loaded")


@pytest.mark.quick_reassign
def test_cluster_page_follows_a_crash(cluster: Cluster, browser: Chrome) -> None:
    s1 = cluster.servers["s1"]
    status, _ = post_json(f"{s1.url}/v1/topics", {"name": TOPIC, "partitions": PARTITIONS})
    assert status in (200, 201)
    cluster.write(TOPIC, prefix="m", numbers=range(24), partitions=PARTITIONS)
    version, members = cluster.ring(s1)

    sign_in(browser, s1.url, CLUSTER_TOKEN)
    routes = open_cluster_page(browser, s1.url)
    assert set(routes[TOPIC].values()) == {"s1", "s2", "s3"}, "12 partitions spread over three servers"
    shot(browser, "01-three-servers")
    rows = browser.find_elements(By.CSS_SELECTOR, "#servers tr.server")
    assert [r.get_attribute("data-server") for r in rows] == ["s1", "s2", "s3"]
    assert all(r.get_attribute("data-registered") == "yes" and r.get_attribute("data-in-ring") == "yes" for r in rows)
    assert all("serving" in r.text for r in rows)
    assert "(this server)" in rows[0].text
    assert browser.find_element(By.ID, "ring-version").text == str(version)
    shown_members = {
        str(m.get_attribute("data-member")): int(m.get_attribute("data-vnodes") or 0)
        for m in browser.find_elements(By.CSS_SELECTOR, "#ring tr.ring-member")
    }
    assert shown_members == members
    check_ownership(browser, routes, {"s1", "s2", "s3"})
    for server in ("s1", "s2", "s3"):
        traffic = browser.find_element(By.ID, f"traffic-{server}")
        assert "unavailable" not in traffic.text, traffic.text
        assert ("in-process" if server == "s1" else "/metrics") in traffic.text
    metered = sum(shown_number(browser, f"#traffic-{s} td[data-field='messages_metered']") for s in ("s1", "s2", "s3"))
    assert metered >= 24, "the 24 messages written are metered at their owners"
    # The ring changes s1 adopted since it started: servers joining as the cluster came up, none leaving.
    assert not [c.text for c in browser.find_elements(By.CSS_SELECTOR, "#moves tr.ring-change") if "left:" in c.text]

    victim = "s2"
    victim_partitions = {p for p, o in routes[TOPIC].items() if o == victim}
    cluster.servers[victim].kill()
    cluster.wait_members({"s1", "s3"}, timeout=30, via=s1)
    new_routes = open_cluster_page(browser, s1.url)
    browser.execute_script("document.querySelectorAll('details').forEach(d => d.open = true)")
    shot(browser, "02-after-kill")
    gone = browser.find_element(By.ID, "server-s2")
    assert gone.get_attribute("data-in-ring") == "no" and gone.get_attribute("data-registered") == "no"
    assert "gone" in gone.text
    ring_members = browser.find_elements(By.CSS_SELECTOR, "#ring tr.ring-member")
    assert {m.get_attribute("data-member") for m in ring_members} == {"s1", "s3"}
    assert victim not in {o for table in new_routes.values() for o in table.values()}
    check_ownership(browser, new_routes, {"s1", "s3"})
    change = browser.find_element(By.CSS_SELECTOR, "#moves tr.ring-change")
    assert "left: s2" in change.text
    moves = {
        int(m.get_attribute("data-partition") or -1): (m.get_attribute("data-before"), m.get_attribute("data-after"))
        for m in change.find_elements(By.CSS_SELECTOR, f"li.move[data-topic='{TOPIC}']")
    }
    assert moves == {p: ("s2", new_routes[TOPIC][p]) for p in victim_partitions}
    assert "unavailable" not in browser.find_element(By.ID, "traffic-s3").text

    with Admin(s1.url, token=CLUSTER_TOKEN) as admin:
        admin.create_tenant("acme")
        tenant_token = admin.create_token("acme")["token"]
    sign_in(browser, s1.url, tenant_token)
    browser.get(f"{s1.url}/portal/cluster")
    shot(browser, "03-tenant-refused")
    assert "the admin's" in browser.find_element(By.ID, "error-message").text
    assert 'id="servers"' not in browser.page_source  # (find_elements would wait out the implicit wait)
