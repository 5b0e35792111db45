"""A topic's settings under Kafka's names, and the checks every edge applies to them.

REST and the SDK name a setting in snake_case (``cleanup_policy``); Kafka's CreateTopics, DescribeConfigs,
AlterConfigs and IncrementalAlterConfigs name it as Kafka does (``cleanup.policy``). One table maps the
two, with the value's Kafka type, how to read Kafka's string, and what DescribeConfigs shows when the
topic does not set it. Pure: no I/O, so every edge and the tests share it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from server.errors import ApiError

__all__ = [
    "CLEANUP_POLICIES",
    "KAFKA_SETTINGS",
    "READ_ONLY",
    "KafkaSetting",
    "check_settings",
    "compacted",
    "deleted_by_retention",
    "kafka_value",
    "parse_kafka",
]

INT64_MAX = 2**63 - 1
CLEANUP_POLICIES = ("delete", "compact", "compact,delete")


def _policy(value: object) -> str:
    if isinstance(value, list | tuple):
        value = ",".join(str(v) for v in value)
    if not isinstance(value, str):
        raise ApiError(400, "INVALID_CONFIG", "cleanup_policy must be 'delete', 'compact' or 'compact,delete'")
    parts = sorted({part.strip() for part in value.lower().split(",") if part.strip()})
    policy = ",".join(parts)
    if policy not in CLEANUP_POLICIES:
        raise ApiError(
            400, "INVALID_CONFIG", f"cleanup_policy {value!r}: must be 'delete', 'compact' or 'compact,delete'"
        )
    return policy


def _integer(low: int, *, optional: bool) -> Callable[[str, object], int | None]:
    def check(name: str, value: object) -> int | None:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= INT64_MAX:
            raise ApiError(400, "INVALID_CONFIG", f"{name} must be an integer between {low} and {INT64_MAX}")
        return value

    return check


def _ratio(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
        raise ApiError(400, "INVALID_CONFIG", f"{name} must be a number between 0 and 1")
    return float(value)


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ApiError(400, "INVALID_CONFIG", f"{name} must be true or false")
    return value


def _trace(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1_000_000:
        raise ApiError(400, "INVALID_CONFIG", f"{name} must be an integer between 0 and 1000000")
    return value


_CHECKS: dict[str, Callable[[str, object], object]] = {
    "retention_ms": _integer(0, optional=True),
    "retention_bytes": _integer(0, optional=True),
    "trace_sample": _trace,
    "cleanup_policy": lambda _name, value: _policy(value),
    "min_compaction_lag_ms": _integer(0, optional=False),
    "max_compaction_lag_ms": _integer(1, optional=True),
    "delete_retention_ms": _integer(0, optional=False),
    "min_cleanable_dirty_ratio": _ratio,
    "segment_ms": _integer(1, optional=True),
    "segment_bytes": _integer(1024, optional=True),
    "value_schema_validation": _flag,
    "key_schema_validation": _flag,
}


def check_settings(settings: Mapping[str, object], *, current: Any = None) -> dict[str, object]:
    """The settings checked and normalised (400 INVALID_CONFIG naming the first bad one). With ``current``
    (the topic's settings now) the combination is checked as it will be after the change."""
    out: dict[str, object] = {}
    for name, value in settings.items():
        check = _CHECKS.get(name)
        if check is None:
            raise ApiError(400, "INVALID_CONFIG", f"unknown topic setting {name!r}")
        out[name] = check(name, value)
    low = out.get("min_compaction_lag_ms", getattr(current, "min_compaction_lag_ms", 0))
    high = out.get("max_compaction_lag_ms", getattr(current, "max_compaction_lag_ms", None))
    if high is not None and low is not None and int(high) < int(low):  # type: ignore[call-overload]
        raise ApiError(400, "INVALID_CONFIG", "max_compaction_lag_ms must not be below min_compaction_lag_ms")
    return out


def compacted(policy: str) -> bool:
    return "compact" in policy.split(",")


def deleted_by_retention(policy: str) -> bool:
    return "delete" in policy.split(",")


@dataclass(frozen=True, slots=True)
class KafkaSetting:
    """One topic config as Kafka names it: ``field`` in :class:`server.topics.TopicConfig`, Kafka's type
    (DescribeConfigs v3+ reports it), and how an unset (None) value reads in Kafka's terms."""

    name: str
    field: str
    kind: str  # Kafka's ConfigType name: STRING, INT, LONG, DOUBLE, LIST, BOOLEAN
    unset: str  # what Kafka shows for None ("-1": unlimited) or the server's default
    documentation: str


# A topic setting's Kafka config type ids (DescribeConfigs v3+).
CONFIG_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7, "CLASS": 8}

