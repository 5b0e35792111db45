"""A connector's configuration in Kafka Connect's shape (``connectors.plugins``): a flat map of strings becomes the
runner's typed configuration, checked by the YAML file's rules, with every problem named as the map names it."""

from __future__ import annotations

import pytest

from connectors.config import ConfigError, parse_config
from connectors.plugins import PLUGINS, from_connect, plugin_list, to_runner_config


def test_strings_become_the_settings_types() -> None:
    connector = from_connect(
        "to-search",
        {
            "connector.class": "elasticsearch-sink",
            "tasks.max": "3",
            "topics": "orders, refunds",
            "hosts": "http://a:9200,http://b:9200",
            "batch_size": "40",
            "template": '{"index_patterns": ["x-*"]}',
            "metadata_field": None,
        },
    )
    settings = connector.settings
    assert (connector.tasks, connector.topics) == (3, ["orders", "refunds"])
    assert settings.hosts == ["http://a:9200", "http://b:9200"]
    assert settings.batch_size == 40 and settings.template == {"index_patterns": ["x-*"]}
    assert settings.metadata_field is None


def test_json_values_are_taken_as_they_are() -> None:
    connector = from_connect(
        "files",
        {"connector.class": "hdfs-source", "topic": "lines", "namenode": "http://n:9870", "path": "/in", "poll_ms": 50},
    )
    assert connector.topic == "lines" and connector.settings.poll_ms == 50


def test_the_runner_configuration_runs_the_same_connector() -> None:
    connector = from_connect(
        "c", {"connector.class": "hdfs-sink", "topics": "t", "namenode": "http://n:1", "path": "/p", "roll_ms": "10"}
    )
    again = parse_config(to_runner_config(connector)).connectors[0]
    assert again == connector and again.settings.roll_ms == 10


@pytest.mark.parametrize(
    ("config", "problems"),
    [
        ({"connector.class": "hdfs-sink", "topics": "t"}, ["namenode: Field required", "path: Field required"]),
        (
            {"connector.class": "hdfs-sink", "topics": "t", "namenode": "n", "path": "/p", "roll_byte": "1"},
            ["namenode: the NameNode", "roll_byte: unknown setting"],
        ),
        ({"connector.class": "hdfs-sink", "topics": "t", "tasks.max": "many"}, ["tasks.max:"]),
        ({"connector.class": "hdfs-source", "topics": "t", "namenode": "http://n:1", "path": "/p"}, ["topic:"]),
        ({"connector.class": "ftp-sink"}, ["connector.class must be one of"]),
        ({"connector.class": "hdfs-sink", "name": "other"}, ["config.name is 'other'"]),
    ],
)
def test_every_problem_is_named_as_the_map_names_it(config: dict[str, object], problems: list[str]) -> None:
    with pytest.raises(ConfigError) as refused:
        from_connect("c", config)
    for problem in problems:
        assert problem in str(refused.value), str(refused.value)
    assert "connectors[0]" not in str(refused.value)


def test_the_plugin_list_names_every_type() -> None:
    assert {p["class"]: p["type"] for p in plugin_list()} == PLUGINS
