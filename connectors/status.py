"""``talos connect status``: what Talos itself holds about each connector, with or without a runner.

A sink's progress is its consumer group (``connect-<name>``): members, and per partition the committed
offset and the lag. A source's is its checkpoints (``GET /v1/connectors/{name}/offsets``).
"""

from __future__ import annotations

from typing import Any

from connectors.checkpoints import CheckpointStore
from connectors.config import ConnectorConfig
from connectors.sink import group_name
from talos import Admin, NotFoundError

__all__ = ["connector_status"]


def connector_status(url: str, connector: ConnectorConfig) -> dict[str, Any]:
    """``{"name", "type", "summary", "lines", "detail"}`` for one connector."""
    entry: dict[str, Any] = {"name": connector.name, "type": connector.type}
    if connector.is_sink:
        return {**entry, **_sink(url, connector)}
    return {**entry, **_source(url, connector)}


def _sink(url: str, connector: ConnectorConfig) -> dict[str, Any]:
    group = group_name(connector.name)
    try:
        with Admin(url) as admin:
            described = admin.describe_group(group)
    except NotFoundError:
        return {"summary": f"not started yet (no group {group})", "lines": [], "detail": None}
    rows = described["partitions"]
    # Nothing committed yet: everything up to the high watermark is still to do (start: earliest).
    lag = sum(row["lag"] if row["lag"] is not None else row["high_watermark"] or 0 for row in rows)
    members = len(described["members"])
    lines = [
        f"{row['topic']}/{row['partition']}: committed {_cell(row['committed'])}, "
        f"high watermark {_cell(row['high_watermark'])}, lag {_cell(row['lag'])}"
        for row in rows
    ]
    return {"summary": f"{members} task(s) running, lag {lag} (group {group})", "lines": lines, "detail": described}


def _source(url: str, connector: ConnectorConfig) -> dict[str, Any]:
    store = CheckpointStore(url)
    try:
        checkpoints = store.load(connector.name)
    finally:
        store.close()
    if not checkpoints:
        return {"summary": "not started yet (no checkpoints)", "lines": [], "detail": None}
    lines = []
    for task, document in sorted(checkpoints.items()):
        state = document.get("state", {})
        if connector.type == "hdfs-source":
            files = state.get("files", {}).values()
            read = sum(int(f.get("position", 0)) for f in files)
            lines.append(f"task {task}: {len(files)} file(s), {read} bytes read")
        else:
            lines.append(f"task {task}: after {state.get('after') or '(nothing read yet)'}")
    return {"summary": f"checkpoints of {len(checkpoints)} task(s)", "lines": lines, "detail": checkpoints}


def _cell(value: object) -> str:
    return "-" if value is None else str(value)
