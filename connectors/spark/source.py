"""The PySpark data source ``talos`` (Python Data Source API of PySpark 4.x; no JVM code).

    spark.dataSource.register(TalosDataSource)
    stream = (spark.readStream.format("talos").option("url", URL).option("topic", "orders")
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 10000).load())

Columns: ``topic, partition, offset, timestamp, key, value, headers``. A micro-batch covers fixed offset
ranges per partition; Spark checkpoints them, so a restarted query re-reads exactly an uncommitted batch
and never skips one. ``df.write.format("talos")`` (and ``writeStream``) produce rows (``value``, optional
``key``, ``partition``, ``headers``) into ``topic``. Everything goes through the public SDK.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from connectors.reading import read_range
from connectors.spark.offsets import Offsets, Range, cap, parse_offsets, ranges
from talos import DEFAULT_URL, Admin, Producer

__all__ = ["SCHEMA", "TalosDataSource"]

SCHEMA = (
    "topic string, partition int, offset long, timestamp timestamp, key binary, value binary, "
    "headers map<string, binary>"
)
_READ_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class _Split(InputPartition):
    range: Range
    url: str

    def __init__(self, range: Range, url: str) -> None:  # InputPartition's own __init__ takes a value
        object.__setattr__(self, "range", range)
        object.__setattr__(self, "url", url)


def _topics(options: Mapping[str, str]) -> list[str]:
    raw = options.get("topics") or options.get("topic")
    if not raw:
        raise ValueError("the talos source needs option 'topic' (or 'topics', comma separated)")
    return [t.strip() for t in raw.split(",") if t.strip()]


def _bounds(url: str, topics: list[str]) -> dict[str, dict[int, tuple[int, int]]]:
    """Earliest and latest offset of every partition of the topics."""
    with Admin(url) as admin:
        out: dict[str, dict[int, tuple[int, int]]] = {}
        for topic in topics:
            out[topic] = {}
            for partition in range(admin.describe_topic(topic).partitions):
                offsets = admin.offsets(topic, partition)
                out[topic][partition] = (offsets["earliest"], offsets["latest"])
        return out


def _read(split: _Split) -> Iterator[tuple[Any, ...]]:
    """Rows of one range, every offset in it (a range ends at or below the durable end it was planned on)."""
    r = split.range
    for message in read_range(split.url, r.topic, r.partition, r.start, r.end, timeout_s=_READ_TIMEOUT_S):
        stamp = dt.datetime.fromtimestamp(message.timestamp / 1000, tz=dt.UTC)
        yield (r.topic, r.partition, message.offset, stamp, message.key, message.value, dict(message.headers))


class _BatchReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self._url = options.get("url", DEFAULT_URL)
        bounds = _bounds(self._url, _topics(options))
        self._start = parse_offsets(options.get("startingOffsets", "earliest"), bounds, what="startingOffsets")
        self._end = parse_offsets(options.get("endingOffsets", "latest"), bounds, what="endingOffsets")

    def partitions(self) -> list[_Split]:
        return [_Split(r, self._url) for r in ranges(self._start, self._end)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, _Split)
        return _read(partition)


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, str]) -> None:
        self._url = options.get("url", DEFAULT_URL)
        self._topics = _topics(options)
        self._starting = options.get("startingOffsets", "latest")
        limit = options.get("maxOffsetsPerTrigger")
        self._max_rows = int(limit) if limit else None
        if self._max_rows is not None and self._max_rows < 1:
            raise ValueError("maxOffsetsPerTrigger must be a positive number of rows")
        self._target: Offsets | None = None

    def prepareForTriggerAvailableNow(self) -> None:
        """``trigger(availableNow=True)``: read up to what is there now, in batches of the limit, then stop."""
        self._target = self._latest()

    def initialOffset(self) -> Offsets:
        return parse_offsets(self._starting, _bounds(self._url, self._topics), what="startingOffsets")

    def _latest(self) -> Offsets:
        bounds = _bounds(self._url, self._topics)
        return {t: {str(p): b[1] for p, b in parts.items()} for t, parts in bounds.items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self._max_rows) if self._max_rows is not None else ReadAllAvailable()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self._max_rows
        if isinstance(limit, ReadAllAvailable) and self._target is None:
            max_rows = None
        return cap(start, self._target if self._target is not None else self._latest(), max_rows)

    def reportLatestOffset(self) -> Offsets:
        return self._latest()

    def partitions(self, start: Offsets, end: Offsets) -> list[_Split]:
        return [_Split(r, self._url) for r in ranges(start, end)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, _Split)
        return _read(partition)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: Talos keeps the data; the query's checkpoint keeps the offsets."""


@dataclass
class _Written(WriterCommitMessage):
    rows: int


def _produce(options: Mapping[str, str], rows: Iterator[Any]) -> _Written:
    """Send rows to the topic through an idempotent producer; return once every row is acknowledged."""
    url, topic = options.get("url", DEFAULT_URL), options.get("topic")
    if not topic:
        raise ValueError("writing to talos needs option 'topic'")
    count = 0
    with Producer(url, idempotent=True) as producer:
        futures = []
        for row in rows:
            fields = row.asDict() if hasattr(row, "asDict") else dict(row)
            headers = fields.get("headers") or None
            futures.append(
                producer.send(
                    topic,
                    fields.get("value"),
                    key=fields.get("key"),
                    partition=fields.get("partition"),
                    headers=headers,
                )
            )
            count += 1
        producer.flush()
        for future in futures:
            future.result()
    return _Written(count)


class _BatchWriter(DataSourceWriter):
    def __init__(self, options: Mapping[str, str]) -> None:
        self._options = options

    def write(self, iterator: Iterator[Any]) -> _Written:
        return _produce(self._options, iterator)


class _StreamWriter(DataSourceStreamWriter):
    def __init__(self, options: Mapping[str, str]) -> None:
        self._options = options

    def write(self, iterator: Iterator[Any]) -> _Written:
        return _produce(self._options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Each task's rows were acknowledged before it returned: nothing is left to do."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Rows already acknowledged stay; a retried task resends its rows (at least once into Talos)."""


class TalosDataSource(DataSource):
    """``format("talos")``: read topics (batch or streaming) and write into a topic."""

    @classmethod
    def name(cls) -> str:
        return "talos"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> _BatchReader:
        return _BatchReader(self.options)

    def streamReader(self, schema: StructType) -> _StreamReader:
        return _StreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> _BatchWriter:
        return _BatchWriter(self.options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> _StreamWriter:
        return _StreamWriter(self.options)
