"""Compaction against the real log, on the local disk and on HDFS: random produce/tombstone sequences with
passes at random moments, and after each pass the reader's view checked against a model of Kafka's
guarantees (docs/compaction.md)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fencing import DirectoryEpochSource, LogConfig, PartitionLog, open_storage
from fencing.compaction import CompactionSettings, Throttle, compact
from fencing.key_index import KeyIndex
from server.devservices import HdfsCluster
from talos import RecordData, decode_batches, encode_batch
from tests.conftest import Storage

KEYS = [b"a", b"b", b"c", b"d", b"e", b"f"]
DAY = 86_400_000


@dataclass(frozen=True)
class Written:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


def open_log(storage: Storage, name: str) -> PartitionLog:
    directory = storage.path(name)
    return PartitionLog.open(
        storage.fs, directory, DirectoryEpochSource(storage.fs, directory), config=LogConfig(segment_bytes=400)
    )


def read_from(plog: PartitionLog, offset: int) -> list[Written]:
    out: list[Written] = []
    while offset < plog.durable_offset:
        data = plog.read(offset, 64 * 1024)
        assert data, f"no data at {offset} below the durable offset {plog.durable_offset}"
        for decoded in decode_batches(data):
            assert decoded.error is None
            out.extend(Written(r.offset, r.key, r.value, r.timestamp) for r in decoded.records if r.offset >= offset)
            offset = decoded.header.next_offset
    return out


def check_view(
    view: list[Written], model: list[Written], *, now_ms: int, lag_ms: int, cleaned_to: int, retention_ms: int
) -> None:
    by_offset = {w.offset: w for w in model}
    offsets = [w.offset for w in view]
    assert offsets == sorted(set(offsets)), "order kept, no offset twice"
    for record in view:  # offsets never change: each record is the one written there
        assert by_offset[record.offset] == record
    seen = set(offsets)
    last: dict[bytes, Written] = {}
    for written in model:
        if written.key is not None:
            last[written.key] = written
        if written.offset >= cleaned_to or now_ms - written.timestamp < lag_ms or written.key is None:
            assert written.offset in seen, f"{written} is above the cleaned point or too young, yet gone"
    for key, latest in last.items():
        if latest.value is not None or now_ms - latest.timestamp <= retention_ms:
            assert latest.offset in seen, f"the last record of {key!r} ({latest}) is gone"
        elif latest.offset not in seen:  # a tombstone may go once old enough: no older value of its key with it
            assert all(w.key != key for w in view), f"{key!r} came back after its tombstone went"


produce = st.tuples(
    st.just("produce"), st.lists(st.tuples(st.sampled_from([*KEYS, None]), st.booleans()), min_size=1, max_size=4)
)
operations = st.lists(
    st.one_of(
        produce,
        produce,
        produce,
        st.tuples(st.just("compact"), st.integers(0, 3)),
        st.tuples(st.just("advance"), st.sampled_from([1000, DAY // 2, 2 * DAY])),
    ),
    min_size=10,
    max_size=60,
)


def run_model(storage: Storage, name: str, ops: list[tuple[str, object]], *, reopen: bool) -> None:
    plog = open_log(storage, name)
    model: list[Written] = []
    now = 1_700_000_000_000
    lag = 5000
    cleaned_to = 0
    try:
        for op, arg in ops:
            if op == "produce":
                records = [
                    RecordData(None if (tomb and key is not None) else b"v%d" % len(model), key, timestamp=now)
                    for key, tomb in arg  # type: ignore[attr-defined]
                ]
                base, _ = plog.append(encode_batch(records))
                plog.flush()
                model.extend(Written(base + i, r.key, r.value, now) for i, r in enumerate(records))
            elif op == "advance":
                now += int(arg)  # type: ignore[call-overload]
            else:
                plog.wait_for_seal()
                # Small indexes take several passes; 3 is one that holds every key.
                big = arg == 3
                index = KeyIndex(1 << 16 if big else 24 * (2 + 3 * int(arg)))  # type: ignore[call-overload]
                policy = CompactionSettings(min_lag_ms=lag, delete_retention_ms=DAY, segment_bytes=900)
                report = compact(plog, policy, index, now_ms=now, force=True, throttle=Throttle(None))
                if report is not None:
                    cleaned_to = max(cleaned_to, report.cleaned_to)
                    event("a pass removed records" if report.records_removed else "a pass removed nothing")
                    if report.tombstones_removed:
                        event("a pass removed a tombstone")
                if reopen:  # a takeover reads the same view from the directory
                    plog.close()
                    plog = open_log(storage, name)
                view = read_from(plog, plog.start_offset)
                check_view(view, model, now_ms=now, lag_ms=lag, cleaned_to=cleaned_to, retention_ms=DAY)
                if big and report is not None:  # every key's older records below the cleaned point are gone
                    below = [w.key for w in view if w.offset < report.cleaned_to and w.key is not None]
                    assert len(below) == len(set(below)), below
        view = read_from(plog, plog.start_offset)
        check_view(view, model, now_ms=now, lag_ms=lag, cleaned_to=cleaned_to, retention_ms=DAY)
        assert [w.offset for w in read_from(plog, plog.start_offset)][-1:] == [w.offset for w in model][-1:]
    finally:
        plog.close()


_names = iter(range(10**9))


@pytest.fixture(scope="module")
def local_storage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Storage]:
    url = f"file://{tmp_path_factory.mktemp('compaction')}/store"
    fs, root = open_storage(url)
    fs.mkdirs(root)
    yield Storage("local", fs, root, url)
    fs.close()


@pytest.fixture(scope="module")
def hdfs_storage(hdfs: HdfsCluster) -> Iterator[Storage]:
    url = f"{hdfs.url}/tests/compaction-{os.getpid()}"
    fs, root = open_storage(url)
    fs.mkdirs(root)
    yield Storage("hdfs", fs, root, url)
    fs.close()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations, reopen=st.booleans())
def test_compaction_keeps_kafkas_guarantees_on_local_disk(local_storage: Storage, ops: list, reopen: bool) -> None:
    run_model(local_storage, f"p{next(_names)}", ops, reopen=reopen)


@pytest.mark.hdfs
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations)
def test_compaction_keeps_kafkas_guarantees_on_hdfs(hdfs_storage: Storage, ops: list) -> None:
    run_model(hdfs_storage, f"p{next(_names)}", ops, reopen=True)
