"""The quota portal in a real browser (Debian's headless Chromium through Selenium) against a real server
with auth on and a metering store holding two weeks of a tenant's traffic: sign in, see the usage charts,
ask for a quota under the modelled threshold (approved at once), an exaggerated one (rejected with the
reason), and a borderline one that the admin approves in the admin view. A screenshot of every page visited
(the whole page, numbered in the order of the visits) goes to ``test-artifacts/portal/``."""

from __future__ import annotations

import itertools
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select, WebDriverWait

from metering.duckdb_store import DuckDbStore
from metering.store import MinuteUsage
from server.devservices import StandaloneServer
from talos import Admin
from tests.conftest import ARTIFACTS
from tests.helpers import headless_chromium, page_screenshot, running_standalone

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ADMIN_TOKEN = f"admin-{secrets.token_urlsafe(24)}"
HOUR_MS = 3600_000
KIB = 1024
SHOTS = ARTIFACTS / "portal"
_shot_numbers = itertools.count(1)
# What the API calls a quota field; a person reads "Produce", "Fetch", "Requests", "Partitions".
FIELD_NAMES = ("produce_bytes_per_s", "fetch_bytes_per_s", "requests_per_s")


def two_weeks_of_traffic(path: Path) -> None:
    """What the metering job would have stored: ``orders`` flat at 200 KiB/s; ``clicks`` at 300 KiB/s for ten
    days, then 900 KiB/s for the last four (real growth, wholly inside the recent half of the history, so
    an hour passing during the test cannot move it into the earlier half)."""
    now = int(time.time() * 1000)
    last = now - now % HOUR_MS - HOUR_MS
    rows = []
    for hour in range(14 * 24):
        at = last - hour * HOUR_MS
        clicks = 900 if hour < 4 * 24 else 300
        for topic, rate in (("orders", 200), ("clicks", clicks)):
            size = rate * KIB * 3600
            rows.append(
                MinuteUsage(at, "acme", topic, 0, size, size // 1000, size // 2, size // 2000, 3600, 0, 1.0, 1.0)
            )
    DuckDbStore(path).ingest(rows, {0: 0})


@pytest.fixture(scope="module")
def portal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StandaloneServer, str]]:
    base = tmp_path_factory.mktemp("portal")
    two_weeks_of_traffic(base / "usage.duckdb")
    env = {"TALOS_ADMIN_TOKEN": ADMIN_TOKEN, "TALOS_AUTH": "on", "TALOS_METERING_STORE": str(base / "usage.duckdb")}
    with running_standalone(base / "data", env=env) as server, Admin(server.url, token=ADMIN_TOKEN) as admin:
        admin.create_tenant("acme")
        token = admin.create_token("acme", name="portal")["token"]
        with Admin(server.url, token=token) as tenant:
            tenant.create_topic("orders", partitions=2)
            tenant.create_topic("clicks", partitions=2)
        admin.set_quota(topic="clicks", produce_bytes_per_s=1024 * KIB)
        yield server, token


@pytest.fixture(scope="module")
def browser() -> Iterator[Chrome]:
    shutil.rmtree(SHOTS, ignore_errors=True)  # numbered by visit: an older run's pages would mix with this run's
    with headless_chromium("1280,1600", SHOTS / "last-page.html") as driver:
        yield driver


def shot(driver: Chrome, name: str) -> Path:
    """The whole page (the dashboard is taller than the window), numbered in the order taken."""
    return page_screenshot(driver, SHOTS / f"{next(_shot_numbers):02d}-{name}.png")


def page_text(driver: WebDriver) -> str:
    """What a person reads: the rendered text, without attributes or scripts."""
    return driver.find_element(By.TAG_NAME, "body").text


def assert_no_field_names(driver: WebDriver) -> None:
    text = page_text(driver)
    assert not [name for name in FIELD_NAMES if name in text], text


def sign_in(driver: WebDriver, url: str, token: str) -> None:
    """Sign in, and wait for the answer: a portal page, or the sign-in page saying why not."""
    driver.delete_all_cookies()
    driver.get(f"{url}/portal/login")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "sign-in").click()
    WebDriverWait(driver, 15).until(
        lambda d: "/portal/login" not in d.current_url or 'id="message"' in d.page_source,
        "the sign-in answered",
    )


