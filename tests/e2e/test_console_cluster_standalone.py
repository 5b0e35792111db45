"""The console's cluster page (``/portal/cluster``) of a standalone server, in headless Chromium: the admin,
following the navigation, sees this one server serving every partition, no ring and no moves, and its own
traffic from its in-process metrics; a tenant is told the page is the admin's. Screenshots go to
``test-artifacts/console-cluster/standalone-*.png``."""

from __future__ import annotations

import json
import secrets
import urllib.request
from collections.abc import Iterator

import pytest
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By

from server.devservices import StandaloneServer
from talos import Admin, Producer
from tests.conftest import ARTIFACTS
from tests.e2e.test_portal_browser import click_and_load, sign_in
from tests.helpers import headless_chromium, page_screenshot, running_standalone

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ADMIN_TOKEN = f"admin-{secrets.token_urlsafe(24)}"
SHOTS = ARTIFACTS / "console-cluster"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StandaloneServer, str]]:
    env = {"TALOS_ADMIN_TOKEN": ADMIN_TOKEN, "TALOS_AUTH": "on"}
    with running_standalone(tmp_path_factory.mktemp("console") / "data", env=env) as server:
        with Admin(server.url, token=ADMIN_TOKEN) as admin:
            admin.create_tenant("acme")
            token = admin.create_token("acme")["token"]
            admin.create_topic("orders", partitions=3)
        with Producer(server.url, token=ADMIN_TOKEN) as producer:
            for i in range(5):
                producer.send("orders", f"m{i}".encode(), partition=i % 3).result(30)
        yield server, token


@pytest.fixture(scope="module")
def browser() -> Iterator[Chrome]:
    with headless_chromium("1280,1400", SHOTS / "standalone-last-page.html") as driver:
        yield driver


def shot(driver: Chrome, name: str) -> None:
    page_screenshot(driver, SHOTS / f"standalone-{name}.png")


def routed_partitions(url: str) -> int:
    request = urllib.request.Request(f"{url}/v1/routes", headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        topics = json.load(answer)["topics"]
    return sum(len(entries) for entries in topics.values())


def test_standalone_cluster_page_shows_one_server(standalone: tuple[StandaloneServer, str], browser: Chrome) -> None:
    server, tenant_token = standalone
    sign_in(browser, server.url, ADMIN_TOKEN)
    click_and_load(browser, "nav-cluster")
    assert browser.current_url.endswith("/portal/cluster")
    shot(browser, "01-admin")
    rows = browser.find_elements(By.CSS_SELECTOR, "#servers tr.server")
    assert len(rows) == 1
    assert "standalone" in rows[0].text and server.url in rows[0].text
    assert browser.find_element(By.ID, "ring-standalone")
    owners = browser.find_elements(By.CSS_SELECTOR, "#ownership tr.owner")
    assert len(owners) == 1
    assert int(owners[0].get_attribute("data-partitions") or -1) == routed_partitions(server.url)
    orders = browser.find_element(By.CSS_SELECTOR, "#ownership li.owned[data-topic='orders']")
    assert orders.get_attribute("data-partitions") == "0 1 2"
    traffic = browser.find_element(By.CSS_SELECTOR, "#traffic tr.traffic")
    assert "in-process" in traffic.text
    messages_in = traffic.find_element(By.CSS_SELECTOR, "td[data-field='messages_in']").text
    assert int(messages_in.replace(",", "")) >= 5

    sign_in(browser, server.url, tenant_token)
    browser.get(f"{server.url}/portal/cluster")
    shot(browser, "02-tenant")
    assert "the admin's" in browser.find_element(By.ID, "error-message").text
    assert 'id="servers"' not in browser.page_source  # (find_elements would wait out the implicit wait)
