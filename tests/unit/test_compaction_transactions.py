"""Compaction of a log with transactions (``fencing.compaction``), on a real local log: a committed
transaction's records count from its commit marker, an aborted one's batches are removed whole, markers are
always kept, and a pass never goes past a transaction it has not seen decided."""

from __future__ import annotations

from pathlib import Path

from fencing import DirectoryEpochSource, LogConfig, PartitionLog
from fencing.compaction import CompactionSettings, Throttle, compact
from fencing.key_index import KeyIndex
from fencing.local import LocalFileSystem
from talos import RecordData, decode_batches, encode_batch
from talos._codec import TRANSACTIONAL
from talos._control import ControlType, Marker, marker_batch

NOW = 1_700_000_000_000
DAY = 86_400_000


def open_log(tmp_path: Path) -> PartitionLog:
    fs = LocalFileSystem()
    directory = str(tmp_path / "t-0")
    return PartitionLog.open(fs, directory, DirectoryEpochSource(fs, directory), config=LogConfig(segment_bytes=100))


def put(plog: PartitionLog, key: bytes, value: bytes, *, pid: int | None = None, sequence: int = 0) -> int:
    record = [RecordData(value, key, timestamp=NOW)]
    if pid is None:
        batch = encode_batch(record)
    else:
        fields = {"producer_id": pid, "producer_epoch": 0, "base_sequence": sequence}
        batch = encode_batch(record, attributes=TRANSACTIONAL, **fields)
    base, _ = plog.append(batch)
    plog.flush()
    return base


def end(plog: PartitionLog, pid: int, *, commit: bool) -> int:
    kind = ControlType.COMMIT if commit else ControlType.ABORT
    base, _ = plog.append(marker_batch(Marker(pid, 0, kind, 0), timestamp_ms=NOW))
    plog.flush()
    return base


def view(plog: PartitionLog) -> dict[int, tuple[bytes | None, bytes | None, bool]]:
    """offset → (key, value, control) of what a reader finds."""
    out = {}
    offset = plog.start_offset
    while offset < plog.durable_offset:
        data = plog.read(offset, 1 << 20)
        for decoded in decode_batches(data):
            for record in decoded.records:
                out[record.offset] = (record.key, record.value, decoded.header.control)
            offset = decoded.header.next_offset
    return out


def run_pass(plog: PartitionLog) -> None:
    plog.wait_for_seal()
    policy = CompactionSettings(min_lag_ms=0, delete_retention_ms=DAY, segment_bytes=10_000)
    compact(plog, policy, KeyIndex(1 << 16), now_ms=NOW + 1000, force=True, throttle=Throttle(None))


def test_committed_count_aborted_go_markers_stay_and_undecided_stop_the_pass(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    try:
        put(plog, b"a", b"v1")  # 0
        put(plog, b"a", b"v2", pid=1)  # 1
        end(plog, 1, commit=True)  # 2
        put(plog, b"a", b"v3", pid=2)  # 3: aborted, though later than v2
        put(plog, b"b", b"x", pid=2, sequence=1)  # 4
        end(plog, 2, commit=False)  # 5
        put(plog, b"b", b"y")  # 6
        put(plog, b"a", b"v4", pid=3)  # 7: undecided at the pass
        put(plog, b"c", b"z")  # 8
        put(plog, b"c", b"z2")  # 9: would supersede 8, but it is past the undecided transaction
        run_pass(plog)
        seen = view(plog)
        assert 0 not in seen  # superseded by the committed v2
        assert seen[1] == (b"a", b"v2", False)
        assert 3 not in seen and 4 not in seen  # the aborted transaction's batches, whole
        assert seen[2][2] and seen[5][2]  # both markers kept
        assert seen[6] == (b"b", b"y", False)
        assert 7 in seen and 8 in seen and 9 in seen  # not compacted: past an undecided transaction
        end(plog, 3, commit=True)  # 10
        put(plog, b"d", b"w")  # 11: so the marker's segment seals
        run_pass(plog)
        seen = view(plog)
        assert 1 not in seen and seen[7] == (b"a", b"v4", False)  # now v4 is the last committed value of a
        assert 8 not in seen and seen[9] == (b"c", b"z2", False)
        assert seen[10][2] and seen[2][2] and seen[5][2]
    finally:
        plog.close()
