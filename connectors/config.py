"""The runner's configuration file (``talos connect run CONFIG.yaml``), validated before anything starts.

Each connector names its ``type`` and carries that type's settings under ``config``; unknown keys are
errors (a misspelt ``roll_byte`` must not be silently ignored). :func:`load_config` raises
:class:`ConfigError` with one line per problem, each naming where it is (``connectors[1].config.path``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

__all__ = [
    "ConfigError",
    "ConnectorConfig",
    "ElasticsearchSinkSettings",
    "ElasticsearchSourceSettings",
    "HdfsSinkSettings",
    "HdfsSourceSettings",
    "RunnerConfig",
    "SETTINGS",
    "load_config",
    "parse_config",
]

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
TOPIC = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,248}$")


class ConfigError(ValueError):
    """The configuration cannot be used; the message lists every problem found."""


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _SinkSettings(_Settings):
    start: Literal["earliest", "latest"] = "earliest"  # where a partition with no committed offset starts
    session_timeout_s: Annotated[float, Field(gt=0.5, le=300)] = 10.0  # the group lock of each partition


class _SourceSettings(_Settings):
    # How long a task's claim on its work lasts unless renewed (renewed every third of it): a second runner
    # of the same connector waits this long after the first dies, then takes over.
    lease_s: Annotated[float, Field(gt=0.5, le=300)] = 10.0


class _HdfsSettings(_Settings):
    namenode: str  # WebHDFS address of the NameNode, http://host:port
    path: str
    user: str | None = None  # HDFS user (simple authentication); default: the local user

    @field_validator("namenode")
    @classmethod
    def _http(cls, value: str) -> str:
        return _http_url(value, "the NameNode's WebHDFS address")

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        return _hdfs_path(value)


class HdfsSinkSettings(_SinkSettings, _HdfsSettings):
    # path: files go under PATH/<topic>/<partition>/
    format: Literal["jsonl", "parquet"] = "jsonl"
    roll_bytes: Annotated[int, Field(ge=1)] = 128 * 1024 * 1024
    roll_ms: Annotated[int, Field(ge=1)] = 60_000


class HdfsSourceSettings(_SourceSettings, _HdfsSettings):
    # path: a directory; its files (not sub-directories) are read
    format: Literal["jsonl", "text"] = "jsonl"
    pattern: str = "*"  # fnmatch pattern of file names to read
    poll_ms: Annotated[int, Field(ge=10)] = 1000
    batch_size: Annotated[int, Field(ge=1, le=100_000)] = 1000  # lines between checkpoints
    key_field: str | None = None  # jsonl: use this field of each object as the message key


class _SearchSettings(_Settings):
    hosts: Annotated[list[str], Field(min_length=1)]
    username: str | None = None
    password: str | None = None
    timeout_s: Annotated[float, Field(gt=0)] = 30.0

    @field_validator("hosts")
    @classmethod
    def _urls(cls, value: list[str]) -> list[str]:
        return [_http_url(host, "a search server address") for host in value]


class ElasticsearchSinkSettings(_SinkSettings, _SearchSettings):
    index: str = "{topic}"  # pattern: {topic}, {partition} and date parts of the record's time {yyyy.MM.dd}
    batch_size: Annotated[int, Field(ge=1, le=100_000)] = 500
    flush_ms: Annotated[int, Field(ge=1)] = 1000
    template: dict[str, Any] | None = None  # an index template body, installed as <connector name>
    metadata_field: str | None = "talos"  # where topic/partition/offset/key go in each document; null: nowhere
    on_error: Literal["fail", "skip"] = "fail"  # a document the server refuses (other than 429/5xx)

    @field_validator("index")
    @classmethod
    def _pattern(cls, value: str) -> str:
        from connectors.elasticsearch.naming import check_index_pattern

        return check_index_pattern(value)


class ElasticsearchSourceSettings(_SourceSettings, _SearchSettings):
    index: str  # an index name or pattern to read
    query: dict[str, Any] = Field(default_factory=lambda: {"match_all": {}})
    timestamp_field: str = "@timestamp"
    id_field: str = "_id"  # tie-breaker of the sort; Elasticsearch 8 needs a keyword field here
    batch_size: Annotated[int, Field(ge=1, le=10_000)] = 500
    follow: bool = False  # keep polling for new documents instead of finishing at the end
    poll_ms: Annotated[int, Field(ge=10)] = 1000


SETTINGS: dict[str, type[_Settings]] = {
    "hdfs-sink": HdfsSinkSettings,
    "hdfs-source": HdfsSourceSettings,
    "elasticsearch-sink": ElasticsearchSinkSettings,
    "elasticsearch-source": ElasticsearchSourceSettings,
}


class ConnectorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    type: Literal["hdfs-sink", "hdfs-source", "elasticsearch-sink", "elasticsearch-source"]
    topics: list[str] | None = None  # sinks: the topics to read
    topic: str | None = None  # sources: the topic to write
    tasks: Annotated[int, Field(ge=1, le=256)] = 1
    config: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME.match(value):
            raise ValueError("1-100 characters of A-Z a-z 0-9 . _ -, not starting with . _ -")
        return value

    @model_validator(mode="after")
    def _shape(self) -> ConnectorConfig:
        if self.is_sink:
            if not self.topics:
                raise ValueError(f"a {self.type} needs `topics: [...]` (the topics it reads)")
            if self.topic is not None:
                raise ValueError(f"a {self.type} reads `topics: [...]`; `topic:` is for sources")
            for topic in self.topics:
                _check_topic(topic)
        else:
            if not self.topic:
                raise ValueError(f"a {self.type} needs `topic:` (the topic it writes)")
            if self.topics is not None:
                raise ValueError(f"a {self.type} writes one `topic:`; `topics:` is for sinks")
            _check_topic(self.topic)
        if self.type == "elasticsearch-source" and self.tasks != 1:
            raise ValueError("an elasticsearch-source runs one task (its search_after cursor cannot be split)")
        return self

    @property
    def is_sink(self) -> bool:
        return self.type.endswith("-sink")

    @property
    def settings(self) -> Any:
        """The type's settings model (validated by :func:`parse_config`)."""
        return SETTINGS[self.type].model_validate(self.config)


class RunnerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str | None = None  # the Talos server; --url and TALOS_URL override it
    status_interval_s: Annotated[float, Field(gt=0)] = 10.0
    connectors: Annotated[list[ConnectorConfig], Field(min_length=1)]

    @model_validator(mode="after")
    def _unique(self) -> RunnerConfig:
        seen: set[str] = set()
        for connector in self.connectors:
            if connector.name in seen:
                raise ValueError(f"two connectors are named {connector.name!r}; names must be unique")
            seen.add(connector.name)
        return self


def _check_topic(name: str) -> None:
    if not TOPIC.match(name):
        raise ValueError(f"invalid topic name {name[:100]!r}")


def _http_url(value: str, what: str) -> str:
    if not re.match(r"^https?://[^/\s]+", value):
        raise ValueError(f"{what} must be an http:// or https:// URL, not {value!r}")
    return value.rstrip("/")


def _hdfs_path(value: str) -> str:
    if not value.startswith("/") or "\x00" in value:
        raise ValueError(f"an absolute HDFS path is needed, not {value!r}")
    return value.rstrip("/") or "/"


def _where(location: tuple[int | str, ...]) -> str:
    out = ""
    for part in location:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _problems(error: ValidationError, prefix: tuple[int | str, ...] = ()) -> list[str]:
    lines = []
    for item in error.errors():
        location = prefix + tuple(p for p in item["loc"] if not str(p).startswith("function-after"))
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown setting"
        lines.append(f"{_where(location)}: {message}")
    return lines


def parse_config(data: object, *, source: str = "configuration") -> RunnerConfig:
    """Validate a parsed YAML document; :class:`ConfigError` lists every problem."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping with `connectors: [...]` at the top level")
    try:
        config = RunnerConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source} is not valid:\n  " + "\n  ".join(_problems(exc))) from None
    problems = []
    for index, connector in enumerate(config.connectors):
        try:
            connector.settings  # noqa: B018  (validates)
        except ValidationError as exc:
            problems += _problems(exc, ("connectors", index, "config"))
    if problems:
        raise ConfigError(f"{source} is not valid:\n  " + "\n  ".join(problems))
    return config


def load_config(path: str | Path) -> RunnerConfig:
    """Read and validate a YAML configuration file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    return parse_config(data, source=str(path))
