"""The segment log's memory of unsealed bytes, and the server's periodic roll of idle partitions."""

from __future__ import annotations

import asyncio
import os
import time
import tracemalloc
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from fencing import DirectoryEpochSource, PartitionLog, SegmentName
from fencing.local import LocalFileSystem
from fencing.log import _ChunkBuffer
from server.broker import Broker
from server.config import ServerConfig
from server.partition.tailcache import TailCache
from server.topics import TopicConfig
from talos import RecordData, encode_batch
from tests.helpers import read_all


class HdfsLikeDisk(LocalFileSystem):
    """The local disk, read as HDFS is: bytes of a file still open for writing are not visible."""

    reads_open_files = False


@given(
    chunks=st.lists(st.binary(min_size=1, max_size=40), max_size=12),
    position=st.integers(0, 300),
    size=st.integers(0, 300),
)
def test_the_chunk_buffer_reads_like_the_bytes_it_holds(chunks: list[bytes], position: int, size: int) -> None:
    memory = _ChunkBuffer()
    for chunk in chunks:
        memory.append(bytearray(chunk))
    whole = b"".join(chunks)
    assert memory.read(position, size) == whole[position : position + size]


def test_the_open_segment_in_memory_shares_the_tail_caches_batches(tmp_path: Path) -> None:
    """On HDFS the log keeps its open segment's bytes to serve reads; the server's tail cache keeps the same
    recent batches. They are the same objects, so one flush of 4 MiB holds 4 MiB, not 8."""
    fs = HdfsLikeDisk()
    directory = str(tmp_path / "p")
    plog = PartitionLog.open(fs, directory, DirectoryEpochSource(fs, directory))
    tail = TailCache(64 << 20).partition("t", 0)
    batches = [bytearray(encode_batch([RecordData(os.urandom(1000))])) for _ in range(4096)]
    offsets = [plog.append(batch, verify=False) for batch in batches]  # the log takes a bytearray over: no copy
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        plog.flush()
        for (base, end), batch in zip(offsets, batches, strict=True):
            tail.add(base, end, batch)  # as the partition does once the flush is durable
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < sum(map(len, batches)) / 8  # bookkeeping only: no second copy of the bytes
    assert [offset for offset, _ in read_all(plog)] == list(range(4096))  # served from that memory
    assert plog.read(4095) == bytes(batches[-1])
    plog.close()


def test_the_maintenance_seals_an_idle_partitions_segment_by_age(tmp_path: Path) -> None:
    async def scenario() -> list[SegmentName]:
        broker = await Broker.start(ServerConfig(storage=str(tmp_path / "data"), segment_ms=200))
        try:
            await broker.create_topic(TopicConfig(name="t", partitions=1))
            partition = await broker.partition("t", 0)
            await partition.produce(bytearray(encode_batch([RecordData(b"a")])))
            await broker.maintain()  # too young: nothing happens
            directory = tmp_path / "data" / "topics" / "t" / "0"
            assert all(not name.sealed for name in names(directory))
            await asyncio.sleep(0.3)
            await broker.maintain()
            deadline = time.monotonic() + 10
            while not any(name.sealed for name in names(directory)) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)  # sealed in the background
            return names(directory)
        finally:
            await broker.close()

    def names(directory: Path) -> list[SegmentName]:
        parsed = (SegmentName.parse(entry) for entry in sorted(os.listdir(directory)))
        return [name for name in parsed if name is not None]

    found = asyncio.run(scenario())
    assert [(name.base, name.end, name.sealed) for name in found[:2]] == [(0, 1, True), (1, None, False)]
