"""The operations console's connector pages in a real browser (Debian's headless Chromium through Selenium) against
a real ``talos standalone`` with auth on, two tenants and the session's real HDFS.

A tenant's configuration missing ``namenode`` is refused with the setting named and the form kept as typed; the
fixed one makes an HDFS sink on the tenant's topic, whose task runs on the server and writes the topic's records to
HDFS; the page's buttons pause it, resume it, restart it and one task (a new process each time), a new
configuration gives it two tasks, and deleting it needs the confirming box ticked. The other tenant neither lists
it nor opens it (404, as a connector that does not exist); the admin lists it with its tenant. A screenshot of
every page visited (numbered in the order of the visits) goes to ``test-artifacts/console-connectors/``. The pure
helpers (the ``key=value`` lines, masking) are tested first, without a browser."""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from hdfs import InsecureClient
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from server.devservices import HdfsCluster, wait_until
from server.errors import ApiError
from server.portal.console_connectors import MASKED, config_of, config_text, masked, parse_settings
from talos import Producer
from tests.conftest import ARTIFACTS
from tests.connectors.test_hdfs_sink import PARTITIONS, visible_records
from tests.e2e.test_portal_browser import click_and_load, sign_in
from tests.helpers import SecuredStandalone, headless_chromium, page_screenshot, secured_standalone

pytestmark = [pytest.mark.hdfs]

SHOTS = ARTIFACTS / "console-connectors"
_shot_numbers = itertools.count(1)
RECORDS = 300

# ---------------------------------------------------------------- the pure helpers


def test_key_value_lines_are_a_flat_configuration_of_strings() -> None:
    text = "# the sink\n\ntasks.max = 2\ntopics=a,b\npath=/x=y\nempty=\n  namenode=http://nn:9870  \n"
    assert parse_settings(text) == {
        "tasks.max": "2",
        "topics": "a,b",
        "path": "/x=y",
        "empty": "",
        "namenode": "http://nn:9870",
    }
    for bad, line in (("topics=a\njust words", 2), ("=value", 1), ("a=1\nb=2\na=3", 3)):
        with pytest.raises(ApiError) as caught:
            parse_settings(bad)
        assert caught.value.status == 400 and f"line {line}" in caught.value.message
    assert config_of({"type": "hdfs-sink", "config": "topics=t"}) == {"connector.class": "hdfs-sink", "topics": "t"}
    with pytest.raises(ApiError):
        config_of({"type": "hdfs-sink", "config": "connector.class=hdfs-source"})


def test_passwords_are_masked_and_a_masked_one_posted_back_is_kept() -> None:
    stored = {"connector.class": "elasticsearch-sink", "name": "s", "hosts": ["h1", "h2"], "Password": "hunter2"}
    assert masked(stored)["Password"] == MASKED
    text = config_text({**stored, "batch": 5, "query": {"match_all": {}}})
    assert text.splitlines() == ["hosts=h1,h2", f"Password={MASKED}", "batch=5", 'query={"match_all":{}}']
    assert "hunter2" not in text
    form = {"type": "elasticsearch-sink", "config": f"hosts=h1\nPassword={MASKED}"}
    assert config_of(form, stored)["Password"] == "hunter2"
    assert config_of({**form, "config": "Password=new"}, stored)["Password"] == "new"


# ---------------------------------------------------------------- in a browser


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredStandalone]:
    with secured_standalone(tmp_path_factory.mktemp("console-connectors"), {"alice": None, "bob": None}) as server:
        yield server


@pytest.fixture(scope="module")
def browser() -> Iterator[Chrome]:
    shutil.rmtree(SHOTS, ignore_errors=True)  # numbered by visit: an older run's pages would mix with this run's
    with headless_chromium("1280,1400", SHOTS / "last-page.html") as driver:
        yield driver


def shot(driver: Chrome, name: str) -> Path:
    return page_screenshot(driver, SHOTS / f"{next(_shot_numbers):02d}-{name}.png")


def text(driver: Chrome, element_id: str) -> str:
    return str(driver.find_element(By.ID, element_id).text)


def present(driver: Chrome, css: str) -> bool:
    """Whether the page has the element now (without the implicit wait for one to appear)."""
    driver.implicitly_wait(0)
    try:
        return bool(driver.find_elements(By.CSS_SELECTOR, css))
    finally:
        driver.implicitly_wait(5)


def listed(driver: Chrome) -> dict[str, dict[str, str]]:
    """The list's rows: connector → its cells by class."""
    rows = {}
    for row in driver.find_elements(By.CSS_SELECTOR, "tr.connector-row"):
        cells = row.find_elements(By.CSS_SELECTOR, "td[class]")
        rows[str(row.get_attribute("data-connector"))] = {
            str(cell.get_attribute("class")).split()[0]: str(cell.text) for cell in cells
        }
    return rows


