"""The ``talos`` PySpark data source on a real local Spark and a real Talos server."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from talos import Admin, Consumer, Message, Producer
from tests.spark.conftest import StandaloneServer


def produce(url: str, topic: str, count: int, partitions: int, start: int = 0) -> None:
    with Producer(url) as producer:
        for i in range(start, start + count):
            producer.send(
                topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=i % partitions, headers={"n": str(i)}
            )
        producer.flush()


def read_back(url: str, topic: str, count: int) -> list[Message]:
    """The topic's first ``count`` messages (failing if they do not all arrive)."""
    with Consumer(url, topics=[topic], start="earliest") as consumer:
        got: list[Message] = []
        while len(got) < count:
            batch = consumer.poll(5.0)
            assert batch, f"only {len(got)} of {count} messages arrived"
            got += batch
    return got


class BatchLog:
    """A foreachBatch sink that keeps each batch by id, as an idempotent sink must: a batch Spark runs
    again after a restart replaces itself (and must hold the same rows)."""

    def __init__(self) -> None:
        self.batches: dict[int, list[tuple[str, int, int, bytes]]] = {}
        self.replayed: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, batch: Any, batch_id: int) -> None:
        rows = sorted((r.topic, r.partition, r.offset, bytes(r.value)) for r in batch.collect())
        with self.lock:
            if batch_id in self.batches:
                assert self.batches[batch_id] == rows, f"batch {batch_id} replayed with other rows"
                self.replayed.append(batch_id)
            self.batches[batch_id] = rows

    def rows(self) -> list[tuple[str, int, int, bytes]]:
        return [row for _, rows in sorted(self.batches.items()) for row in rows]


def stream(spark: Any, url: str, topic: str, checkpoint: Path, sink: BatchLog, **options: Any) -> Any:
    reader = spark.readStream.format("talos").option("url", url).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    query = (
        reader.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(timeout=300)
    assert query.exception() is None
    return query


def test_a_stream_sees_every_message_once_across_a_restart_and_honours_max_offsets(
    spark: Any, server: StandaloneServer, topic_name: str, tmp_path: Path
) -> None:
    with Admin(server.url) as admin:
        admin.create_topic(topic_name, partitions=3)
    produce(server.url, topic_name, 45, 3)
    sink = BatchLog()
    options = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": 10}
    first = stream(spark, server.url, topic_name, tmp_path / "ckpt", sink, **options)
    sizes = [p["numInputRows"] for p in first.recentProgress if p["numInputRows"]]
    assert sizes and max(sizes) <= 10 and len(sizes) >= 5, sizes  # the limit holds, in several batches
    produce(server.url, topic_name, 30, 3, start=45)  # more arrives while the query is down
    stream(spark, server.url, topic_name, tmp_path / "ckpt", sink, **options)  # restarted from its checkpoint
    rows = sink.rows()
    assert len(rows) == 75 and len(set(rows)) == 75  # once each: nothing skipped, nothing repeated
    assert sorted(int(value[1:]) for *_, value in rows) == list(range(75))
    for partition in range(3):
        offsets = [offset for _, p, offset, _ in rows if p == partition]
        assert offsets == list(range(25))


def test_batch_reads_take_offset_bounds_and_columns(spark: Any, server: StandaloneServer, topic_name: str) -> None:
    with Admin(server.url) as admin:
        admin.create_topic(topic_name, partitions=2)
    produce(server.url, topic_name, 20, 2)
    frame = (
        spark.read.format("talos")
        .option("url", server.url)
        .option("topic", topic_name)
        .option("startingOffsets", json.dumps({topic_name: {"0": 2, "1": -2}}))
        .option("endingOffsets", json.dumps({topic_name: {"0": 5, "1": -1}}))
        .load()
    )
    assert frame.columns == ["topic", "partition", "offset", "timestamp", "key", "value", "headers"]
    rows = frame.orderBy("partition", "offset").collect()
    assert [(r.partition, r.offset) for r in rows] == [(0, 2), (0, 3), (0, 4)] + [(1, o) for o in range(10)]
    first = rows[0]
    assert (first.key, first.value, first.headers) == (b"k4", b"v4", {"n": b"4"})
    assert first.timestamp is not None
    with pytest.raises(Exception, match="topic"):
        spark.read.format("talos").option("url", server.url).load().collect()


def test_the_writer_produces_rows_a_consumer_reads_back(spark: Any, server: StandaloneServer, topic_name: str) -> None:
    with Admin(server.url) as admin:
        admin.create_topic(topic_name, partitions=2)
    rows = [(f"key-{i}", f"value-{i}", i % 2) for i in range(40)]
    frame = spark.createDataFrame(rows, "key string, value string, partition int").repartition(3)
    frame.write.format("talos").option("url", server.url).option("topic", topic_name).mode("append").save()
    got = read_back(server.url, topic_name, 40)
    assert sorted((m.key, m.value, m.partition) for m in got) == sorted((k.encode(), v.encode(), p) for k, v, p in rows)


def test_a_streaming_write_copies_a_topic_into_another(
    spark: Any, server: StandaloneServer, topic_name: str, tmp_path: Path
) -> None:
    source, target = topic_name, f"{topic_name}-copy"
    with Admin(server.url) as admin:
        admin.create_topic(source, partitions=2)
        admin.create_topic(target, partitions=1)
    produce(server.url, source, 30, 2)
    query = (
        spark.readStream.format("talos")
        .option("url", server.url)
        .option("topic", source)
        .option("startingOffsets", "earliest")
        .load()
        .select("key", "value")
        .writeStream.format("talos")
        .option("url", server.url)
        .option("topic", target)
        .option("checkpointLocation", str(tmp_path / "copy"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(timeout=300)
    assert query.exception() is None
    got = read_back(server.url, target, 30)
    assert sorted(m.value for m in got) == sorted(f"v{i}".encode() for i in range(30))