def click_and_load(driver: WebDriver, element_id: str) -> None:
    """Click what submits a form, and wait until the next page has replaced this one."""
    old = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(By.ID, element_id).click()
    WebDriverWait(driver, 15).until(lambda _driver: replaced(old), f"a new page after {element_id}")


def replaced(element: WebElement) -> bool:
    """``expected_conditions.staleness_of``, also when chromedriver asks about the element in the middle of the
    navigation and answers "Node with given id does not belong to the document" (seen once in CI)."""
    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in str(exc):
            return True
        raise
    return False


def ask(
    driver: Chrome, url: str, name: str, *, topic: str, resource: str, value: str, unit: str, why: str
) -> tuple[str, str]:
    """Send the request form (a screenshot of it filled in, and of the request page it leads to); the request
    page's status and reason."""
    driver.get(f"{url}/portal")
    Select(driver.find_element(By.ID, "request-topic")).select_by_value(topic)
    Select(driver.find_element(By.ID, "request-resource")).select_by_value(resource)
    driver.find_element(By.ID, "request-value").send_keys(value)
    Select(driver.find_element(By.ID, "request-unit")).select_by_visible_text(unit)
    driver.find_element(By.ID, "request-why").send_keys(why)
    shot(driver, f"{name}-form")
    click_and_load(driver, "request-submit")
    shot(driver, f"{name}-request")
    assert_no_field_names(driver)
    return driver.find_element(By.ID, "request-status").text, driver.find_element(By.ID, "request-reason").text


def test_a_tenant_signs_in_and_sees_usage_charts_and_quotas(
    portal: tuple[StandaloneServer, str], browser: Chrome
) -> None:
    server, token = portal
    browser.get(f"{server.url}/portal")
    assert "/portal/login" in browser.current_url  # no session: the sign-in page
    shot(browser, "login")
    sign_in(browser, server.url, "talos_000000000000_" + "x" * 43)
    assert "not valid" in browser.find_element(By.ID, "message").text
    shot(browser, "login-token-not-valid")
    sign_in(browser, server.url, token)
    assert browser.current_url.rstrip("/").endswith("/portal")
    shot(browser, "dashboard-24h")
    assert browser.find_element(By.ID, "usage-source").text == (
        "Bytes per second into and out of each topic, from the metering store."
    )
    assert "the this" not in page_text(browser)
    captions = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "figure.usage-chart figcaption")]
    assert len(captions) == 2 and all(c.startswith("Shown: the last 24 h, from ") for c in captions), captions

    browser.get(f"{server.url}/portal?period=14d")
    charts = {c.get_attribute("data-topic"): c for c in browser.find_elements(By.CSS_SELECTOR, "figure.usage-chart")}
    assert set(charts) == {"orders", "clicks"}
    for chart in charts.values():
        assert chart.find_elements(By.CSS_SELECTOR, "svg polyline"), "a line of traffic"
        assert len(chart.find_elements(By.CSS_SELECTOR, "svg circle")) > 100  # hourly points over two weeks
        assert chart.find_element(By.TAG_NAME, "figcaption").text.startswith("Shown: the last 14 d, from ")
    headings = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#quotas th")]
    assert headings == ["Applies to", "Produce", "Fetch", "Requests", "Partitions"]
    assert "1 MiB/s" in browser.find_element(By.ID, "quota-topic-clicks").text
    resource = browser.find_element(By.ID, "request-resource")
    assert resource.accessible_name.startswith("Limit on")  # the label names the control
    choices = {o.get_attribute("value"): o.text for o in Select(resource).options}
    assert choices["produce_bytes_per_s"] == "Produce (bytes written per second)"
    assert choices["partitions"] == "Partitions (number of partitions)"
    assert_no_field_names(browser)
    shot(browser, "dashboard-14d")
    assert token not in browser.page_source


