"""The operations console's consumer group and push subscription pages (issue 41) in a real browser (Debian's
headless Chromium through Selenium) against a real ``talos standalone`` with auth on and two tenants.

A tenant sees its group and not the other tenant's (whose page is a 404, as for a group that does not exist),
reads per partition the committed offset and lag and the lag chart, resets offsets to the earliest (a dry run
that changes nothing, checked through REST, then the apply button) and to a time, is refused a reset while the
group has a live member, and reads its push subscription's in-flight, redelivered and dead-lettered counts and
dead-letter topic. The admin sees both tenants' groups. A screenshot of every page goes to
``test-artifacts/console-groups/``. The pure helpers (parsing a time, the dry run's moves, the lag ring) are
tested first, without a browser."""

from __future__ import annotations

import secrets
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
import pytest
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from server.devservices import StandaloneServer, wait_until
from server.errors import ApiError
from server.portal.console_groups import (
    LagHistory,
    ResetSpec,
    lag_chart,
    parse_time,
    plan_moves,
    target_offset,
    topic_lags,
)
from talos import Admin, Producer
from tests.conftest import ARTIFACTS
from tests.e2e.test_portal_browser import click_and_load, sign_in
from tests.helpers import headless_chromium, page_screenshot, running_standalone

ADMIN_TOKEN = f"admin-{secrets.token_urlsafe(24)}"
SHOTS = ARTIFACTS / "console-groups"
HOUR_MS = 3600_000

# ---------------------------------------------------------------- the pure helpers


def test_parse_time_takes_milliseconds_or_an_iso_date_and_time() -> None:
    assert parse_time(" 1714564800000 ") == 1714564800000
    assert parse_time("2024-05-01T12:00:00Z") == 1714564800000
    assert parse_time("2024-05-01T12:00:00") == 1714564800000  # no offset given: UTC
    assert parse_time("2024-05-01 14:00:00.250+02:00") == 1714564800250
    for bad in ("yesterday", "", "-5", "1969-12-31T00:00:00Z"):
        with pytest.raises(ApiError) as caught:
            parse_time(bad)
        assert caught.value.status == 400


def test_reset_spec_from_the_form() -> None:
    spec = ResetSpec.from_form({"topic": "orders", "partition": "all", "to": "earliest", "value": ""})
    assert (spec.partition, spec.to, spec.to_json()) == (None, "earliest", {"topic": "orders", "to": "earliest"})
    spec = ResetSpec.from_form({"topic": "orders", "partition": "1", "to": "timestamp", "value": "2024-05-01T12:00Z"})
    assert spec.to_json() == {"topic": "orders", "to": "timestamp", "partition": 1, "timestamp": 1714564800000}
    assert spec.form() == {"topic": "orders", "partition": "1", "to": "timestamp", "value": "2024-05-01T12:00Z"}
    assert spec.words() == "orders, partition 1, to the first offset at or after 2024-05-01 12:00:00 UTC"
    assert ResetSpec.from_form({"topic": "t", "to": "offset", "value": "42"}).offset == 42
    for bad in (
        {"topic": "", "to": "earliest"},
        {"topic": "t", "to": "sideways"},
        {"topic": "t", "to": "offset", "value": "-1"},
        {"topic": "t", "to": "timestamp", "value": ""},
        {"topic": "t", "partition": "first", "to": "latest"},
    ):
        with pytest.raises(ApiError):
            ResetSpec.from_form(bad)


def test_the_dry_run_moves_each_partition_as_the_coordinator_would() -> None:
    assert target_offset("earliest", 3, 10) == 3
    assert target_offset("latest", 3, 10) == 10
    assert target_offset("offset", 3, 10, offset=1) == 3  # clamped into the partition's range
    assert target_offset("offset", 3, 10, offset=99) == 10
    assert target_offset("timestamp", 3, 10, by_time=6) == 6
    spec = ResetSpec("orders", None, "timestamp", timestamp=1)
    moves = plan_moves(spec, {0: 7, 1: 2}, {0: (0, 10), 1: (0, 6), 2: (0, 0)}, {0: 4, 1: 6, 2: 0})
    assert [(m.partition, m.current, m.new, m.change, m.lag_after) for m in moves] == [
        (0, 7, 4, "-3", 6),
        (1, 2, 6, "+4", 0),
        (2, None, 0, "new", 0),
    ]
    assert plan_moves(ResetSpec("o", 0, "latest"), {0: 5}, {0: (0, 5)})[0].change == "no change"


