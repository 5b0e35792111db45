"""The HDFS sink's file names and file contents, with no I/O.

A file holds a contiguous offset range of one partition, and its name says which:
``<topic>+<partition>+<first offset>+<last offset>.<jsonl|parquet>`` (offsets zero-padded to 20 digits, so
names sort by offset). Before it is renamed into place it is staged as ``<that name>.<token>-<size>.tmp``:
the token is unique to the writer, so two writers staging the same range never touch each other's file,
and the size tells a complete staged file from one whose writer stopped (or is paused) in the middle.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Sequence

import orjson

from connectors.records import message_json
from talos import Message

__all__ = ["FileRange", "encode", "file_name", "parse_file_name", "parse_temp_name", "resume_offset", "temp_name"]

_NAME = re.compile(r"^(?P<topic>.+)\+(?P<partition>\d+)\+(?P<start>\d{20})\+(?P<end>\d{20})\.(?P<ext>jsonl|parquet)$")

FileRange = tuple[str, int, int, int]  # topic, partition, first offset, last offset


def file_name(topic: str, partition: int, start: int, end: int, fmt: str) -> str:
    return f"{topic}+{partition}+{start:020d}+{end:020d}.{fmt}"


def parse_file_name(name: str) -> FileRange | None:
    match = _NAME.match(name)
    if match is None:
        return None
    return match["topic"], int(match["partition"]), int(match["start"]), int(match["end"])


def temp_name(final: str, token: str, size: int) -> str:
    """The staged name of the file ``final`` (a name from :func:`file_name`) of ``size`` bytes."""
    return f"{final}.{token}-{size}.tmp"


def parse_temp_name(name: str) -> tuple[str, FileRange, int] | None:
    """The final name a staged file is for, its range and its size when complete (None: not a staged file's
    name)."""
    final, dot, rest = name.removesuffix(".tmp").rpartition(".")
    token, dash, size = rest.rpartition("-")
    if not name.endswith(".tmp") or not dot or not token or not dash or not size.isdigit():
        return None
    parsed = parse_file_name(final)
    return None if parsed is None else (final, parsed, int(size))


def resume_offset(names: Iterable[str], topic: str, partition: int) -> int | None:
    """The offset after the last one the partition's files hold (None: no files)."""
    ends = [parsed[3] for parsed in map(parse_file_name, names) if parsed and parsed[:2] == (topic, partition)]
    return max(ends) + 1 if ends else None


def encode(messages: Sequence[Message], fmt: str) -> bytes:
    """The file's bytes: one JSON object per line, or a Parquet table with the Spark source's columns."""
    if fmt == "jsonl":
        return b"".join(orjson.dumps(message_json(m)) + b"\n" for m in messages)
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "topic": pa.array([m.topic for m in messages], pa.string()),
            "partition": pa.array([m.partition for m in messages], pa.int32()),
            "offset": pa.array([m.offset for m in messages], pa.int64()),
            "timestamp": pa.array([m.timestamp for m in messages], pa.timestamp("ms", tz="UTC")),
            "key": pa.array([m.key for m in messages], pa.binary()),
            "value": pa.array([m.value for m in messages], pa.binary()),
            "headers": pa.array(
                [[{"key": k, "value": v} for k, v in m.headers] for m in messages],
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ),
        }
    )
    out = io.BytesIO()
    pq.write_table(table, out, compression="snappy")
    return out.getvalue()
