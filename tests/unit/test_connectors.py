"""The connectors' pure parts: configuration, file names, index names and documents, file ownership."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectors import ConfigError, parse_config
from connectors.config import ElasticsearchSinkSettings, HdfsSinkSettings
from connectors.elasticsearch.naming import check_index_pattern, document, document_id, index_name
from connectors.elasticsearch.source import not_checkpointed, search_body
from connectors.hdfs.files import file_name, parse_file_name, resume_offset
from connectors.hdfs.source import line_key, owns, parse_source, readable
from connectors.records import message_json
from talos import Message

ARCHITECTURE_EXAMPLE = {
    "connectors": [
        {
            "name": "orders-to-search",
            "type": "elasticsearch-sink",
            "topics": ["orders"],
            "tasks": 2,
            "config": {
                "hosts": ["http://127.0.0.1:9200"],
                "index": "orders-{yyyy.MM.dd}",
                "batch_size": 500,
                "flush_ms": 1000,
            },
        },
        {
            "name": "orders-to-hdfs",
            "type": "hdfs-sink",
            "topics": ["orders"],
            "config": {
                "namenode": "http://127.0.0.1:9870",
                "path": "/warehouse/orders",
                "format": "parquet",
                "roll_bytes": 134217728,
                "roll_ms": 60000,
            },
        },
        {
            "name": "logs-from-hdfs",
            "type": "hdfs-source",
            "topic": "logs",
            "config": {"namenode": "http://127.0.0.1:9870", "path": "/incoming/logs", "format": "jsonl"},
        },
    ]
}


def test_the_design_s_example_configuration_is_valid() -> None:
    config = parse_config(ARCHITECTURE_EXAMPLE)
    search, hdfs, source = config.connectors
    assert isinstance(search.settings, ElasticsearchSinkSettings)
    assert search.settings.index == "orders-{yyyy.MM.dd}" and search.tasks == 2
    assert isinstance(hdfs.settings, HdfsSinkSettings) and hdfs.settings.format == "parquet"
    assert source.topic == "logs" and not source.is_sink
    assert config.status_interval_s == 10.0


@pytest.mark.parametrize(
    ("connector", "problem"),
    [
        ({"name": "-x", "type": "hdfs-sink", "topics": ["t"]}, "connectors[0].name: 1-100 characters"),
        ({"name": "x", "type": "hdfs-sink", "topic": "t", "topics": ["t"]}, "`topic:` is for sources"),
        ({"name": "x", "type": "hdfs-source", "topics": ["t"], "topic": "t"}, "`topics:` is for sinks"),
        ({"name": "x", "type": "hdfs-sink", "topics": ["t"], "tasks": 0}, "connectors[0].tasks: Input should be"),
        ({"name": "x", "type": "hdfs-sink", "topics": ["t"], "extra": 1}, "connectors[0].extra: unknown setting"),
        (
            {"name": "x", "type": "hdfs-sink", "topics": ["t"], "config": {"namenode": "http://n", "path": "/"}},
            "",  # valid
        ),
        (
            {"name": "x", "type": "elasticsearch-sink", "topics": ["t"], "config": {"hosts": ["ftp://h"]}},
            "connectors[0].config.hosts: a search server address must be an http://",
        ),
        (
            {"name": "x", "type": "elasticsearch-source", "topic": "t", "config": {"hosts": ["http://h"]}},
            "connectors[0].config.index: Field required",
        ),
        (
            {"name": "x", "type": "hdfs-sink", "topics": ["t"], "config": {"path": "/p", "format": "csv"}},
            "connectors[0].config.format: Input should be 'jsonl' or 'parquet'",
        ),
    ],
)
def test_problems_name_where_they_are(connector: dict[str, object], problem: str) -> None:
    if not problem:
        parse_config({"connectors": [connector]})
        return
    with pytest.raises(ConfigError) as caught:
        parse_config({"connectors": [connector]})
    assert problem in str(caught.value)


def test_index_names_come_from_the_record_s_own_time_and_are_lower_case() -> None:
    day = 1_700_000_000_000  # 2023-11-14T22:13:20Z
    assert index_name("orders-{yyyy.MM.dd}", topic="Orders", partition=3, timestamp_ms=day) == "orders-2023.11.14"
    assert index_name("{topic}-{partition}-{yyyy-MM-dd_HH}", topic="Orders", partition=3, timestamp_ms=day) == (
        "orders-3-2023-11-14_22"
    )
    assert index_name("logs", topic="t", partition=0, timestamp_ms=day) == "logs"
    for bad in ["orders-{MMM}", "a{b", "with space", "{topic}*", "-x", ""]:
        with pytest.raises(ValueError, match=r"index|empty|placeholder|braces"):
            check_index_pattern(bad)


def _message(
    value: bytes | None, key: bytes | None = b"k", headers: tuple[tuple[str, bytes | None], ...] = ()
) -> Message:
    return Message("orders", 2, 41, 1_700_000_000_000, key, value, headers)


def _without_key(meta: dict[str, object], key_b64: str) -> dict[str, object]:
    return {**{k: v for k, v in meta.items() if k != "key"}, "key_b64": key_b64}


def test_documents_keep_json_objects_and_wrap_everything_else() -> None:
    assert document_id("orders", 2, 41) == "orders-2-41"
    meta = {"topic": "orders", "partition": 2, "offset": 41, "timestamp": 1_700_000_000_000, "key": "k"}
    assert document(_message(b'{"a": 1}'), "talos") == {"a": 1, "talos": meta}
    assert document(_message(b"[1, 2]"), None) == {"value": "[1, 2]"}
    assert document(_message(b"\xff", key=b"\xfe"), "m") == {"value_b64": "/w==", "m": _without_key(meta, "/g==")}
    assert document(_message(None), None) == {"value": None}


def test_message_json_is_lossless() -> None:
    encoded = message_json(_message(b"\x00\xff", headers=(("h", b"v"), ("b", b"\xff"), ("n", None))))
    assert encoded["value_b64"] == "AP8=" and "value" not in encoded
    assert encoded["headers"] == {"h": "v", "b_b64": "/w==", "n": None}


@given(
    topic=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,30}", fullmatch=True),
    partition=st.integers(0, 4095),
    start=st.integers(0, 10**15),
    length=st.integers(0, 10**6),
    fmt=st.sampled_from(["jsonl", "parquet"]),
)
def test_file_names_round_trip_and_sort_by_offset(
    topic: str, partition: int, start: int, length: int, fmt: str
) -> None:
    name = file_name(topic, partition, start, start + length, fmt)
    assert parse_file_name(name) == (topic, partition, start, start + length)
    assert file_name(topic, partition, start, start + length, fmt) < file_name(
        topic, partition, start + length + 1, start + length + 1, fmt
    )


def test_resume_after_the_highest_offset_in_the_partition_s_files() -> None:
    names = [
        file_name("t", 0, 0, 99, "jsonl"),
        file_name("t", 0, 100, 149, "jsonl"),
        "notes.txt",
        file_name("t", 1, 0, 999, "jsonl"),
    ]
    assert resume_offset(names, "t", 0) == 150
    assert resume_offset(names, "t", 1) == 1000
    assert resume_offset(names, "t", 2) is None
    assert parse_file_name("t+0+1+2.jsonl") is None  # offsets are always 20 digits


def test_which_files_a_source_reads_and_which_task_reads_them() -> None:
    assert readable("app.jsonl", "*.jsonl")
    assert not readable("app.log", "*.jsonl")
    assert not readable("_tmp.jsonl", "*")
    assert not readable(".hidden", "*")
    assert not readable("big.jsonl._COPYING_", "*")
    paths = [f"/in/file-{n}" for n in range(200)]
    owners = [[task for task in range(3) if owns(path, task, 3)] for path in paths]
    assert all(len(o) == 1 for o in owners)  # each file has exactly one task
    assert {o[0] for o in owners} == {0, 1, 2}


def test_keys_of_json_lines() -> None:
    assert line_key(b'{"id": "a-1"}', "id") == b"a-1"
    assert line_key(b'{"id": 7}', "id") == b"7"
    assert line_key(b'{"other": 7}', "id") is None
    assert line_key(b"not json", "id") is None
    assert line_key(b'{"id": "a"}', None) is None


def test_search_pages_sort_by_timestamp_then_id_and_skip_documents_without_a_timestamp() -> None:
    connector = {
        "name": "s",
        "type": "elasticsearch-source",
        "topic": "t",
        "config": {
            "hosts": ["http://h"],
            "index": "i",
            "id_field": "uid",
            "batch_size": 7,
            "query": {"term": {"a": 1}},
        },
    }
    settings = parse_config({"connectors": [connector]}).connectors[0].settings
    body = search_body(settings, None)
    assert body == {
        "size": 7,
        "query": {"bool": {"must": [{"term": {"a": 1}}], "filter": [{"exists": {"field": "@timestamp"}}]}},
        "sort": [{"@timestamp": "asc"}, {"uid": "asc"}],
    }
    assert search_body(settings, [5, "x"])["search_after"] == [5, "x"]
    again = search_body(settings, [5, "x"], since=5)  # following: the newest timestamp again, inclusive
    assert "search_after" not in again
    assert again["query"]["bool"]["filter"][1] == {"range": {"@timestamp": {"gte": 5}}}


def test_what_a_recovery_scan_found_after_the_checkpoint() -> None:
    def at(position: list[object]) -> Message:
        key = str(position[1]).encode()
        return Message("t", 0, 0, 0, key, None, (("talos-position", orjson.dumps(position)),))

    assert not_checkpointed(at([5, "b"]), [5, "a"], {"a"})
    assert not not_checkpointed(at([5, "a"]), [5, "a"], {"a"})
    assert not not_checkpointed(at([4, "z"]), [5, "a"], {"a"})
    assert not_checkpointed(at([5, "0"]), [5, "a"], {"a"})  # a late tie at the checkpoint's timestamp
    assert not not_checkpointed(at([5, "0"]), [5, "a"], {"a", "0"})
    assert not_checkpointed(at([4, "z"]), None, set())
    assert not_checkpointed(Message("t", 0, 0, 0, None, None, ()), [5, "a"], set())  # cannot tell: kept
    assert parse_source("/in/a.log#1234:56") == ("1234", 56)
    assert parse_source("/in/odd#name:x#99:0") == ("99", 0)
    assert parse_source("garbage") is None