def test_topic_lags_and_the_lag_ring() -> None:
    rows = [
        {"topic": "a", "partition": 0, "lag": 3},
        {"topic": "a", "partition": 1, "lag": None},
        {"topic": "b", "partition": 0, "lag": 5},
    ]
    assert topic_lags(rows) == {"a": 3, "b": 5}
    history = LagHistory(keep=3, groups=2, min_gap_ms=1000)
    history.record("g", 1000, {"a": 1})
    history.record("g", 1500, {"a": 2})  # a reload: replaces the last sample
    history.record("g", 3000, {"a": 3})
    assert history.series("g") == {"a": [(1500, 2.0), (3000, 3.0)]}
    for at in (5000, 7000, 9000):
        history.record("g", at, {"a": at})
    assert [ms for ms, _ in history.series("g")["a"]] == [5000, 7000, 9000]  # the last ``keep``
    history.record("h", 1000, {"x": 1})
    history.record("i", 1000, {"x": 1})  # a third group: the least recently sampled ("g") is forgotten
    assert history.series("g") == {} and history.series("i") == {"x": [(1000, 1.0)]}


def test_the_lag_chart_reads_large_lags_in_thousands_or_millions() -> None:
    small = lag_chart({"a": [(0, 7.0), (1000, 999.0)]}, start_ms=0, end_ms=1000, title="t")
    assert ": 999 msg</title>" in small and ">1000 msg</text>" in small  # the point, and the axis's top
    assert ": 2.5 k msg</title>" in lag_chart({"a": [(0, 2500.0)]}, start_ms=0, end_ms=1000, title="t")
    large = lag_chart({"a": [(0, 2_500_000.0)]}, start_ms=0, end_ms=1000, title="t")
    assert ": 2.5 M msg</title>" in large and ">1.25 M msg</text>" in large  # the point, and the axis


# ---------------------------------------------------------------- in a browser


@dataclass
class Console:
    server: StandaloneServer
    acme: str
    globex: str
    reset_time_ms: int  # between orders/0's fourth and fifth message


