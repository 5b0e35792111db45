"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: topic settings under Kafka's names, broker configs
as fixed defaults.

A topic's configs are the table of ``server.topic_configs``: each setting with its value, ``DYNAMIC_TOPIC_CONFIG``
when the topic has it set (it differs from the default) and ``DEFAULT_CONFIG`` otherwise; the configs Talos does
not let a topic change (``READ_ONLY``, and ``max.message.bytes`` from the server's request limit) read-only. A
tenant describes the topics it may see (as REST's ``GET /v1/topics/{t}`` shows their settings) and alters the
ones it may administer, through the same service as REST's ``PATCH`` (``server.messaging.topics.update_topic``):
checked, limited and audited alike. AlterConfigs replaces the topic's whole set, as Kafka's does (a setting it
does not name goes back to its default); IncrementalAlterConfigs sets, deletes (back to the default), appends to
or subtracts from (``cleanup.policy``, a list) only what it names.

Broker configs are what this server runs with, under Kafka's names, read-only: they come from its configuration
file, not from an API, so altering one is refused (``POLICY_VIOLATION``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from server.config import ServerConfig
from server.errors import ApiError
from server.groups.offsets import OFFSETS_RETENTION_MS
from server.kafka.context import Context
from server.kafka.failures import admin_error_code
from server.kafka.nodes import node_id, nodes
from server.kafka.protocol.errors import ErrorCode
from server.kafka.session import MECHANISMS
from server.messaging.topics import readable_topic, update_topic
from server.topic_configs import (
    BY_KAFKA_NAME,
    CONFIG_TYPES,
    KAFKA_SETTINGS,
    READ_ONLY,
    check_settings,
    kafka_value,
    parse_kafka,
)
from server.topics import TopicConfig

__all__ = ["alter_configs", "describe_configs", "fixed_unchanged", "incremental_alter_configs"]

TOPIC, BROKER = 2, 4  # ConfigResource.Type
# ConfigSource
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
# IncrementalAlterConfigs' operations
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

_DEFAULTS: dict[str, Any] = {field.name: field.default for field in dataclasses.fields(TopicConfig)}
# Settings whose None means "unlimited" or "the server's default", rather than "back to the default value".
_NONE_ALLOWED = frozenset({"retention_ms", "retention_bytes", "max_compaction_lag_ms", "segment_ms", "segment_bytes"})

# A topic config's broker-wide counterpart (what Kafka reports as its synonym).
_BROKER_NAMES = {
    "cleanup.policy": "log.cleanup.policy",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "segment.ms": "log.roll.ms",
    "segment.bytes": "log.segment.bytes",
    "compression.type": "compression.type",
    "message.timestamp.type": "log.message.timestamp.type",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "message.downconversion.enable": "log.message.downconversion.enable",
    "max.message.bytes": "message.max.bytes",
}
_READ_ONLY_DOCS = {
    "compression.type": "batches are stored as the producer compressed them",
    "message.timestamp.type": "records keep the producer's timestamps",
    "min.insync.replicas": "the shared storage is the replication: one replica, always in sync",
    "unclean.leader.election.enable": "a partition's next owner recovers its log from the shared storage",
    "message.downconversion.enable": "record batches v2 only",
    "max.message.bytes": "the largest record batch a produce request may carry (the server's max_request_bytes)",
}


@dataclass(frozen=True, slots=True)
class _Entry:
    name: str
    value: str | None
    source: int
    kind: str  # Kafka's ConfigType name
    documentation: str
    read_only: bool = True
    synonym: str | None = None  # the broker config it falls back to


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# ---------------------------------------------------------------- what a topic and a broker have


def _server_default(server: ServerConfig, field: str) -> str:
    """The server's value of a setting a topic leaves unset ("" where None means unlimited)."""
    return {"segment_ms": str(server.segment_ms), "segment_bytes": str(server.segment_bytes)}.get(field, "")


def _fixed(server: ServerConfig) -> dict[str, tuple[str, str]]:
    """Topic configs no topic changes: name → (value, Kafka type)."""
    return {**READ_ONLY, "max.message.bytes": (str(server.max_request_bytes), "INT")}


def _topic_entries(config: TopicConfig, server: ServerConfig) -> list[_Entry]:
    out = []
    for setting in KAFKA_SETTINGS:
        value = getattr(config, setting.field)
        source = DEFAULT_CONFIG if value == _DEFAULTS[setting.field] else DYNAMIC_TOPIC_CONFIG
        out.append(
            _Entry(
                setting.name,
                kafka_value(setting, value, _server_default(server, setting.field)),
                source,
                setting.kind,
                setting.documentation,
                read_only=False,
                synonym=_BROKER_NAMES.get(setting.name),
            )
        )
    for name, (value, kind) in _fixed(server).items():
        out.append(
            _Entry(name, value, DEFAULT_CONFIG, kind, _READ_ONLY_DOCS.get(name, ""), synonym=_BROKER_NAMES.get(name))
        )
    return out


def _broker_entries(ctx: Context) -> list[_Entry]:
    """This server's configuration under Kafka's broker config names, read-only."""
    broker = ctx.broker
    server = broker.config
    me = broker.cluster.server_id if broker.cluster is not None else server.member_id
    sasl = broker.security.enabled
    advertised = ",".join(f"{spec.protocol(sasl=sasl)}://{spec.advertised}" for spec in server.kafka_listener_specs)
    static: list[tuple[str, str, str, str]] = [  # from the server's configuration
        ("broker.id", str(node_id(me)), "INT", f"a hash of the server id {me!r}, stable across restarts"),
        ("advertised.listeners", advertised, "STRING", "what clients connect to, per listener"),
        ("num.partitions", str(server.default_partitions), "INT", "partitions of a topic created without a count"),
        ("message.max.bytes", str(server.max_request_bytes), "INT", "the largest request (and record batch)"),
        (
            "offsets.topic.num.partitions",
            str(server.group_offsets_partitions),
            "INT",
            "partitions of the offsets topic",
        ),
        ("group.min.session.timeout.ms", str(int(server.group_min_session_s * 1000)), "INT", "shortest session"),
        ("group.max.session.timeout.ms", str(int(server.group_max_session_s * 1000)), "INT", "longest session"),
    ]
    for setting in KAFKA_SETTINGS:  # the topics' defaults, under the broker's names
        if setting.field in ("segment_ms", "segment_bytes"):
            value = _server_default(server, setting.field)
            static.append((_BROKER_NAMES[setting.name], value, setting.kind, setting.documentation))
    fixed: list[tuple[str, str, str, str]] = [
        ("default.replication.factor", "1", "INT", "the shared storage is the replication"),
        ("offsets.topic.replication.factor", "1", "SHORT", "the shared storage is the replication"),
        ("auto.create.topics.enable", "false", "BOOLEAN", "topics are made explicitly: they count against a quota"),
        ("delete.topic.enable", "true", "BOOLEAN", "DeleteTopics deletes a topic and its data"),
        ("offsets.retention.minutes", str(OFFSETS_RETENTION_MS // 60_000), "INT", "committed offsets kept this long"),
        ("connections.max.idle.ms", "600000", "LONG", "an idle connection is closed after this"),
        ("fetch.max.bytes", str(64 * 1024 * 1024), "INT", "the most a fetch answer carries"),
        ("sasl.enabled.mechanisms", ",".join(MECHANISMS), "LIST", "a tenant's token as the password or bearer"),
    ]
    for setting in KAFKA_SETTINGS:
        if setting.name not in _BROKER_NAMES:
            continue  # a topic's own (schema validation), with no broker-wide default
        if setting.field not in ("segment_ms", "segment_bytes"):
            value = kafka_value(setting, _DEFAULTS[setting.field], "")
            fixed.append((_BROKER_NAMES[setting.name], value, setting.kind, setting.documentation))
    for name, (value, kind) in READ_ONLY.items():
        fixed.append((_BROKER_NAMES.get(name, name), value, kind, _READ_ONLY_DOCS.get(name, "")))
    entries = [_Entry(name, value, STATIC_BROKER_CONFIG, kind, doc) for name, value, kind, doc in static]
    entries += [_Entry(name, value, DEFAULT_CONFIG, kind, doc) for name, value, kind, doc in fixed]
    return sorted(entries, key=lambda e: e.name)


def _check_broker_name(ctx: Context, name: str) -> None:
    """A BROKER resource names one broker by its node id, or none ("": the cluster-wide defaults)."""
    if name and name not in {str(node.node_id) for node in nodes(ctx.broker)}:
        raise _Refused(ErrorCode.INVALID_REQUEST, f"no broker {name[:50]!r} (brokers: {_broker_ids(ctx)})")


def _broker_ids(ctx: Context) -> str:
    return ", ".join(str(node.node_id) for node in nodes(ctx.broker)) or "none"


# ---------------------------------------------------------------- DescribeConfigs


def _describe_entry(entry: _Entry, version: int, synonyms: bool, documentation: bool) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "name": entry.name,
        "value": entry.value,
        "read_only": entry.read_only,
        "is_default": entry.source == DEFAULT_CONFIG,
        "config_source": entry.source,
        "is_sensitive": False,
        "synonyms": [],
        "config_type": CONFIG_TYPES.get(entry.kind, 0),
        "documentation": entry.documentation if documentation else None,
    }
    if synonyms and version >= 1:
        found = [{"name": entry.name, "value": entry.value, "source": entry.source}]
        if entry.synonym is not None and entry.source == DYNAMIC_TOPIC_CONFIG:
            found.append({"name": entry.synonym, "value": None, "source": DEFAULT_CONFIG})
        answer["synonyms"] = found
    return answer


async def describe_configs(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    version = ctx.header.api_version
    synonyms = bool(body.get("include_synonyms"))
    documentation = bool(body.get("include_documentation"))
    results = []
    for resource in body.get("resources") or []:
        kind, name = resource["resource_type"], resource["resource_name"]
        result: dict[str, Any] = {
            "error_code": 0,
            "error_message": None,
            "resource_type": kind,
            "resource_name": name,
            "configs": [],
        }
        try:
            if kind == TOPIC:
                config = readable_topic(ctx.broker, ctx.session.principal, name)
                entries = _topic_entries(config, ctx.broker.config)
            elif kind == BROKER:
                _check_broker_name(ctx, name)
                entries = _broker_entries(ctx)
            else:
                raise _Refused(ErrorCode.INVALID_REQUEST, f"resource type {kind}: only topics (2) and brokers (4)")
        except _Refused as refused:
            result.update(error_code=refused.code, error_message=refused.message)
        except ApiError as exc:
            result.update(error_code=admin_error_code(exc), error_message=exc.message)
        else:
            keys = resource.get("configuration_keys")
            if keys is not None:  # null: every config (an empty list: none, as the protocol says)
                wanted = set(keys)
                entries = [e for e in entries if e.name in wanted]
            result["configs"] = [_describe_entry(e, version, synonyms, documentation) for e in entries]
        results.append(result)
    return {"throttle_time_ms": 0, "results": results}


# ---------------------------------------------------------------- AlterConfigs, IncrementalAlterConfigs


def _parsed(name: str, value: str | None) -> tuple[str, object]:
    """A topic setting as (field, value): a null or -1 value is the default (unlimited where that is the default)."""
    field, parsed = parse_kafka(name, value)
    if parsed is None and field not in _NONE_ALLOWED:
        parsed = _DEFAULTS[field]
    return field, parsed


def fixed_unchanged(server: ServerConfig, name: str, value: str | None) -> bool:
    """Whether ``name`` is a config no topic changes, given its one value (or deleted): nothing to do. Another
    value raises INVALID_CONFIG; a config Talos does not know is for :func:`parse_kafka` to refuse."""
    fixed = _fixed(server)
    if name not in fixed:
        return False
    if value is not None and value != fixed[name][0]:
        raise ApiError(400, "INVALID_CONFIG", f"{name} is fixed on Talos ({fixed[name][0]})")
    return True


def _names_once(configs: Iterable[dict[str, Any]]) -> None:
    seen: set[str] = set()
    for config in configs:
        if config["name"] in seen:
            raise ApiError(400, "INVALID_REQUEST", f"config {config['name'][:100]!r} is named twice")
        seen.add(config["name"])


def _replacement(ctx: Context, configs: list[dict[str, Any]]) -> dict[str, object]:
    """AlterConfigs: every topic setting, those not named back to their defaults."""
    _names_once(configs)
    settings = {setting.field: _DEFAULTS[setting.field] for setting in KAFKA_SETTINGS}
    for config in configs:
        if not fixed_unchanged(ctx.broker.config, config["name"], config["value"]):
            field, value = _parsed(config["name"], config["value"])
            settings[field] = value
    return settings


def _policies(value: object) -> list[str]:
    return [part.strip() for part in str(value or "").split(",") if part.strip()]


def _increments(ctx: Context, current: TopicConfig, configs: list[dict[str, Any]]) -> dict[str, object]:
    """IncrementalAlterConfigs: only the named settings, each set, deleted (its default), appended to or
    subtracted from (list settings)."""
    _names_once(configs)
    changes: dict[str, object] = {}
    for config in configs:
        name, operation, value = config["name"], config["config_operation"], config["value"]
        if operation not in (SET, DELETE, APPEND, SUBTRACT):
            raise ApiError(400, "INVALID_REQUEST", f"config {name[:100]!r}: unknown operation {operation}")
        if fixed_unchanged(ctx.broker.config, name, value if operation != DELETE else None):
            if operation in (APPEND, SUBTRACT):
                raise ApiError(400, "INVALID_CONFIG", f"{name} is fixed on Talos")
            continue
        if operation == SET:
            field, parsed = _parsed(name, value)
        elif operation == DELETE:
            field = _parsed(name, None)[0]
            parsed = _DEFAULTS[field]
        else:
            setting = BY_KAFKA_NAME.get(name)
            field = _parsed(name, None)[0]  # INVALID_CONFIG for a config Talos does not have
            if setting is None or setting.kind != "LIST":
                raise ApiError(400, "INVALID_CONFIG", f"{name} is not a list: append and subtract are for lists")
            now = _policies(changes.get(field, getattr(current, field)))
            given = _policies(value)
            merged = (
                now + [p for p in given if p not in now] if operation == APPEND else [p for p in now if p not in given]
            )
            parsed = ",".join(merged)
        changes[field] = parsed
    return changes


def _resource_answer(resource: dict[str, Any]) -> dict[str, Any]:
    return {
        "error_code": 0,
        "error_message": None,
        "resource_type": resource["resource_type"],
        "resource_name": resource["resource_name"],
    }


def _alterable(ctx: Context, resource: dict[str, Any]) -> TopicConfig:
    """The topic a resource names, once the caller may administer it; refused for any other resource."""
    kind, name = resource["resource_type"], resource["resource_name"]
    if kind == BROKER:
        raise _Refused(
            ErrorCode.POLICY_VIOLATION,
            "broker configs are the server's configuration (its file, environment or flags), not changed by an API",
        )
    if kind != TOPIC:
        raise _Refused(ErrorCode.INVALID_REQUEST, f"resource type {kind}: only topics (2) have configs to alter")
    broker = ctx.broker
    current = broker.topic(name)
    broker.security.authorize(ctx.session.principal, current, "admin")
    return current


async def _alter(ctx: Context, resource: dict[str, Any], validate_only: bool, *, incremental: bool) -> dict[str, Any]:
    answer = _resource_answer(resource)
    try:
        current = _alterable(ctx, resource)
        configs = resource.get("configs") or []
        wanted = _increments(ctx, current, configs) if incremental else _replacement(ctx, configs)
        wanted = check_settings(wanted, current=current)  # normalised ("delete,compact" is "compact,delete")
        changes = {field: value for field, value in wanted.items() if getattr(current, field) != value}
        if changes:
            await update_topic(ctx.broker, ctx.session.principal, current.name, changes, validate_only=validate_only)
    except _Refused as refused:
        answer.update(error_code=refused.code, error_message=refused.message)
    except ApiError as exc:
        answer.update(error_code=admin_error_code(exc), error_message=exc.message)
    return answer


async def alter_configs(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    validate_only = bool(body.get("validate_only"))
    responses = [await _alter(ctx, r, validate_only, incremental=False) for r in body.get("resources") or []]
    return {"throttle_time_ms": 0, "responses": responses}


async def incremental_alter_configs(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    validate_only = bool(body.get("validate_only"))
    responses = [await _alter(ctx, r, validate_only, incremental=True) for r in body.get("resources") or []]
    return {"throttle_time_ms": 0, "responses": responses}
