"""The portal's message trace page in a real browser (Debian's headless Chromium through Selenium) against a
real server with auth on: a tenant signs in, follows the navigation to "Message trace", looks a message up
by partition and offset and sees its timeline (produced, delivered, committed, in that order, with its
traceparent), then by key; another tenant is told the topic is unknown. Screenshots go to
``test-artifacts/portal-trace/``."""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Iterator

import pytest
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from server.devservices import StandaloneServer, wait_until
from talos import Admin, Consumer, Producer
from tests.conftest import ARTIFACTS
from tests.e2e.test_portal_browser import click_and_load, sign_in
from tests.helpers import headless_chromium, page_screenshot, running_standalone

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ADMIN_TOKEN = f"admin-{secrets.token_urlsafe(24)}"
SHOTS = ARTIFACTS / "portal-trace"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StandaloneServer, str, str, int]]:
    env = {"TALOS_ADMIN_TOKEN": ADMIN_TOKEN, "TALOS_AUTH": "on", "TALOS_TRACE_FLUSH_INTERVAL_S": "0.2"}
    data = tmp_path_factory.mktemp("trace") / "data"
    with running_standalone(data, env=env) as server, Admin(server.url, token=ADMIN_TOKEN) as admin:
        admin.create_tenant("acme")
        admin.create_tenant("globex")
        acme = admin.create_token("acme")["token"]
        globex = admin.create_token("globex")["token"]
        with Admin(server.url, token=acme) as tenant:
            tenant.create_topic("orders", partitions=1)
            tenant.alter_topic("orders", trace_sample=1)
            with Producer(server.url, token=acme) as producer:
                offset = (
                    producer.send("orders", b"hello", key=b"customer-9", headers={"traceparent": TRACEPARENT})
                    .result(30)
                    .offset
                )
            with Consumer(server.url, token=acme, group="billing", topics=["orders"], start="earliest") as c:
                wait_until(lambda: bool(c.poll(timeout=0.5)), timeout=30, what="the message consumed")
                c.commit()

            def complete() -> bool:
                kinds = {e["event"] for e in tenant.trace("orders", 0, offset)["events"]}
                return {"produced", "delivered", "committed"} <= kinds

            wait_until(complete, timeout=15, what="the whole timeline traced")
        yield server, acme, globex, offset


@pytest.fixture(scope="module")
def browser() -> Iterator[Chrome]:
    shutil.rmtree(SHOTS, ignore_errors=True)
    with headless_chromium("1280,1200", SHOTS / "last-page.html") as driver:
        yield driver


def shot(driver: Chrome, name: str) -> None:
    page_screenshot(driver, SHOTS / f"{name}.png")


def fill(driver: Chrome, element_id: str, text: str) -> None:
    field = driver.find_element(By.ID, element_id)
    field.clear()
    if text:
        field.send_keys(text)


def test_trace_page_shows_a_message_timeline(traced: tuple[StandaloneServer, str, str, int], browser: Chrome) -> None:
    server, acme, globex, offset = traced
    sign_in(browser, server.url, acme)
    click_and_load(browser, "nav-trace")
    assert browser.current_url.endswith("/portal/trace")
    fill(browser, "trace-topic", "orders")
    fill(browser, "trace-partition", "0")
    fill(browser, "trace-offset", str(offset))
    click_and_load(browser, "trace-submit")
    shot(browser, "01-by-offset")
    kinds = [e.get_attribute("class") for e in browser.find_elements(By.CSS_SELECTOR, "#trace-results li.trace-event")]
    assert [k.split("event-")[1] for k in kinds if k] == ["produced", "delivered", "committed"]
    results = browser.find_element(By.ID, "trace-results").text
    assert "orders / 0 @ 0 · key customer-9" in results
    assert TRACEPARENT in results and "tenant=acme" in results and "group=billing" in results

    fill(browser, "trace-partition", "")
    fill(browser, "trace-offset", "")
    fill(browser, "trace-key", "customer-9")
    click_and_load(browser, "trace-submit")
    shot(browser, "02-by-key")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#trace-results .trace-message")) == 1
    assert "key customer-9" in browser.find_element(By.ID, "trace-results").text

    sign_in(browser, server.url, globex)
    browser.get(f"{server.url}/portal/trace?topic=orders&partition=0&offset={offset}")
    WebDriverWait(browser, 15).until(lambda d: d.find_elements(By.ID, "trace-error"), "the page answered")
    shot(browser, "03-other-tenant")
    assert "unknown topic 'orders'" in browser.find_element(By.ID, "trace-error").text
    assert not browser.find_elements(By.ID, "trace-results")