def test_requests_are_approved_rejected_or_left_to_the_admin_who_approves(
    portal: tuple[StandaloneServer, str], browser: Chrome
) -> None:
    server, token = portal
    sign_in(browser, server.url, token)
    shot(browser, "dashboard")

    status, reason = ask(
        browser,
        server.url,
        "under-threshold",
        topic="orders",
        resource="produce_bytes_per_s",
        value="800",
        unit="KiB",
        why="promo",
    )
    assert status == "approved", reason

    status, reason = ask(
        browser,
        server.url,
        "exaggerated",
        topic="orders",
        resource="produce_bytes_per_s",
        value="200",
        unit="MiB",
        why="future",
    )
    assert status == "rejected"
    assert "Rejected" in reason and "MiB/s" in reason  # the reason, with the figures behind it ...
    assert "times the modelled threshold" in reason or "x the modelled threshold" in reason  # ... and the problem

    status, reason = ask(
        browser,
        server.url,
        "borderline",
        topic="clicks",
        resource="produce_bytes_per_s",
        value="8",
        unit="MiB",
        why="campaign",
    )
    assert status == "pending", reason
    pending_id = browser.current_url.rsplit("/", 1)[1]

    browser.get(f"{server.url}/portal")
    assert "800 KiB/s" in browser.find_element(By.ID, "quota-topic-orders").text  # the approval took effect
    rows = {r.get_attribute("data-id"): r.text for r in browser.find_elements(By.CSS_SELECTOR, "tr.request-row")}
    assert "rejected" in rows[str(int(pending_id) - 1)] and "pending" in rows[pending_id]
    assert "Produce: 8 MiB/s" in rows[pending_id] and "topic clicks" in rows[pending_id]
    assert_no_field_names(browser)
    shot(browser, "dashboard-with-requests")

    click_and_load(browser, "logout")
    shot(browser, "signed-out")
    sign_in(browser, server.url, ADMIN_TOKEN)
    assert browser.current_url.endswith("/portal/admin")
    assert [r.get_attribute("data-id") for r in browser.find_elements(By.CSS_SELECTOR, "tr.pending-row")] == [
        pending_id
    ]
    assert "Produce: 8 MiB/s" in browser.find_element(By.CSS_SELECTOR, "tr.pending-row").text
    assert_no_field_names(browser)
    shot(browser, "admin-queue")
    browser.find_element(By.ID, f"reason-{pending_id}").send_keys("campaign checked with the team")
    click_and_load(browser, f"approve-{pending_id}")
    assert browser.find_element(By.ID, "queue-empty").text == "No request is waiting."
    decided = {r.get_attribute("data-id"): r.text for r in browser.find_elements(By.CSS_SELECTOR, "tr.decided-row")}
    assert "approved" in decided[pending_id] and "admin" in decided[pending_id]
    shot(browser, "admin-approved")

    click_and_load(browser, "logout")
    sign_in(browser, server.url, token)
    assert "8 MiB/s" in browser.find_element(By.ID, "quota-topic-clicks").text
    shot(browser, "dashboard-after-the-approval")
    browser.get(f"{server.url}/portal/requests/{pending_id}")
    assert browser.find_element(By.ID, "request-status").text == "approved"
    assert "campaign checked" in browser.find_element(By.ID, "request-reason").text
    assert "Produce (bytes written per second)" in page_text(browser)
    assert_no_field_names(browser)
    shot(browser, "request-approved-by-the-admin")
    browser.get(f"{server.url}/portal/audit")
    actions = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "tr.audit-row")]
    assert any("quota_request.approved" in a and "admin" in a for a in actions)
    assert any("quota_request.rejected" in a for a in actions)
    shot(browser, "audit")
    with Admin(server.url, token=token) as tenant:
        assert tenant.quotas("acme")["topics"]["clicks"]["produce_bytes_per_s"] == 8 * 1024 * KIB


def test_a_tenant_cannot_open_the_admin_view_or_post_without_the_form_nonce(
    portal: tuple[StandaloneServer, str], browser: Chrome
) -> None:
    server, token = portal
    sign_in(browser, server.url, token)
    shot(browser, "dashboard-before-the-admin-view")
    browser.get(f"{server.url}/portal/admin")
    assert "403" in browser.find_element(By.TAG_NAME, "h1").text
    assert browser.find_element(By.ID, "error-message").text == "The admin view needs the admin token."
    shot(browser, "error-403")
    # A form posted from elsewhere carries the cookie (not with SameSite=Strict, but say it did) but no nonce.
    answer = browser.execute_script(
        "const r = await fetch('/portal/requests', {method: 'POST', headers: {'content-type':"
        " 'application/x-www-form-urlencoded'}, body: 'resource=partitions&requested=1000'}); return r.status;"
    )
    assert answer == 403
