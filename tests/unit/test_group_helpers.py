"""Retry records, holding back retried messages until due, and folding ``__consumer_offsets``: pure logic."""

from __future__ import annotations

import time

import orjson

from server.groups.offsets import commit_record, fold, group_record, snapshot_record
from server.groups.state import GroupState
from talos import Message
from talos._consumer_state import ConsumerState as _State
from talos._group import Membership, hold_back, retry_record


def message(offset: int = 7, headers: tuple[tuple[str, bytes | None], ...] = (), topic: str = "orders") -> Message:
    return Message(topic, 2, offset, 1000, b"k", b"v", headers)


def test_retry_records_count_attempts_keep_the_origin_and_end_in_dead_letters() -> None:
    first = message(headers=(("trace", b"x"),))
    topic, record = retry_record(first, group="g", delay_s=1.5, reason="boom", max_retries=2, now_ms=10_000)
    headers = dict(record.headers)
    assert topic == "__retry.g"
    assert (record.key, record.value) == (b"k", b"v")
    assert headers["trace"] == b"x"
    assert headers["talos-attempt"] == b"1" and headers["talos-not-before"] == b"11500"
    assert (headers["talos-origin-topic"], headers["talos-origin-partition"], headers["talos-origin-offset"]) == (
        b"orders",
        b"2",
        b"7",
    )
    redelivered = Message("__retry.g", 0, 0, 1000, b"k", b"v", record.headers)
    assert redelivered.attempt == 1
    topic, second = retry_record(redelivered, group="g", delay_s=1, reason="again", max_retries=2, now_ms=20_000)
    again = Message("__retry.g", 0, 1, 1000, b"k", b"v", second.headers)
    assert topic == "__retry.g" and again.attempt == 2
    assert again.header("talos-origin-offset") == b"7"  # still the original message's coordinates
    topic, dead = retry_record(again, group="g", delay_s=1, reason="last", max_retries=2, now_ms=30_000)
    assert topic == "__dlq.g"
    assert dict(dead.headers)["talos-reason"] == b"last" and dict(dead.headers)["talos-attempt"] == b"3"
    assert "talos-not-before" not in dict(dead.headers)
    assert [k for k, _ in dead.headers].count("talos-attempt") == 1


def test_hold_back_stops_at_the_first_message_not_due() -> None:
    due = message(1, (("talos-not-before", b"900"),))
    later = message(2, (("talos-not-before", b"1500"),))
    after = message(3, (("talos-not-before", b"800"),))
    ready, resume, wait_s = hold_back([due, later, after], 1000)
    assert ready == [due] and resume == 2 and wait_s == 0.5
    assert hold_back([due], 1000) == ([due], None, 0.0)


def test_fold_keeps_the_last_word_per_group() -> None:
    state = GroupState("g", generation=4, mode="exclusive", offsets={("", "t", 0): 5})
    records = [
        commit_record("g", {("", "t", 0): 1, ("", "t", 1): 9}),
        commit_record("other", {("", "t", 0): 100}),
        snapshot_record(state),  # replaces what came before
        commit_record("g", {("", "t", 1): 3}),
        group_record(GroupState("g", generation=6, mode="exclusive")),
    ]
    pairs: list[tuple[bytes | None, bytes | None]] = [(r.key, r.value) for r in records]
    pairs.append((b"g", b"not json"))  # skipped, not fatal
    recovered = fold("g", pairs)
    assert recovered.offsets == {("", "t", 0): 5, ("", "t", 1): 3}
    assert recovered.generation == 6 and recovered.members == 0
    assert orjson.loads(records[0].value or b"{}")["type"] == "commit"


def _member_state(membership: Membership) -> _State:
    return _State(
        start="earliest",
        partitions=[],
        membership=membership,
        auto_commit=False,
        auto_commit_interval_s=5,
        on_assign=None,
        on_revoke=None,
        on_lost=None,
        max_retries=3,
    )


def test_the_iterator_does_not_hand_out_a_message_of_a_partition_no_longer_held() -> None:
    membership = Membership("g", ["orders"], session_s=10, broadcast=False, instance=None)
    answer = {"member_id": "m", "assignment": [{"topic": "orders", "partition": 2, "generation": 1}]}
    membership.apply(answer, sent_at=time.monotonic())
    membership.take_changes()  # the consumer took the grant
    state = _member_state(membership)
    state.positions.next[("orders", 2)] = 10
    assert state.deliver(message(7))
    assert state.consumed[("orders", 2)] == 8
    membership.apply({"member_id": "m", "assignment": []}, sent_at=time.monotonic())  # taken away
    assert not state.deliver(message(8))
    assert not state.deliver(message(9))
    assert state.positions.next[("orders", 2)] == 8  # read again from the first one not handed out
    assert state.consumed[("orders", 2)] == 8  # and not counted as consumed


def test_messages_dropped_while_the_lock_lapses_are_read_again_if_it_is_renewed() -> None:
    membership = Membership("g", ["orders"], session_s=10, broadcast=False, instance=None)
    grant = {"member_id": "m", "assignment": [{"topic": "orders", "partition": 2, "generation": 1}]}
    sent = time.monotonic()
    membership.apply(grant, sent_at=sent)
    membership.take_changes()
    state = _member_state(membership)
    tp = ("orders", 2)
    state.positions.next[tp] = 12
    state.received(tp, [message(10), message(11)])
    membership.valid_until = sent - 1  # the heartbeat's answer is late: the lock looks expired for now
    assert state.hand_out(10) == []
    assert state.positions.next[tp] == 10  # not skipped: read again from the first one not handed out
    state.positions.next[tp] = 14
    state.received(tp, [message(12), message(13)])  # a fetch that ends while the lock looks expired
    assert state.positions.next[tp] == 12
    membership.apply(grant, sent_at=time.monotonic())  # the lock is renewed: nothing was lost or skipped
    assert tp in state.assignment(time.monotonic())
