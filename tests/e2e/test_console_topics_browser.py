"""The operations console's topics pages (``server.portal.console_topics``, issue 41).

First the pure helpers that decide how a page shows things (a value as text, JSON, Avro or hex; retention in
words; what the forms accept), without a browser. Then the pages in a real browser (Debian's headless
Chromium through Selenium) against one real ``talos standalone`` with auth on and two tenants: a tenant
lists its topics (not the other's), creates one through the form, sees its partitions and offsets, changes
its retention and adds a partition, browses messages produced through the SDK (text, JSON, binary, keyed,
with headers, and an Avro value serialized by confluent-kafka's AvroSerializer against the registry, shown
decoded) from the end, an offset and a time, page by page, by key, produces a test message through the
form, and deletes the topic once its name is typed (a wrong name refuses); the other tenant's topic and
its messages are 404 to it until it is granted the topic (then it reads, and is offered only the forms the
grant allows); the admin sees both tenants' topics. A screenshot of every page visited goes
to ``test-artifacts/console-topics/``.
"""

from __future__ import annotations

import json
import secrets
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from server.devservices import StandaloneServer, wait_until
from server.errors import ApiError
from server.portal.console_topics import (
    DURATION_UNITS,
    SIZE_UNITS,
    Shown,
    avro_json,
    parse_amount,
    parse_headers,
    parse_time,
    readable_duration,
    readable_rate,
    readable_size,
    render_value,
    schema_id_of,
    split_amount,
)
from talos import Admin, Producer
from tests.conftest import ARTIFACTS
from tests.e2e.test_portal_browser import click_and_load, sign_in
from tests.helpers import headless_chromium, page_screenshot, running_standalone

ADMIN_TOKEN = f"admin-{secrets.token_urlsafe(24)}"
SHOTS = ARTIFACTS / "console-topics"
USER_AVRO = json.dumps(
    {
        "type": "record",
        "name": "User",
        "namespace": "acme",
        "fields": [{"name": "name", "type": "string"}, {"name": "favorite_number", "type": "int"}],
    }
)
BINARY = bytes(range(256)) + b"\xff" * 44  # 300 bytes, not UTF-8
browser_test = [pytest.mark.browser, pytest.mark.slow]


# ---------------------------------------------------------------- the pure helpers


def test_a_value_is_shown_as_json_text_or_hex_by_what_it_is() -> None:
    assert render_value(None) == Shown("null", "null", 0)
    assert render_value(b"hello world") == Shown("text", "hello world", 11)
    assert render_value(b"line one\n\tline two").kind == "text"
    assert render_value("zürich".encode()) == Shown("text", "zürich", 7)
    pretty = render_value(b'{"a":1,"b":[true,null]}')
    assert pretty.kind == "json" and pretty.text == '{\n  "a": 1,\n  "b": [\n    true,\n    null\n  ]\n}'
    assert render_value(b"[1, 2]").kind == "json"
    assert render_value(b"42").kind == "text"  # a JSON number is shown as the text it is
    assert render_value(b"{not json").kind == "text"
    control = render_value(b"bell\x07")
    assert control.kind == "hex" and control.text == "62 65 6c 6c 07"
    binary = render_value(BINARY)
    assert binary.kind == "hex" and binary.length == 300 and binary.truncated
    assert binary.text == BINARY[:256].hex(" ")
    assert binary.schema_id == 0x01020304  # it starts 00 01 02 03 04: it looks framed; the registry decides


def test_confluent_framing_names_a_schema_id_and_avro_decodes_to_json() -> None:
    import fastavro

    writer = io_bytes(fastavro.parse_schema(json.loads(USER_AVRO)), {"name": "ada", "favorite_number": 7})
    framed = b"\x00" + (1234).to_bytes(4, "big") + writer
    assert schema_id_of(framed) == 1234
    assert schema_id_of(b"\x01\x00\x00\x04\xd2rest") is None and schema_id_of(b"\x00\x00") is None
    assert json.loads(avro_json(USER_AVRO, writer)) == {"name": "ada", "favorite_number": 7}
    with pytest.raises(ValueError, match="left over"):
        avro_json(USER_AVRO, writer + b"extra")
    with pytest.raises(EOFError):  # fastavro's, for a payload cut short
        avro_json(USER_AVRO, writer[:2])


