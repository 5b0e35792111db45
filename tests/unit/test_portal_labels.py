"""The portal's pages as a person reads them: quota fields in words (the forms still post the field names),
the usage card's sentence, no API field name in the visible text. Rendered from the templates, no server."""

from __future__ import annotations

from html.parser import HTMLParser
from types import SimpleNamespace

import pytest

from metering.quota_model import RESOURCES
from server.errors import ApiError
from server.portal.labels import FIELDS, choice, label
from server.portal.pages import _templates, error_page
from server.portal.session import Session
from server.security.state import QUOTA_FIELDS, Quota, QuotaRequest, Tenant

# "partitions" is also the word a figure ends in ("4 partitions").
NAMES = [field for field in QUOTA_FIELDS if "_" in field]
SESSION = Session("t1", "acme", 2**40, "nonce")
ADMIN = Session("admin", None, 2**40, "nonce")


class _VisibleText(HTMLParser):
    """The text a browser shows: no tags, attributes, scripts or styles."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in {"script", "style", "title"}:
            self._hidden += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in {"script", "style", "title"}:
            self._hidden -= 1

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)


def visible(page: str) -> str:
    parser = _VisibleText()
    parser.feed(page)
    return " ".join(" ".join(parser.parts).split())


def request(resource: str, status: str = "pending", topic: str | None = "orders") -> QuotaRequest:
    return QuotaRequest(1, "acme", topic, resource, 1024.0, 2048.0, "promo", status, "Pending review.", "", 0)


def dashboard(usage_source: str) -> str:
    topics = [SimpleNamespace(name="orders", partitions=1), SimpleNamespace(name="clicks", partitions=2)]
    return _templates.get_template("dashboard.html").render(
        csp_nonce="n",
        session=SESSION,
        tenant="acme",
        quota=Quota(produce_bytes_per_s=2 * 1024 * 1024, partitions=3),
        topics=topics,
        topic_quotas={"orders": Quota(fetch_bytes_per_s=1024), "clicks": Quota(requests_per_s=50)},
        partitions_used=3,
        charts=[{"topic": "orders", "svg": "<svg></svg>", "caption": "Shown: the last 5 min."}],
        ranges=["1h", "24h"],
        period="24h",
        resources=RESOURCES,
        requests=[request(r) for r in RESOURCES],
        usage_source=usage_source,
    )


def test_every_quota_field_has_words() -> None:
    assert set(FIELDS) == set(RESOURCES) == set(QUOTA_FIELDS)
    assert [label(r) for r in RESOURCES] == ["Produce", "Fetch", "Requests", "Partitions"]
    assert choice("produce_bytes_per_s") == "Produce (bytes written per second)"


def test_the_dashboard_names_quota_fields_in_words_and_posts_their_names() -> None:
    page = dashboard("the metering store")
    text = visible(page)
    assert not any(name in text for name in NAMES), text
    for field in QUOTA_FIELDS:
        assert f'<option value="{field}">' in page  # what the form posts is unchanged
    assert "Applies to Produce Fetch Requests Partitions" in text
    assert "2 MiB/s" in text and "1 KiB/s" in text and "50 req/s" in text
    assert "topic orders (1 partition)" in text and "tenant acme (3 partitions used)" in text
    assert "Produce: 2 KiB/s" in text  # a request's "Asked"
    assert "Shown: the last 5 min." in text
    for control in ("request-topic", "request-resource", "request-value", "request-why"):
        assert f'<label for="{control}">' in page


@pytest.mark.parametrize(
    ("source", "sentence"),
    [
        ("the metering store", "Bytes per second into and out of each topic, from the metering store."),
        ("this server's recent history", "Bytes per second into and out of each topic, from this server's recent"),
    ],
)
def test_the_usage_card_says_where_its_figures_come_from_in_a_sentence(source: str, sentence: str) -> None:
    text = visible(dashboard(source))
    assert sentence in text
    assert "the this" not in text


def test_the_admin_and_request_pages_name_quota_fields_in_words() -> None:
    tenants = [Tenant("acme", 0, Quota(produce_bytes_per_s=1024 * 1024, partitions=4)), Tenant("empty", 0)]
    decided = [request(r, "approved", topic=None) for r in RESOURCES]
    admin = visible(
        _templates.get_template("admin.html").render(
            csp_nonce="n", session=ADMIN, pending=[request("fetch_bytes_per_s")], decided=decided, tenants=tenants
        )
    )
    assert "Fetch: 2 KiB/s" in admin and "Partitions: 2,048 partitions" in admin
    assert "Produce: 1 MiB/s, Partitions: 4 partitions" in admin and "no limits" in admin
    assert "the whole tenant" in admin and "topic orders" in admin
    one = visible(
        _templates.get_template("request.html").render(csp_nonce="n", session=SESSION, r=request("requests_per_s"))
    )
    for text in (admin, one):
        assert not any(name in text for name in NAMES), text
    assert "Limit on Requests (requests per second)" in one


def test_an_error_page_shows_the_api_message_as_a_sentence() -> None:
    page = bytes(error_page(ApiError(403, "FORBIDDEN", "the admin view needs the admin token")).body).decode()
    assert "The admin view needs the admin token." in visible(page)
