"""Server configuration: defaults, then an optional TOML file, then ``TALOS_*`` environment, then flags."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

__all__ = ["ServerConfig", "load_config"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    storage: str = "./talos-data"  # a directory, file:///path or hdfs://host:port/path
    group_commit: bool = True  # off: one flush per request (for comparison)
    max_message_bytes: int = 1024 * 1024
    max_request_bytes: int = 8 * 1024 * 1024
    tail_cache_bytes: int = 256 * 1024 * 1024  # recent batches kept in memory, shared by all partitions
    segment_bytes: int = 128 * 1024 * 1024
    default_partitions: int = 1
    max_wait_ms: int = 30_000  # upper bound of a long poll
    io_threads: int = 8
    log_level: str = "info"
    access_log: bool = False

    def replace(self, **changes: Any) -> ServerConfig:
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


def _coerce(name: str, kind: type, raw: object) -> object:
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ValueError(f"{name}: expected a boolean, got {raw!r}")
    if kind is int:
        try:
            return int(str(raw).replace("_", ""))
        except ValueError:
            raise ValueError(f"{name}: expected an integer, got {raw!r}") from None
    return str(raw)


def load_config(file: str | Path | None = None, environ: dict[str, str] | None = None, **flags: Any) -> ServerConfig:
    """Merge the sources; unknown keys in the file are an error (a typo should not pass silently)."""
    env = os.environ if environ is None else environ
    kinds = {f.name: {"bool": bool, "int": int, "str": str}[str(f.type)] for f in fields(ServerConfig)}
    values: dict[str, object] = {}
    path = file or env.get("TALOS_CONFIG")
    if path:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
        data = data.get("server", data)
        unknown = sorted(set(data) - set(kinds))
        if unknown:
            raise ValueError(f"{path}: unknown settings {unknown}; known: {sorted(kinds)}")
        values.update({k: _coerce(k, kinds[k], v) for k, v in data.items()})
    for name, kind in kinds.items():
        raw = env.get(f"TALOS_{name.upper()}")
        if raw is not None:
            values[name] = _coerce(f"TALOS_{name.upper()}", kind, raw)
    values.update({k: v for k, v in flags.items() if v is not None})
    return ServerConfig(**values)  # type: ignore[arg-type]
