"""Client-side addressing state (pure): where each partition's requests go, and how errors change that."""

from __future__ import annotations

import pytest

from server.config import ServerConfig
from talos import MisdirectedError, TransportError, UnavailableError
from talos._errors import api_error
from talos._routing import DIRECT, RouteTable

BOOT = "http://boot:8080"


def cluster_routes(owners: dict[int, str | None]) -> dict[str, object]:
    entries = [{"partition": p, "owner": f"s{p}", "url": url} for p, url in owners.items()]
    return {"mode": "cluster", "ring_version": 3, "topics": {"t": entries}}


def test_unknown_routes_go_to_the_bootstrap_without_the_direct_header() -> None:
    table = RouteTable(BOOT)
    assert table.needs_refresh("t")
    assert table.target("t", 0) == (BOOT, {})


def test_cluster_routes_go_to_owners_directly() -> None:
    table = RouteTable(BOOT)
    table.update("t", cluster_routes({0: "http://a", 1: "http://b", 2: None}))
    assert table.partitions["t"] == 3
    assert table.target("t", 0) == ("http://a", DIRECT)
    assert table.target("t", 1) == ("http://b", DIRECT)
    assert table.target("t", 2) == (BOOT, {})  # owner not registered: the bootstrap forwards or says 503
    assert not table.needs_refresh("t")


def test_standalone_never_routes_and_never_looks_again() -> None:
    table = RouteTable(BOOT)
    table.update("t", {"mode": "standalone", "ring_version": 0, "topics": {"t": [{"partition": 0, "url": "x"}]}})
    assert table.target("t", 0) == (BOOT, {})
    table.learn("t", 0, UnavailableError(503, "X", "moving", retriable=True))
    assert not table.needs_refresh("t")


def test_forwarding_mode_uses_the_bootstrap_for_everything() -> None:
    table = RouteTable(BOOT, direct=False)
    table.update("t", cluster_routes({0: "http://a"}))
    assert table.target("t", 0) == (BOOT, {})


def test_a_421_names_the_new_owner_and_is_retried_at_once() -> None:
    table = RouteTable(BOOT)
    table.update("t", cluster_routes({0: "http://a"}))
    error = api_error(421, {"error": {"code": "MISDIRECTED_REQUEST", "message": "m", "owner_url": "http://c/"}})
    assert isinstance(error, MisdirectedError) and error.owner_url == "http://c/"
    assert table.learn("t", 0, error) is True
    assert table.target("t", 0) == ("http://c", DIRECT)


def test_unavailable_marks_the_topic_stale_after_the_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr("talos._routing.time.monotonic", lambda: now[0])
    table = RouteTable(BOOT, refresh_interval_s=1.0)
    table.update("t", cluster_routes({0: "http://a"}))
    assert table.learn("t", 0, UnavailableError(503, "NOT_OWNER", "moved", retriable=True)) is False
    assert not table.needs_refresh("t")  # not more than once per interval
    now[0] += 1.5
    assert table.needs_refresh("t")
    assert table.target("t", 0) == ("http://a", DIRECT)  # until the lookup says otherwise


def test_an_unreachable_owner_falls_back_to_the_bootstrap() -> None:
    table = RouteTable(BOOT)
    table.update("t", cluster_routes({0: "http://a", 1: "http://b"}))
    table.learn("t", 0, TransportError("connection refused"))
    assert table.target("t", 0) == (BOOT, {})
    assert table.target("t", 1) == ("http://b", DIRECT)


def test_an_unreachable_owner_is_avoided_for_a_while_even_when_a_lookup_names_it_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client cut from one server only (the servers still reach it): the entry point forwards meanwhile."""
    now = [100.0]
    monkeypatch.setattr("talos._routing.time.monotonic", lambda: now[0])
    table = RouteTable(BOOT, avoid_s=10.0)
    table.update("t", cluster_routes({0: "http://a", 1: "http://a", 2: "http://b"}))
    table.learn("t", 0, TransportError("timed out"))
    table.update("t", cluster_routes({0: "http://a", 1: "http://a", 2: "http://b"}))
    assert table.target("t", 0) == (BOOT, {})
    assert table.target("t", 1) == (BOOT, {})  # the same server, for another partition
    assert table.target("t", 2) == ("http://b", DIRECT)
    now[0] += 10.5
    assert table.target("t", 0) == ("http://a", DIRECT)  # tried again after avoid_s


def test_a_failed_lookup_is_retried_later() -> None:
    table = RouteTable(BOOT, refresh_interval_s=0.0)
    table.lookup_failed("t")
    assert table.target("t", 0) == (BOOT, {})
    assert table.needs_refresh("t")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"zk": ""}, "needs --zk"),
        ({"storage": "./data"}, "shared storage"),
        ({"server_id": "../x"}, "server id"),
        ({"reassign_delay_s": 1.0, "zk_session_timeout_s": 10.0}, "reassign_delay"),
    ],
)
def test_cluster_configuration_is_checked(changes: dict[str, object], message: str) -> None:
    config = ServerConfig(zk="127.0.0.1:2181", storage="hdfs://nn:9000/talos", server_id="s1").replace(**changes)
    with pytest.raises(ValueError, match=message):
        config.validate_cluster()


def test_a_valid_cluster_configuration_and_its_defaults() -> None:
    config = ServerConfig(zk="127.0.0.1:2181", storage="hdfs://nn:9000/talos", host="0.0.0.0", port=9000)
    config.validate_cluster()
    assert config.url == "http://127.0.0.1:9000"
    assert config.member_id.endswith("-9000")
    assert ServerConfig(advertised_url="http://talos-0.talos:8080/").url == "http://talos-0.talos:8080"


def test_a_dead_bootstrap_is_replaced_by_a_server_the_routes_named() -> None:
    table = RouteTable(BOOT, refresh_interval_s=0.0)
    table.update("t", cluster_routes({0: "http://a", 1: "http://b"}))
    assert table.lookup_url == f"{BOOT}/v1/routes"
    table.lookup_failed("t")  # the bootstrap is down
    assert table.lookup_url == "http://a/v1/routes"
    table.learn("t", 0, TransportError("connection refused"))  # and so is a
    assert table.target("t", 0) == ("http://a", {})  # not yet known to be down: tried once more
    table.lookup_failed("t")
    assert table.target("t", 0) == ("http://b", {})  # b forwards (or answers 503) until the routes change
    assert table.lookup_url == "http://b/v1/routes"
