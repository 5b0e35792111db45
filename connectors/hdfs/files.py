"""The HDFS sink's file names and file contents, with no I/O.

A file holds a contiguous offset range of one partition, and its name says which:
``<topic>+<partition>+<first offset>+<last offset>.<jsonl|parquet>`` (offsets zero-padded to 20 digits, so
names sort by offset). A restarted task resumes after the highest last offset it finds, whatever the
committed offset says, so a file renamed into place just before a crash is never written again.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Sequence

import orjson

from connectors.records import message_json
from talos import Message

__all__ = ["FileRange", "encode", "file_name", "parse_file_name", "resume_offset"]

_NAME = re.compile(r"^(?P<topic>.+)\+(?P<partition>\d+)\+(?P<start>\d{20})\+(?P<end>\d{20})\.(?P<ext>jsonl|parquet)$")

FileRange = tuple[str, int, int, int]  # topic, partition, first offset, last offset


def file_name(topic: str, partition: int, start: int, end: int, fmt: str) -> str:
    return f"{topic}+{partition}+{start:020d}+{end:020d}.{fmt}"


def parse_file_name(name: str) -> FileRange | None:
    match = _NAME.match(name)
    if match is None:
        return None
    return match["topic"], int(match["partition"]), int(match["start"]), int(match["end"])


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