KAFKA_SETTINGS: tuple[KafkaSetting, ...] = (
    KafkaSetting("cleanup.policy", "cleanup_policy", "LIST", "delete", "delete, compact, or compact,delete"),
    KafkaSetting("retention.ms", "retention_ms", "LONG", "-1", "delete sealed segments older than this (-1: never)"),
    KafkaSetting(
        "retention.bytes", "retention_bytes", "LONG", "-1", "delete the oldest segments past this size (-1: never)"
    ),
    KafkaSetting("min.compaction.lag.ms", "min_compaction_lag_ms", "LONG", "0", "never compact younger records"),
    KafkaSetting(
        "max.compaction.lag.ms",
        "max_compaction_lag_ms",
        "LONG",
        str(INT64_MAX),
        "compact records older than this whatever the dirty ratio",
    ),
    KafkaSetting("delete.retention.ms", "delete_retention_ms", "LONG", "86400000", "how long tombstones stay"),
    KafkaSetting(
        "min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", "DOUBLE", "0.5", "compact past this dirty share"
    ),
    KafkaSetting("segment.ms", "segment_ms", "LONG", "", "roll the active segment at this age"),
    KafkaSetting("segment.bytes", "segment_bytes", "INT", "", "roll the active segment at this size"),
    KafkaSetting(
        "confluent.value.schema.validation",
        "value_schema_validation",
        "BOOLEAN",
        "false",
        "refuse values without a schema id registered under <topic>-value",
    ),
    KafkaSetting(
        "confluent.key.schema.validation",
        "key_schema_validation",
        "BOOLEAN",
        "false",
        "refuse keys without a schema id registered under <topic>-key",
    ),
)
BY_KAFKA_NAME = {setting.name: setting for setting in KAFKA_SETTINGS}

#: Configs Kafka reports for every topic that Talos does not let a topic change: name → (value, type).
READ_ONLY: dict[str, tuple[str, str]] = {
    "compression.type": ("producer", "STRING"),
    "message.timestamp.type": ("CreateTime", "STRING"),
    "min.insync.replicas": ("1", "INT"),
    "unclean.leader.election.enable": ("false", "BOOLEAN"),
    "message.downconversion.enable": ("false", "BOOLEAN"),
}


def kafka_value(setting: KafkaSetting, value: object, default: str) -> str:
    """A stored value as Kafka's string; ``default`` for an unset one that takes the server's value."""
    if value is None:
        return default or setting.unset
    if setting.kind == "DOUBLE":
        return repr(float(value))  # type: ignore[arg-type]
    if setting.kind == "BOOLEAN":
        return "true" if value else "false"
    return str(value)


def parse_kafka(name: str, value: str | None) -> tuple[str, object]:
    """A Kafka config (name, string value) as (field, value): ``-1`` and null mean unlimited or default;
    400 INVALID_CONFIG for a config Talos does not have or a value of the wrong type."""
    setting = BY_KAFKA_NAME.get(name)
    if setting is None:
        if name in READ_ONLY:
            raise ApiError(400, "INVALID_CONFIG", f"{name} is fixed on Talos ({READ_ONLY[name][0]})")
        known = ", ".join(s.name for s in KAFKA_SETTINGS)
        raise ApiError(400, "INVALID_CONFIG", f"unsupported topic config {name!r} ({known})")
    if value is None:
        return setting.field, None
    if setting.kind in ("STRING", "LIST"):
        return setting.field, value
    if setting.kind == "BOOLEAN":
        if value.lower() not in ("true", "false"):
            raise ApiError(400, "INVALID_CONFIG", f"{name} must be true or false, not {value[:50]!r}")
        return setting.field, value.lower() == "true"
    try:
        number: object = float(value) if setting.kind == "DOUBLE" else int(value)
    except ValueError:
        raise ApiError(400, "INVALID_CONFIG", f"{name} must be a number, not {value[:50]!r}") from None
    if setting.kind != "DOUBLE" and isinstance(number, int) and number < 0:
        return setting.field, None  # Kafka's -1: unlimited
    if name == "max.compaction.lag.ms" and number == INT64_MAX:
        return setting.field, None
    return setting.field, number