def io_bytes(schema: object, value: dict[str, object]) -> bytes:
    import io

    import fastavro

    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, value)  # type: ignore[arg-type]
    return out.getvalue()


def test_retention_and_rates_read_as_a_person_says_them() -> None:
    assert readable_duration(None) == "unlimited"
    assert readable_duration(7 * 86_400_000) == "7 d"
    assert readable_duration(5_400_000) == "1.5 h"
    assert readable_duration(1500) == "1.5 s"
    assert readable_duration(0) == "0 ms"
    assert readable_size(None) == "unlimited"
    assert readable_size(1024**3) == "1 GiB"
    assert readable_size(1536) == "1.5 KiB"
    assert readable_size(10) == "10 B"
    assert readable_rate(2048.0, "B") == "2 KiB/s"
    assert readable_rate(0.0, "B") == "0 B/s"
    assert readable_rate(12.25, "msg") == "12.2 msg/s"


def test_the_forms_amounts_headers_and_times() -> None:
    assert split_amount(7 * 86_400_000, DURATION_UNITS) == ("7", "d")
    assert split_amount(90_000, DURATION_UNITS) == ("90", "s")
    assert split_amount(None, DURATION_UNITS) == ("", "d")
    assert split_amount(3 * 1024**2, SIZE_UNITS) == ("3", "MiB")
    assert split_amount(0, SIZE_UNITS) == ("0", "B")
    assert parse_amount("", "d", DURATION_UNITS, "retention time") is None
    assert parse_amount("1.5", "h", DURATION_UNITS, "retention time") == 5_400_000
    assert parse_amount("2", "GiB", SIZE_UNITS, "retention size") == 2 * 1024**3
    for bad in ("soon", "-1"):
        with pytest.raises(ApiError, match="retention time"):
            parse_amount(bad, "d", DURATION_UNITS, "retention time")
    assert parse_headers("trace=abc\n\nempty=\nurl=a=b\n") == (("trace", b"abc"), ("empty", b""), ("url", b"a=b"))
    with pytest.raises(ApiError, match="line 1"):
        parse_headers("no equals sign")
    assert parse_time("1714564800000") == 1714564800000
    assert parse_time("2024-05-01 12:00:00") == 1714564800000  # UTC unless it says otherwise
    assert parse_time("2024-05-01T14:00:00+02:00") == 1714564800000
    with pytest.raises(ApiError, match="time"):
        parse_time("yesterday")


# ---------------------------------------------------------------- the pages in a browser


@dataclass
class Console:
    server: StandaloneServer
    acme: str
    globex: str
    early_ms: int  # the timestamp of orders' first message, hours before the rest
    signed_in: list[str]


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    env = {"TALOS_ADMIN_TOKEN": ADMIN_TOKEN, "TALOS_AUTH": "on", "TALOS_METERING_INTERVAL_S": "1"}
    data = tmp_path_factory.mktemp("console-topics") / "data"
    with running_standalone(data, env=env) as server, Admin(server.url, token=ADMIN_TOKEN) as admin:
        admin.create_tenant("acme")
        admin.create_tenant("globex")
        acme = admin.create_token("acme")["token"]
        globex = admin.create_token("globex")["token"]
        with Admin(server.url, token=globex) as other:
            other.create_topic("ledger", partitions=1)
        with Admin(server.url, token=acme) as tenant:
            tenant.create_topic("orders", partitions=2, retention_ms=7 * 86_400_000)
        registry = SchemaRegistryClient({"url": f"{server.url}/schema-registry", "basic.auth.user.info": f"x:{acme}"})
        avro = AvroSerializer(registry, USER_AVRO)(
            {"name": "ada", "favorite_number": 7}, SerializationContext("orders", MessageField.VALUE)
        )
        early = int(time.time() * 1000) - 3 * 3600_000
        with Producer(server.url, token=acme) as producer:
            sends = [
                producer.send("orders", b"an early message", partition=0, timestamp=early),
                producer.send("orders", b"plain text", partition=0),
                producer.send("orders", b'{"order": 17, "items": ["tea", "cake"]}', partition=0),
                producer.send("orders", BINARY, partition=0),
                producer.send("orders", b"first of customer-9", key=b"customer-9", partition=0),
                producer.send("orders", b"of customer-1", key=b"customer-1", partition=0),
                producer.send(
                    "orders", b"second of customer-9", key=b"customer-9", partition=0, headers={"source": "web"}
                ),
                producer.send("orders", avro, partition=0),
                *(producer.send("orders", f"bulk {i}".encode(), partition=1) for i in range(60)),
            ]
            for sent in sends:
                sent.result(30)
        yield Console(server, acme, globex, early, [])


