"""The README's browser example of a push subscription, run as written in headless Chromium against a real
server with auth on (the token in ``token=``): the page is pushed each message and acknowledges it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver import Chrome
from selenium.webdriver.support.ui import WebDriverWait

from talos import Admin, Producer
from tests.helpers import headless_chromium, secured_standalone

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
SHOTS = ROOT / "test-artifacts" / "subscribe"


def readme_page() -> str:
    found = re.search(r"```html\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert found is not None, "the README has a browser example"
    return found.group(1)


@pytest.fixture
def browser() -> Iterator[Chrome]:
    with headless_chromium("1000,800", SHOTS / "last-page.html") as driver:
        yield driver
        driver.save_screenshot(str(SHOTS / "subscriber-page.png"))


def test_a_browser_page_is_pushed_messages_and_acknowledges_them(browser: Chrome, tmp_path: Path) -> None:
    with secured_standalone(tmp_path / "data", {"acme": None}) as secured:
        token = secured.token("acme")
        with secured.admin("acme") as admin:
            admin.create_topic("emails", partitions=2)
            admin.create_subscription("mailer", "emails")
        ws = secured.url.replace("http://", "ws://")
        html = readme_page().replace("ws://127.0.0.1:8080", ws).replace("window=10", f"window=10&token={token}")
        page = tmp_path / "subscriber.html"
        page.write_text(f"<!doctype html><html><body style='white-space: pre'>{html}</body></html>")
        browser.get(page.as_uri())
        with Producer(secured.url, token=token) as producer:
            for n in range(5):
                producer.send("emails", value=f"mail {n}".encode())

        def text() -> str:
            return str(browser.execute_script("return document.body.innerText"))

        WebDriverWait(browser, 20).until(lambda _: text().count(": ok") == 5)
        shown = text()
        for n in range(5):
            assert f": mail {n}" in shown
        rows = Admin(secured.url, token=token).describe_subscription("mailer")["partitions"]
        assert sum(row["floor"] for row in rows) == 5 and all(row["unsettled"] == 0 for row in rows)