def tasks(driver: Chrome) -> list[dict[str, str]]:
    """The connector page's task rows: state, server and process id of each."""
    return [
        {
            "state": row.find_element(By.CLASS_NAME, "task-state").text,
            "worker": row.find_element(By.CLASS_NAME, "task-worker").text,
            "pid": row.find_element(By.CLASS_NAME, "task-pid").text,
        }
        for row in driver.find_elements(By.CSS_SELECTOR, "tr.task-row")
    ]


def reload_until(driver: Chrome, check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Reload the page until ``check`` holds (the page has no script that would refresh it)."""

    def reloaded() -> bool:
        driver.refresh()
        return check()

    wait_until(reloaded, timeout=timeout, what=what, interval=0.3)


def running(driver: Chrome, count: int, url: str, other_than: str = "") -> bool:
    """The connector is RUNNING with ``count`` tasks, all RUNNING on the server at ``url`` (and with a process id
    other than ``other_than``)."""
    shown = tasks(driver)
    return (
        text(driver, "connector-state") == "RUNNING"
        and len(shown) == count
        and all(t["state"] == "RUNNING" and t["worker"] == url and t["pid"] != other_than for t in shown)
    )


def type_config(driver: Chrome, field_id: str, config: str) -> None:
    field = driver.find_element(By.ID, field_id)
    field.clear()
    field.send_keys(config)


def sink_lines(hdfs: HdfsCluster, topic: str, root: str, *, namenode: bool = True, tasks_max: int = 1) -> str:
    """An HDFS sink's settings as typed in the form (the type is chosen in its list)."""
    lines = [
        "# alice's clicks, to HDFS",
        f"tasks.max={tasks_max}",
        f"topics={topic}",
        *([f"namenode={hdfs.webhdfs_url}"] if namenode else []),
        f"path={root}",
        "roll_bytes=2000",
        "roll_ms=300",
        "session_timeout_s=3",
    ]
    return "\n".join(lines)


@pytest.mark.browser
@pytest.mark.slow
def test_a_tenants_hdfs_sink_from_the_console(secured: SecuredStandalone, browser: Chrome, hdfs: HdfsCluster) -> None:
    topic, name, root = "alice-clicks", "alice-clicks-to-hdfs", "/console-connectors/alice"
    url = secured.url
    alice = secured.token("alice")
    assert alice is not None
    with secured.admin("alice") as admin:
        admin.create_topic(topic, partitions=PARTITIONS)
    with Producer(url, token=alice) as producer:
        for n in range(RECORDS):
            producer.send(topic, value=orjson.dumps({"n": n}), key=f"k{n}")
        producer.flush()

    # A configuration without namenode: refused, with the setting named and what was typed kept.
    sign_in(browser, url, alice)
    click_and_load(browser, "nav-connectors")
    shot(browser, "connectors-none")
    assert present(browser, "#connectors-none")
    assert [o.get_attribute("value") for o in Select(browser.find_element(By.ID, "create-type")).options] == [
        "hdfs-sink",
        "hdfs-source",
        "elasticsearch-sink",
        "elasticsearch-source",
    ]
    browser.find_element(By.ID, "create-name").send_keys(name)
    Select(browser.find_element(By.ID, "create-type")).select_by_value("hdfs-sink")
    bad = sink_lines(hdfs, topic, root, namenode=False)
    type_config(browser, "create-config", bad)
    click_and_load(browser, "create-submit")
    shot(browser, "refused-configuration")
    assert "namenode" in text(browser, "create-error")
    assert browser.find_element(By.ID, "create-name").get_attribute("value") == name
    assert browser.find_element(By.ID, "create-config").get_attribute("value") == bad
    assert not present(browser, "tr.connector-row")

    # The whole configuration: the connector's page, its task running on this server, the records in HDFS.
    type_config(browser, "create-config", sink_lines(hdfs, topic, root))
    click_and_load(browser, "create-submit")
    assert browser.current_url.endswith(f"/portal/connectors/{name}?done=created")
    assert text(browser, "connector-done") == "Connector created."
    reload_until(browser, lambda: running(browser, 1, url), "the task running")
    shot(browser, "connector-running")
    settings = {
        str(row.get_attribute("data-key")): row.find_element(By.CLASS_NAME, "setting-value").text
        for row in browser.find_elements(By.CSS_SELECTOR, "tr.setting")
    }
    assert settings["connector.class"] == "hdfs-sink" and settings["namenode"] == hdfs.webhdfs_url
    files = InsecureClient(hdfs.webhdfs_url)
    wait_until(lambda: visible_records(files, root, topic) >= RECORDS, timeout=60, what="the sink's files")
    click_and_load(browser, "back-to-connectors")
    shot(browser, "connectors-alice")
    row = listed(browser)[name]
    assert (row["connector-type"], row["connector-topics"]) == ("hdfs-sink", topic)
    assert row["connector-state"] == "RUNNING" and row["connector-tasks"] == "1/1"
    assert "connector-tenant" not in row  # a tenant's list has no tenant column

    # Pause, resume, restart, restart the task: each by its button, a new process after each start.
    browser.find_element(By.LINK_TEXT, name).click()
    wait_until(lambda: browser.current_url.endswith(f"/portal/connectors/{name}"), timeout=15, what="its page")
    click_and_load(browser, "pause-submit")
    shot(browser, "connector-paused")
    assert text(browser, "connector-state") == "PAUSED" and [t["state"] for t in tasks(browser)] == ["PAUSED"]
    assert present(browser, "#resume-submit") and not present(browser, "#pause-submit")
    click_and_load(browser, "resume-submit")
    assert text(browser, "connector-done").startswith("Connector resumed")
    reload_until(browser, lambda: running(browser, 1, url), "the resumed task")
    shot(browser, "connector-resumed")
    resumed = tasks(browser)[0]["pid"]
    click_and_load(browser, "restart-submit")
    reload_until(browser, lambda: running(browser, 1, url, other_than=resumed), "the restarted task")
    shot(browser, "connector-restarted")
    restarted = tasks(browser)[0]["pid"]
    click_and_load(browser, "task-restart-0")
    assert text(browser, "connector-done") == "Restarting the task."
    reload_until(browser, lambda: running(browser, 1, url, other_than=restarted), "the restarted task 0")

    # A new configuration: two tasks.
    lines = str(browser.find_element(By.ID, "change-config").get_attribute("value"))
    assert "tasks.max=1" in lines.splitlines() and "connector.class" not in lines
    type_config(browser, "change-config", lines.replace("tasks.max=1", "tasks.max=2"))
    click_and_load(browser, "change-submit")
    assert text(browser, "connector-done").startswith("Configuration saved")
    reload_until(browser, lambda: running(browser, 2, url), "two running tasks")
    shot(browser, "connector-two-tasks")
    assert text(browser, "connector-tasks") == "2/2"

    # Bob neither lists it nor opens it: its page is the 404 of a connector that does not exist.
    sign_in(browser, url, str(secured.token("bob")))
    click_and_load(browser, "nav-connectors")
    shot(browser, "connectors-bob")
    assert listed(browser) == {} and present(browser, "#connectors-none")
    browser.get(f"{url}/portal/connectors/no-such-connector")
    unknown = (browser.find_element(By.TAG_NAME, "h1").text, text(browser, "error-message"))
    browser.get(f"{url}/portal/connectors/{name}")
    shot(browser, "connector-of-another-tenant")
    hidden = (browser.find_element(By.TAG_NAME, "h1").text, text(browser, "error-message"))
    assert hidden[0] == unknown[0] == "404: CONNECTOR_NOT_FOUND"
    assert hidden[1] == unknown[1].replace("no-such-connector", name) == f"Connector '{name}' not found."

    # The admin lists it with its tenant.
    sign_in(browser, url, secured.admin_token)
    click_and_load(browser, "nav-connectors")
    shot(browser, "connectors-admin")
    assert listed(browser)[name]["connector-tenant"] == "alice"
    browser.find_element(By.LINK_TEXT, name).click()
    wait_until(lambda: browser.current_url.endswith(f"/portal/connectors/{name}"), timeout=15, what="its page")
    shot(browser, "connector-admin")
    assert text(browser, "connector-tenant") == "alice"

    # Alice deletes it: not before the box is ticked.
    sign_in(browser, url, alice)
    browser.get(f"{url}/portal/connectors/{name}")
    click_and_load(browser, "delete-submit")
    shot(browser, "delete-not-confirmed")
    assert "Tick the box" in text(browser, "connector-error") and text(browser, "connector-name") == name
    browser.find_element(By.ID, "delete-confirm").click()
    click_and_load(browser, "delete-submit")
    shot(browser, "connector-deleted")
    assert browser.current_url.endswith("/portal/connectors?done=deleted")
    assert text(browser, "connectors-done") == "Connector deleted." and listed(browser) == {}
    with secured.client("alice") as rest:
        assert rest.get("/connectors").json() == []