@pytest.fixture(scope="module")
def browser() -> Iterator[Chrome]:
    shutil.rmtree(SHOTS, ignore_errors=True)
    with headless_chromium("1280,1400", SHOTS / "last-page.html") as driver:
        yield driver


def shot(driver: Chrome, name: str) -> None:
    page_screenshot(driver, SHOTS / f"{name}.png")


def as_user(driver: Chrome, console: Console, token: str) -> None:
    """Signed in with ``token`` (through the sign-in form), unless this browser is already."""
    if console.signed_in[-1:] != [token]:
        sign_in(driver, console.server.url, token)
        console.signed_in.append(token)


def visit(driver: Chrome, console: Console, path: str, name: str) -> str:
    """Open a page, save its screenshot, and answer its text; no page has a script."""
    driver.get(f"{console.server.url}{path}")
    shot(driver, name)
    assert "<script" not in driver.page_source
    return driver.find_element(By.TAG_NAME, "body").text


def fill(driver: Chrome, element_id: str, text: str) -> None:
    field = driver.find_element(By.ID, element_id)
    field.clear()
    if text:
        field.send_keys(text)


def submit(driver: Chrome, button: str, name: str) -> str:
    click_and_load(driver, button)
    shot(driver, name)
    return driver.find_element(By.TAG_NAME, "body").text


def topic_names(driver: Chrome) -> list[str]:
    return [name for name, _ in table_rows(driver, "tr.topic-row", "data-topic")]


def rows(driver: Chrome) -> dict[int, str]:
    """The messages table: offset → the row's text."""
    return {int(offset): text for offset, text in table_rows(driver, "#messages-table tr.message", "data-offset")}


def table_rows(driver: Chrome, selector: str, attribute: str) -> list[tuple[str, str]]:
    """Each row's ``attribute`` and text, in one round trip to the browser (not two per row)."""
    script = "return [...document.querySelectorAll(arguments[0])].map(r => [r.getAttribute(arguments[1]), r.innerText])"
    return [(str(a), str(t)) for a, t in driver.execute_script(script, selector, attribute)]


@pytest.mark.browser
@pytest.mark.slow
def test_a_tenant_lists_creates_changes_and_deletes_topics(console: Console, browser: Chrome) -> None:
    as_user(browser, console, console.acme)
    text = visit(browser, console, "/portal/topics", "01-topics")
    assert topic_names(browser) == ["orders"]  # not globex's ledger
    orders = browser.find_element(By.CSS_SELECTOR, 'tr[data-topic="orders"]').text
    assert "7 d" in orders and "unlimited" in orders and "delete" in orders
    assert "B/s" in orders and "msg/s" in orders
    assert "Rates: the last" in text

    fill(browser, "create-name", "shipments")
    fill(browser, "create-partitions", "2")
    fill(browser, "retention-time", "36")
    Select(browser.find_element(By.ID, "retention-time-unit")).select_by_value("h")
    fill(browser, "retention-size", "1")
    Select(browser.find_element(By.ID, "retention-size-unit")).select_by_value("GiB")
    Select(browser.find_element(By.ID, "cleanup-policy")).select_by_value("compact,delete")
    text = submit(browser, "create-submit", "02-created")
    assert browser.current_url.endswith("/portal/topics/shipments?done=created")
    assert "Topic created." in text
    settings = browser.find_element(By.ID, "topic-settings").text
    assert "Retention time 1.5 d" in settings and "Retention size (per partition) 1 GiB" in settings
    assert "Cleanup policy compact,delete" in settings
    partitions = browser.find_elements(By.CSS_SELECTOR, "tr.partition-row")
    assert [p.get_attribute("data-partition") for p in partitions] == ["0", "1"]
    assert all(p.find_element(By.CLASS_NAME, "latest").text == "0" for p in partitions)

    visit(browser, console, "/portal/topics", "03-topics-again")
    fill(browser, "create-name", "shipments")
    text = submit(browser, "create-submit", "04-create-taken")
    assert "Topic 'shipments' already exists." in browser.find_element(By.ID, "create-error").text

    visit(browser, console, "/portal/topics/shipments", "05-topic")
    fill(browser, "change-partitions", "3")
    fill(browser, "retention-time", "2")
    Select(browser.find_element(By.ID, "retention-time-unit")).select_by_value("d")
    fill(browser, "retention-size", "")
    text = submit(browser, "change-submit", "06-changed")
    assert "Settings saved." in text
    settings = browser.find_element(By.ID, "topic-settings").text
    assert "Partitions 3" in settings and "Retention time 2 d" in settings
    assert "Retention size (per partition) unlimited" in settings
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr.partition-row")) == 3

    fill(browser, "delete-confirm", "shipment")
    text = submit(browser, "delete-submit", "07-delete-wrong-name")
    assert "Type the topic's name, shipments, to confirm; nothing was deleted." in text
    fill(browser, "delete-confirm", "shipments")
    text = submit(browser, "delete-submit", "08-deleted")
    assert browser.current_url.endswith("/portal/topics?done=deleted") and "Topic deleted." in text
    assert topic_names(browser) == ["orders"]

    with Admin(console.server.url, token=ADMIN_TOKEN) as admin:
        done = [(e["action"], e["detail"]) for e in admin.audit(limit=50) if e["target"] == "shipments"]
    assert ("topic.create", "2 partitions") in done and ("topic.delete", "") in done
    assert ("topic.update", "partitions=3, retention_ms=172800000, retention_bytes=None") in done


