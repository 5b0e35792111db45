"""Transaction markers (control batches, ``talos._control``) in the batch format, and every reader stepping over
them: a marker's offset counts, it is never a message. Kafka clients parse the converted marker as Kafka's own."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from aiokafka.record.control_record import ABORT_MARKER, COMMIT_MARKER, ControlRecord
from aiokafka.record.default_records import DefaultRecordBatch

from server.http.messages import _messages_json
from server.kafka.records import talos_to_kafka
from server.security.trim import trim_to_allowance
from server.subscriptions.ledger import GONE, Ledger
from server.trace.keeper import _add_chunk
from talos import CorruptBatchError, RecordData, decode_records, encode_batch, read_header, validate_batch
from talos._codec import CONTROL, TRANSACTIONAL
from talos._control import ControlType, Marker, marker_batch, parse_marker
from talos._fetcher import Positions, _decode, _fetch_request, position_of
from talos._routing import RouteTable
from talos._transport import Response

PID, EPOCH = 7, 3


def data_batch(base: int, values: list[bytes], *, transactional: bool = False) -> bytes:
    records = [RecordData(v, b"k") for v in values]
    if not transactional:
        return encode_batch(records, base_offset=base)
    fields = {"producer_id": PID, "producer_epoch": EPOCH, "base_sequence": base}
    return encode_batch(records, base_offset=base, attributes=TRANSACTIONAL, **fields)


def marker(base: int, kind: ControlType = ControlType.COMMIT) -> bytes:
    return marker_batch(
        Marker(PID, EPOCH, kind, coordinator_epoch=11), timestamp_ms=1_700_000_000_000, base_offset=base
    )


@pytest.mark.parametrize("kind", list(ControlType))
def test_a_marker_batch_holds_its_transactions_end_in_kafkas_bytes(kind: ControlType) -> None:
    batch = marker(5, kind)
    header = read_header(batch)
    assert header.control and header.transactional and header.codec == 0
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (PID, EPOCH, -1)
    assert (header.base_offset, header.record_count) == (5, 1)
    assert parse_marker(header, decode_records(batch)) == Marker(PID, EPOCH, kind, 11)
    # What a Kafka client reads once the listener converts it: its own control batch and marker.
    (kafka,) = [DefaultRecordBatch(talos_to_kafka(batch)[:])]
    assert kafka.is_control_batch and kafka.is_transactional and kafka.producer_id == PID
    (record,) = list(kafka)
    expected = COMMIT_MARKER if kind is ControlType.COMMIT else ABORT_MARKER
    assert ControlRecord.parse(record.key) == expected


def test_producers_write_transactional_batches_but_no_markers() -> None:
    with pytest.raises(CorruptBatchError):
        validate_batch(marker(0))
    assert validate_batch(data_batch(0, [b"a"], transactional=True)).transactional
    with pytest.raises(CorruptBatchError, match="producer id"):  # a transaction's batch is an idempotent one
        validate_batch(encode_batch([RecordData(b"a")], attributes=TRANSACTIONAL))
    with pytest.raises(ValueError, match="not a flag"):
        encode_batch([RecordData(b"v")], attributes=0x40)  # not a flag of the format


def test_a_batch_that_is_not_one_marker_is_refused_as_one() -> None:
    plain = data_batch(0, [b"a"])
    with pytest.raises(CorruptBatchError):
        parse_marker(read_header(plain), decode_records(plain))
    other = encode_batch([RecordData(b"\x00\x00\x00\x00\x00\x00", b"\x00\x00\x00\x05")], attributes=CONTROL)
    with pytest.raises(CorruptBatchError, match="control type 5"):
        parse_marker(read_header(other), decode_records(other))


# A transaction's records at 0-1, its marker at 2, a plain record at 3, another marker at 4 (the end).
FETCHED = data_batch(0, [b"a", b"b"], transactional=True) + marker(2) + data_batch(3, [b"c"]) + marker(4)


def test_the_sdk_hands_out_no_marker_and_moves_past_a_trailing_one() -> None:
    messages, after = _decode("t", 0, FETCHED, 0)
    assert [(m.offset, m.value) for m in messages] == [(0, b"a"), (1, b"b"), (3, b"c")]
    assert after == 5
    assert _decode("t", 0, marker(4), 4) == ([], 5)


def test_the_json_fetch_shows_no_marker_and_its_next_offset_passes_a_trailing_one() -> None:
    page = _messages_json([FETCHED], 0, 100, 1 << 20, 1 << 20)
    assert [m["offset"] for m in page["messages"]] == [0, 1, 3]  # type: ignore[attr-defined, index]
    assert page["next_offset"] == 5
    assert _messages_json([marker(4)], 4, 100, 1 << 20, 1 << 20)["next_offset"] == 5


def test_a_subscription_settles_a_marker_as_gone_and_reads_on_past_it() -> None:
    ledger = Ledger(0)
    for offset in (0, 1, 3):
        assert ledger.admit(offset, b"k")
    ledger.skip_to(5)  # the trailing marker at 4
    assert ledger.end == 5 and ledger.settled[4] == GONE and 3 in ledger.entries


def test_the_trace_index_skips_markers() -> None:
    class Index:
        def add(self, records: list[tuple[int, bytes | None]], after: int) -> None:
            self.records, self.after = records, after

    index = Index()
    assert _add_chunk(index, FETCHED, 0) == 5  # type: ignore[arg-type]
    assert [offset for offset, _ in index.records] == [0, 1, 3]


def test_a_fetch_quota_cuts_a_transactional_batch_keeping_its_producer_and_flags() -> None:
    batch = data_batch(10, [b"x" * 100, b"y" * 100, b"z" * 100], transactional=True)
    (cut,) = trim_to_allowance([batch], 11, 150, 1 << 20)  # from offset 11, room for one record
    header = read_header(cut)
    assert header.transactional and not header.control
    assert (header.base_offset, header.record_count) == (11, 1)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (PID, EPOCH, 11)
    assert [r.value for r in decode_records(cut)] == [b"y" * 100]


def test_a_read_committed_sdk_consumer_moves_past_what_the_server_left_out_and_starts_at_the_lso() -> None:
    positions = Positions("latest", committed=True)
    assert positions.initial({"earliest": 0, "latest": 9, "last_stable": 4}) == 4
    assert Positions("latest").initial({"earliest": 0, "latest": 9, "last_stable": 4}) == 9
    positions.next[("t", 0)] = 0
    # The server gave the plain record at 3 and left out an aborted transaction's batches up to 8
    answer = Response(200, {"x-talos-next-offset": "8"}, data_batch(3, [b"c"]))
    assert [m.offset for m in positions.take("t", 0, 0, answer)] == [3]
    assert positions.next[("t", 0)] == 8
    request = _fetch_request(RouteTable("http://h"), "t", 0, 8, 1024, 0, 1.0, committed=True)
    assert request["params"]["isolation"] == "read_committed"
    assert "isolation" not in _fetch_request(RouteTable("http://h"), "t", 0, 8, 1024, 0, 1.0)["params"]


def test_a_position_asked_while_a_fetch_moved_on_is_not_moved_back() -> None:
    """``position()`` asks the partition's offsets when it has no position yet; if a fetch set one and read on
    while it asked, the answer must not move the consumer back to the start (it would hand messages out twice)."""
    positions = Positions("earliest")
    client = SimpleNamespace(_state=SimpleNamespace(positions=positions), _routes=RouteTable("http://h"), _timeout=1.0)
    asking = position_of(client, "t", 0)  # type: ignore[arg-type]
    next(asking)  # the offsets request is out
    positions.next[("t", 0)] = 50  # meanwhile the first fetch set the position and read on
    with pytest.raises(StopIteration) as done:
        asking.send(Response(200, {}, b'{"earliest": 0, "latest": 60}'))
    assert done.value.value == 50 and positions.next[("t", 0)] == 50