def rest(console: Console, token: str, method: str, path: str, body: object = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {token}"}
    return httpx.request(method, console.server.url + path, json=body, headers=headers, timeout=30)


def committed(console: Console, group: str = "billing") -> dict[int, int]:
    """The group's committed offsets of ``orders``, through REST (not the page)."""
    answer = rest(console, console.acme, "GET", f"/v1/groups/{group}/offsets")
    answer.raise_for_status()
    return {o["partition"]: o["offset"] for o in answer.json()["offsets"] if o["topic"] == "orders"}


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """acme: ``orders`` (2 partitions: 10 and 6 messages, the first 4 of partition 0 and all of partition 1 an
    hour old, the rest ten minutes old), group ``billing`` committed at 7 and 2 (lag 3 and 4), and subscription
    ``alerts`` of ``alerts-in`` with one message dead-lettered, one redelivered and in flight, one in flight.
    globex: group ``ledger``."""
    env = {"TALOS_ADMIN_TOKEN": ADMIN_TOKEN, "TALOS_AUTH": "on"}
    data = tmp_path_factory.mktemp("console-groups") / "data"
    with running_standalone(data, env=env) as server, Admin(server.url, token=ADMIN_TOKEN) as admin:
        admin.create_tenant("acme")
        admin.create_tenant("globex")
        acme = admin.create_token("acme")["token"]
        globex = admin.create_token("globex")["token"]
        now = int(time.time() * 1000)
        old, recent = now - HOUR_MS, now - HOUR_MS // 6
        made = Console(server, acme, globex, now - HOUR_MS // 2)
        with Admin(server.url, token=acme) as tenant:
            tenant.create_topic("orders", partitions=2)
            tenant.create_topic("alerts-in", partitions=1)
            with Producer(server.url, token=acme) as producer:
                for i in range(10):
                    producer.send("orders", f"o{i}", partition=0, timestamp=old if i < 4 else recent)
                for i in range(6):
                    producer.send("orders", f"p{i}", partition=1, timestamp=old)
                for i in range(3):
                    producer.send("alerts-in", f"alert {i}")
                producer.flush()
            offsets = [
                {"topic": "orders", "partition": 0, "offset": 7},
                {"topic": "orders", "partition": 1, "offset": 2},
            ]
            rest(made, acme, "POST", "/v1/groups/billing/offsets", {"offsets": offsets}).raise_for_status()
            tenant.create_subscription(
                "alerts", "alerts-in", max_deliveries=2, ack_timeout_ms=120_000, start="earliest"
            )
            dead_and_redelivered(made)
        with Admin(server.url, token=globex) as other:
            other.create_topic("payments", partitions=1)
            with Producer(server.url, token=globex) as producer:
                producer.send("payments", "p").result(30)
            body = {"offsets": [{"topic": "payments", "partition": 0, "offset": 0}]}
            rest(made, globex, "POST", "/v1/groups/ledger/offsets", body).raise_for_status()
        yield made


def dead_and_redelivered(console: Console) -> None:
    """Lease the three messages of ``alerts``, give the first two back and take them again (second delivery),
    give the first back again: with ``max_deliveries`` 2 the next pull dead-letters it."""
    path = "/v1/subscriptions/alerts"

    def pull(most: int, wait_ms: int = 5000) -> list[dict[str, object]]:
        body = {"subscriber": "worker", "max_messages": most, "wait_ms": wait_ms}
        answer = rest(console, console.acme, "POST", f"{path}/pull", body)
        answer.raise_for_status()
        return list(answer.json()["messages"])

    def nack(messages: list[dict[str, object]]) -> None:
        items = [{"partition": m["partition"], "offset": m["offset"], "delivery": m["delivery"]} for m in messages]
        answer = rest(
            console, console.acme, "POST", f"{path}/settle", {"subscriber": "worker", "op": "nack", "messages": items}
        )
        answer.raise_for_status()
        assert answer.json()["results"] == ["ok"] * len(items)

    first = pull(3)
    assert [m["offset"] for m in first] == [0, 1, 2]
    nack(first[:2])
    again = pull(2)
    assert [(m["offset"], m["delivery"]) for m in again] == [(0, 2), (1, 2)]
    nack(again[:1])
    with Admin(console.server.url, token=console.acme) as tenant:
        wait_until(
            lambda: not pull(1, 0) and tenant.offsets("__sub-dlq.alerts", 0)["latest"] == 1,
            timeout=15,
            what="the first message dead-lettered",
        )


@pytest.fixture(scope="module")
def browser() -> Iterator[Chrome]:
    shutil.rmtree(SHOTS, ignore_errors=True)
    with headless_chromium("1280,1400", SHOTS / "last-page.html") as driver:
        yield driver


def shot(driver: Chrome, name: str) -> None:
    page_screenshot(driver, SHOTS / f"{name}.png")


def present(driver: Chrome, css: str) -> bool:
    """Whether the page has the element now (without the implicit wait for one to appear)."""
    driver.implicitly_wait(0)
    try:
        return bool(driver.find_elements(By.CSS_SELECTOR, css))
    finally:
        driver.implicitly_wait(5)


def text(driver: Chrome, element_id: str) -> str:
    return str(driver.find_element(By.ID, element_id).text)


def partitions(driver: Chrome) -> dict[int, tuple[str, str]]:
    """The group page's rows of ``orders``: partition → (committed offset, lag) as shown."""
    rows = driver.find_elements(By.CSS_SELECTOR, "tr.partition-row[data-topic='orders']")
    return {
        int(str(r.get_attribute("data-partition"))): (
            r.find_element(By.CLASS_NAME, "committed").text,
            r.find_element(By.CLASS_NAME, "lag").text,
        )
        for r in rows
    }


def moves(driver: Chrome) -> dict[int, tuple[str, str]]:
    """The dry run's rows: partition → (committed now, after the reset)."""
    rows = driver.find_elements(By.CSS_SELECTOR, "#moves-table tr.move-row")
    return {
        int(str(r.get_attribute("data-partition"))): (
            r.find_element(By.CLASS_NAME, "current").text,
            r.find_element(By.CLASS_NAME, "new").text,
        )
        for r in rows
    }


def dry_run(driver: Chrome, *, to: str, value: str = "", partition: str = "all") -> None:
    Select(driver.find_element(By.ID, "reset-topic")).select_by_value("orders")
    field = driver.find_element(By.ID, "reset-partition")
    field.clear()
    field.send_keys(partition)
    Select(driver.find_element(By.ID, "reset-to")).select_by_value(to)
    field = driver.find_element(By.ID, "reset-value")
    field.clear()
    if value:
        field.send_keys(value)
    click_and_load(driver, "reset-preview")


@pytest.mark.browser
@pytest.mark.slow
def test_a_tenant_sees_its_groups_and_their_lag(console: Console, browser: Chrome) -> None:
    sign_in(browser, console.server.url, console.acme)
    click_and_load(browser, "nav-groups")
    shot(browser, "01-groups-tenant")
    listed = [r.get_attribute("data-group") for r in browser.find_elements(By.CSS_SELECTOR, "tr.group-row")]
    assert listed == ["billing"]  # not globex's ledger
    row = browser.find_element(By.ID, "group-billing")
    assert row.find_element(By.CLASS_NAME, "group-state").text == "empty"
    assert row.find_element(By.CLASS_NAME, "group-members").text == "0"
    assert row.find_element(By.CLASS_NAME, "group-lag").text == "7"

    row.find_element(By.LINK_TEXT, "billing").click()
    wait_until(lambda: browser.current_url.endswith("/portal/groups/billing"), timeout=15, what="the group page")
    assert partitions(browser) == {0: ("7", "3"), 1: ("2", "4")}
    assert text(browser, "group-total-lag") == "7"
    assert browser.find_elements(By.CSS_SELECTOR, "figure.lag-chart svg circle")  # the first sample
    with Producer(console.server.url, token=console.acme) as producer:
        producer.send("orders", "one more", partition=1).result(30)
    time.sleep(1.1)  # samples closer than a second replace each other
    browser.refresh()
    assert partitions(browser)[1] == ("2", "5")
    points = browser.find_elements(By.CSS_SELECTOR, "figure.lag-chart svg circle title")
    assert [p.get_attribute("textContent").split(": ")[-1] for p in points] == ["7 msg", "8 msg"]
    shot(browser, "02-group")


@pytest.mark.browser
@pytest.mark.slow
def test_a_dry_run_changes_nothing_and_apply_resets(console: Console, browser: Chrome) -> None:
    sign_in(browser, console.server.url, console.acme)
    browser.get(f"{console.server.url}/portal/groups/billing")
    dry_run(browser, to="earliest")
    shot(browser, "03-dry-run-earliest")
    assert moves(browser) == {0: ("7", "0"), 1: ("2", "0")}
    assert committed(console) == {0: 7, 1: 2}  # nothing changed
    click_and_load(browser, "reset-apply")
    shot(browser, "04-reset-applied")
    assert "orders, all partitions, to the earliest offset" in text(browser, "reset-done")
    assert committed(console) == {0: 0, 1: 0}
    assert partitions(browser) == {0: ("0", "10"), 1: ("0", "7")}

    when = datetime.fromtimestamp(console.reset_time_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    dry_run(browser, to="timestamp", value=when)
    shot(browser, "05-dry-run-time")
    assert moves(browser) == {0: ("0", "4"), 1: ("0", "6")}  # partition 1: "one more", produced just now
    assert committed(console) == {0: 0, 1: 0}
    click_and_load(browser, "reset-apply")
    assert committed(console) == {0: 4, 1: 6}
    assert partitions(browser) == {0: ("4", "6"), 1: ("6", "1")}


@pytest.mark.browser
@pytest.mark.slow
def test_a_reset_is_refused_while_the_group_has_a_live_member(console: Console, browser: Chrome) -> None:
    sign_in(browser, console.server.url, console.acme)
    browser.get(f"{console.server.url}/portal/groups/billing")
    dry_run(browser, to="offset", value="1", partition="0")
    assert moves(browser) == {0: ("4", "1")}
    joined = rest(
        console,
        console.acme,
        "POST",
        "/v1/groups/billing/members",
        {"topics": ["orders"], "session_timeout_ms": 30_000},
    )
    joined.raise_for_status()
    member = joined.json()["member_id"]
    try:
        click_and_load(browser, "reset-apply")
        shot(browser, "06-reset-refused")
        assert "has live members" in text(browser, "reset-error")
        assert "empty group" in text(browser, "reset-error")
        assert committed(console) == {0: 4, 1: 6}
        assert text(browser, "group-member-count") == "1"
        dry_run(browser, to="earliest")  # the dry run says so too, and offers nothing to apply
        assert "has live members" in text(browser, "reset-error")
        assert not present(browser, "#reset-apply")
    finally:
        rest(console, console.acme, "DELETE", f"/v1/groups/billing/members/{member}").raise_for_status()


@pytest.mark.browser
@pytest.mark.slow
def test_subscriptions_show_their_counts_and_dead_letter_topic(console: Console, browser: Chrome) -> None:
    sign_in(browser, console.server.url, console.acme)
    browser.get(f"{console.server.url}/portal/groups")
    click_and_load(browser, "to-subscriptions")
    shot(browser, "07-subscriptions")
    row = browser.find_element(By.ID, "subscription-alerts")
    cells = {
        name: row.find_element(By.CLASS_NAME, name).text
        for name in ("sub-topic", "sub-in-flight", "sub-redelivered", "sub-dead")
    }
    assert cells == {"sub-topic": "alerts-in", "sub-in-flight": "2", "sub-redelivered": "1", "sub-dead": "1"}
    link = row.find_element(By.CLASS_NAME, "sub-dlq")
    assert link.text == "__sub-dlq.alerts"
    assert str(link.get_attribute("href")).endswith("/portal/topics/__sub-dlq.alerts")

    row.find_element(By.LINK_TEXT, "alerts").click()
    wait_until(lambda: browser.current_url.endswith("/portal/subscriptions/alerts"), timeout=15, what="its page")
    shot(browser, "08-subscription")
    assert text(browser, "sub-topic") == "alerts-in"
    assert text(browser, "sub-in-flight") == "2"
    assert text(browser, "sub-redelivered") == "1"
    assert text(browser, "sub-dead").startswith("1 ")


@pytest.mark.browser
@pytest.mark.slow
def test_another_tenants_group_is_not_found(console: Console, browser: Chrome) -> None:
    sign_in(browser, console.server.url, console.acme)
    for path in (
        "/portal/groups/ledger",
        "/portal/groups/ledger/reset?topic=payments&to=earliest",
        "/portal/groups/nothing",
    ):
        browser.get(console.server.url + path)
        assert browser.find_element(By.TAG_NAME, "h1").text == "404: UNKNOWN_GROUP", path
    assert "does not exist" in text(browser, "error-message")
    browser.get(f"{console.server.url}/portal/groups/ledger")
    shot(browser, "09-other-tenants-group")
    sign_in(browser, console.server.url, console.globex)
    browser.get(f"{console.server.url}/portal/subscriptions/alerts")
    assert browser.find_element(By.TAG_NAME, "h1").text == "404: UNKNOWN_SUBSCRIPTION"
    browser.get(f"{console.server.url}/portal/subscriptions")
    assert not present(browser, "tr.subscription-row")


@pytest.mark.browser
@pytest.mark.slow
def test_the_admin_sees_every_tenants_groups(console: Console, browser: Chrome) -> None:
    sign_in(browser, console.server.url, ADMIN_TOKEN)
    browser.get(f"{console.server.url}/portal/groups")
    shot(browser, "10-groups-admin")
    tenants = {
        r.get_attribute("data-group"): r.find_element(By.CLASS_NAME, "group-tenant").text
        for r in browser.find_elements(By.CSS_SELECTOR, "tr.group-row")
    }
    assert tenants == {"billing": "acme", "ledger": "globex"}
    browser.get(f"{console.server.url}/portal/groups/ledger")
    shot(browser, "11-group-admin")
    assert [r.get_attribute("data-topic") for r in browser.find_elements(By.CSS_SELECTOR, "tr.partition-row")] == [
        "payments"
    ]
    browser.get(f"{console.server.url}/portal/subscriptions")
    assert [
        r.get_attribute("data-subscription") for r in browser.find_elements(By.CSS_SELECTOR, "tr.subscription-row")
    ] == ["alerts"]
