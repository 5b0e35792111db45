"""Server pieces without a server: configuration sources, topic names, the tail cache."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from server.cluster import Owner
from server.config import load_config
from server.errors import ApiError
from server.partition.tailcache import TailCache
from server.peers import HOPS_HEADER, Forwarder
from server.topics import validate_topic_name


def test_config_precedence_file_env_flags(tmp_path: Path) -> None:
    config_file = tmp_path / "talos.toml"
    config_file.write_text('[server]\nport = 9000\ngroup_commit = false\nstorage = "/from/file"\n')
    config = load_config(config_file, environ={"TALOS_PORT": "9001", "TALOS_MAX_WAIT_MS": "5_000"})
    assert (config.port, config.group_commit, config.storage, config.max_wait_ms) == (9001, False, "/from/file", 5000)
    assert load_config(config_file, environ={"TALOS_PORT": "9001"}, port=9002).port == 9002
    assert load_config(None, environ={"TALOS_GROUP_COMMIT": "0"}).group_commit is False


def test_config_errors_are_clear(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("prot = 1\n")
    with pytest.raises(ValueError, match="unknown settings"):
        load_config(bad, environ={})
    with pytest.raises(ValueError, match="TALOS_PORT: expected an integer"):
        load_config(None, environ={"TALOS_PORT": "eighty"})
    with pytest.raises(ValueError, match="expected a boolean"):
        load_config(None, environ={"TALOS_GROUP_COMMIT": "maybe"})


@pytest.mark.parametrize("name", ["orders", "a", "A.b_c-d", "x" * 249, "0day"])
def test_valid_topic_names(name: str) -> None:
    assert validate_topic_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", ".x", "_x", "-x", "a/b", "a\\b", "a\x00", "x" * 250, "é", "__x"])
def test_invalid_topic_names(name: str) -> None:
    with pytest.raises(ApiError) as info:
        validate_topic_name(name)
    assert (info.value.status, info.value.code) == (400, "INVALID_TOPIC_NAME")


def test_internal_names_allowed_for_internal_use() -> None:
    assert validate_topic_name("__talos_metrics", internal_ok=True) == "__talos_metrics"


def test_tail_cache_serves_contiguous_batches_and_evicts_oldest_under_the_budget() -> None:
    cache = TailCache(budget_bytes=250)
    a, b = cache.partition("t", 0), cache.partition("t", 1)
    a.add(0, 1, b"x" * 100)
    a.add(1, 3, b"y" * 100)
    assert a.read(0, 1000) == [b"x" * 100, b"y" * 100]
    assert a.read(2, 1000) == [b"y" * 100]  # the batch holding offset 2
    assert a.read(3, 1000) == []
    b.add(0, 1, b"z" * 100)  # over budget: partition 0's oldest batch goes
    assert cache.used <= 250
    assert a.start == 1
    assert a.read(0, 1000) is None  # no longer cached: the caller reads the log
    assert b.read(0, 1000) == [b"z" * 100]
    assert a.read(1, 50) == [b"y" * 100]  # at least one batch, even over max_bytes
    a.add(10, 11, b"w")  # not contiguous (reloaded log): start over
    assert a.start == 10


@pytest.mark.parametrize("hops", ["²", "x", "9" * 5000, "-1"])
def test_a_garbage_hop_count_is_400_not_500(hops: str) -> None:
    """A client can send ``x-talos-hops``; anything but a small whole number is its mistake, before any I/O."""
    forwarder = Forwarder(max_hops=3, timeout_s=1.0)
    owner = Owner("s2", "http://127.0.0.1:9", local=False)
    with pytest.raises(ApiError) as raised:
        asyncio.run(forwarder.send(owner, "GET", "/v1/x", query={}, headers={HOPS_HEADER: hops}, body=None))
    assert (raised.value.status, raised.value.code) == (400, "INVALID_REQUEST")