@pytest.mark.browser
@pytest.mark.slow
def test_a_tenant_browses_messages_of_every_kind(console: Console, browser: Chrome) -> None:
    as_user(browser, console, console.acme)
    visit(browser, console, "/portal/topics/orders", "10-orders")
    offsets = {
        row.get_attribute("data-partition"): (
            row.find_element(By.CLASS_NAME, "earliest").text,
            row.find_element(By.CLASS_NAME, "latest").text,
            row.find_element(By.CLASS_NAME, "last-stable").text,
        )
        for row in browser.find_elements(By.CSS_SELECTOR, "tr.partition-row")
    }
    assert offsets == {"0": ("0", "8", "8"), "1": ("0", "60", "60")}
    click_and_load(browser, "browse-messages")
    shot(browser, "11-messages-end")
    shown = rows(browser)
    assert sorted(shown) == list(range(8))  # partition 0, from the end: all 8
    assert "plain text" in shown[1] and "text, 10 bytes" in shown[1]
    value = browser.find_element(By.CSS_SELECTOR, 'tr[data-offset="2"] td.value')
    assert value.get_attribute("data-kind") == "json" and '"items": [\n    "tea",' in value.text
    binary = browser.find_element(By.CSS_SELECTOR, 'tr[data-offset="3"] td.value')
    assert binary.get_attribute("data-kind") == "hex" and "the first 256 of 300 bytes" in binary.text
    assert "customer-9" in shown[4] and "source=web" in shown[6]
    avro = browser.find_element(By.CSS_SELECTOR, 'tr[data-offset="7"] td.value')
    assert avro.get_attribute("data-kind") == "avro" and "Avro, schema id" in avro.text
    assert json.loads(avro.find_element(By.TAG_NAME, "pre").text) == {"name": "ada", "favorite_number": 7}
    trace = browser.find_element(By.CSS_SELECTOR, 'tr[data-offset="4"] a.trace-link').get_attribute("href")
    assert trace is not None and trace.endswith("/portal/trace?topic=orders&partition=0&offset=4")

    browser.find_element(By.ID, "from-time").click()
    fill(browser, "browse-time", time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(console.early_ms / 1000 + 3600)))
    submit(browser, "browse-submit", "12-from-a-time")
    assert sorted(rows(browser)) == list(range(1, 8))  # the early message is before that time

    browser.find_element(By.ID, "from-end").click()
    fill(browser, "browse-key", "customer-9")
    submit(browser, "browse-submit", "13-by-key")
    assert sorted(rows(browser)) == [4, 6]

    text = visit(browser, console, "/portal/topics/orders/messages?partition=1&from=offset&offset=0", "14-page-one")
    assert sorted(rows(browser)) == list(range(50)) and "bulk 49" in text
    assert "Earlier" not in text  # offset 0: nothing before it
    click_and_load(browser, "next-page")
    shot(browser, "15-page-two")
    assert sorted(rows(browser)) == list(range(50, 60))
    click_and_load(browser, "previous-page")
    shot(browser, "16-page-one-again")
    assert sorted(rows(browser)) == list(range(50))


