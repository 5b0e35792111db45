"""The connector types as Kafka Connect's REST API names them (``/connector-plugins``), and a connector's
configuration in its shape: one flat map, ``connector.class`` and ``tasks.max`` beside the type's settings, values
sent as strings (as Kafka Connect's clients send them) or as JSON values.

:func:`from_connect` turns such a map into the :class:`~connectors.config.ConnectorConfig` that ``talos connect
run`` runs, checked by the same rules as a YAML file (``ConfigError`` lists every problem). A string is read as the
setting's type wants it: ``"2"`` for a number, ``"true"`` for a flag, ``"a,b"`` for a list (``topics``, ``hosts``),
a JSON object for a mapping (``query``, ``template``).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Any, Final

import orjson

from connectors.config import SETTINGS, ConfigError, ConnectorConfig, RunnerConfig, parse_config

__all__ = ["PLUGINS", "VERSION", "from_connect", "plugin_list", "to_runner_config"]

VERSION: Final = "0.1.0"
PLUGINS: Final = {
    "hdfs-sink": "sink",
    "hdfs-source": "source",
    "elasticsearch-sink": "sink",
    "elasticsearch-source": "source",
}
_OWN: Final = ("name", "connector.class", "tasks.max", "topics", "topic")


def plugin_list() -> list[dict[str, str]]:
    """``GET /connector-plugins``: each type as Kafka Connect lists a plugin."""
    return [{"class": name, "type": kind, "version": VERSION} for name, kind in PLUGINS.items()]


def _list(value: object) -> object:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def _typed(annotation: object, value: object) -> object:
    """A string as the setting's annotation wants it (pydantic reads numbers and flags from strings itself)."""
    if not isinstance(value, str):
        return value
    origin = typing.get_origin(annotation)
    while origin in (typing.Annotated, typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = args[0]
        origin = typing.get_origin(annotation)
    if origin is list or annotation is list:
        return _list(value)
    if origin is dict or annotation is dict:
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value  # refused by the model, with the setting named
    return value


def from_connect(name: str, config: Mapping[str, object]) -> ConnectorConfig:
    """The connector ``name`` of a Kafka-Connect-shaped configuration; ConfigError lists every problem."""
    if not isinstance(config, Mapping):
        raise ConfigError("the configuration must be a JSON object of settings")
    if "name" in config and config["name"] != name:
        raise ConfigError(f"config.name is {config['name']!r}, but the connector is named {name!r}")
    kind = config.get("connector.class")
    if kind not in PLUGINS:
        known = ", ".join(PLUGINS)
        raise ConfigError(f"connector.class must be one of {known} (GET /connector-plugins), not {kind!r}")
    fields = SETTINGS[str(kind)].model_fields
    settings = {}
    for key, value in config.items():
        if key in _OWN:
            continue
        field = fields.get(key)
        settings[key] = _typed(field.annotation, value) if field is not None else value
    doc: dict[str, Any] = {"name": name, "type": kind, "config": settings}
    if "tasks.max" in config:
        doc["tasks"] = config["tasks.max"]
    if PLUGINS[str(kind)] == "sink":
        doc["topics"] = _list(config.get("topics"))
    else:
        doc["topic"] = config.get("topic")
    try:
        return parse_config({"connectors": [doc]}, source=f"connector {name!r}").connectors[0]
    except ConfigError as exc:  # named as the map names them: `namenode`, `topics`, not connectors[0].config.namenode
        text = str(exc).replace("connectors[0].config.", "").replace("connectors[0].tasks:", "tasks.max:")
        raise ConfigError(text.replace("connectors[0]: ", "").replace("connectors[0].", "")) from None


def to_runner_config(connector: ConnectorConfig) -> dict[str, Any]:
    """The YAML document of a runner of this one connector (``talos connect run``)."""
    return RunnerConfig(connectors=[connector], status_interval_s=60).model_dump(mode="json", exclude_none=True)