@pytest.mark.browser
@pytest.mark.slow
def test_a_tenant_produces_a_test_message_through_the_form(console: Console, browser: Chrome) -> None:
    as_user(browser, console, console.acme)
    visit(browser, console, "/portal/topics/orders/messages?partition=0", "20-produce-form")
    Select(browser.find_element(By.ID, "produce-partition")).select_by_value("0")
    fill(browser, "produce-key", "customer-5")
    fill(browser, "produce-value", '{"note": "from the console"}')
    fill(browser, "produce-headers", "origin=console\nticket=OPS-1")
    text = submit(browser, "produce-submit", "21-produced")
    offset = int(browser.find_element(By.CSS_SELECTOR, "tr.message.stored").get_attribute("data-offset") or -1)
    assert offset >= 8 and f"Stored at partition 0, offset {offset}." in text
    stored = rows(browser)[offset]
    assert "customer-5" in stored and '"note": "from the console"' in stored
    assert "origin=console" in stored and "ticket=OPS-1" in stored

    fill(browser, "produce-headers", "no equals sign")
    text = submit(browser, "produce-submit", "22-produce-refused")
    assert "Header line 1: write name=value." in browser.find_element(By.ID, "messages-error").text


@pytest.mark.browser
@pytest.mark.slow
def test_another_tenants_topic_is_not_found(console: Console, browser: Chrome) -> None:
    as_user(browser, console, console.acme)
    for path, name in (
        ("/portal/topics/ledger", "30-other-topic"),
        ("/portal/topics/ledger/messages", "31-other-messages"),
    ):
        text = visit(browser, console, path, name)
        assert "404: UNKNOWN_TOPIC" in text and "Unknown topic 'ledger'." in text
    text = visit(browser, console, "/portal/topics/nothing-here", "32-no-topic")
    assert "404: UNKNOWN_TOPIC" in text and "Unknown topic 'nothing-here'." in text

    as_user(browser, console, console.globex)
    visit(browser, console, "/portal/topics", "33-other-tenants-topics")
    assert topic_names(browser) == ["ledger"]

    with Admin(console.server.url, token=ADMIN_TOKEN) as admin:
        admin.grant("orders", "globex", ["consume"])
        try:  # a grant shows the topic, and only the forms it allows
            visit(browser, console, "/portal/topics", "34-granted-topics")
            assert topic_names(browser) == ["ledger", "orders"]
            text = visit(browser, console, "/portal/topics/orders", "35-granted-topic")
            assert "Browse messages" in text and "Change settings" not in text and "Delete this topic" not in text
            text = visit(browser, console, "/portal/topics/orders/messages?partition=0", "36-granted-messages")
            assert "plain text" in text and "Produce a test message" not in text
        finally:
            admin.revoke("orders", "globex")


@pytest.mark.browser
@pytest.mark.slow
def test_the_admin_sees_every_tenants_topics(console: Console, browser: Chrome) -> None:
    as_user(browser, console, ADMIN_TOKEN)
    visit(browser, console, "/portal/topics", "40-admin-topics")
    assert topic_names(browser) == ["ledger", "orders"]
    owners = {
        row.get_attribute("data-topic"): row.text for row in browser.find_elements(By.CSS_SELECTOR, "tr.topic-row")
    }
    assert "globex" in owners["ledger"] and "acme" in owners["orders"]
    visit(browser, console, "/portal/topics?internal=1", "41-admin-internal-topics")
    assert any(name.startswith("__") for name in topic_names(browser))
    text = visit(browser, console, "/portal/topics/orders/messages?partition=0", "42-admin-messages")
    assert "Avro, schema id" in text  # the admin reads every tenant's schemas

    def produced_rate() -> bool:
        browser.get(f"{console.server.url}/portal/topics")
        rate = browser.find_element(By.CSS_SELECTOR, 'tr[data-topic="orders"] td.rate-in').text
        return not rate.startswith("0 B/s")

    wait_until(produced_rate, timeout=10, what="the produce rate of orders in the usage history")
    shot(browser, "43-admin-rates")
