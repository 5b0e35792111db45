"""The push subscription's ledger of one partition (pure): leases, acknowledgements with receipts, nacks,
timeouts, dead letters, key order, and what a snapshot brings back, settled by receipt before the coordinator
has read the topic again (issue 35)."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from server.config import ServerConfig
from server.messaging.fetch import Fetched
from server.subscriptions.coordinator import Subscription
from server.subscriptions.ledger import DEAD, OK, STALE, UNKNOWN, Ledger
from server.subscriptions.records import Settings, Snapshot, decode, fence_record, snapshot_record
from talos import RecordData, encode_batch

TIMEOUT = 1_000


def take(ledger: Ledger, now: int, holder: str = "a", limit: int = 100, *, key_ordered: bool = False, max_d: int = 3):
    return ledger.take(now, holder, limit, ack_timeout_ms=TIMEOUT, max_deliveries=max_d, key_ordered=key_ordered)


def filled(count: int, keys: list[bytes | None] | None = None, floor: int = 0) -> Ledger:
    ledger = Ledger(floor)
    for offset in range(floor, floor + count):
        ledger.admit(offset, keys[offset - floor] if keys else None)
    return ledger


def test_messages_are_leased_in_order_and_acknowledged_once() -> None:
    ledger = filled(5)
    taken = take(ledger, 0, limit=3)
    assert taken.leased == [(0, 1), (1, 1), (2, 1)]
    assert take(ledger, 0, "b").leased == [(3, 1), (4, 1)]  # another subscriber gets the rest
    assert take(ledger, 0).leased == []
    assert ledger.ack(1, 1) == OK
    assert ledger.ack(1, 1) == OK  # the same acknowledgement again (a resend) is confirmed again
    assert ledger.floor == 0
    assert ledger.ack(0, 1) == OK
    assert ledger.floor == 2
    assert ledger.ack(0, 1) == OK  # below the floor: still known by its receipt
    assert ledger.ack(7, 1) == UNKNOWN


def test_a_lease_that_ran_out_goes_to_another_and_the_late_ack_is_stale() -> None:
    ledger = filled(1)
    assert take(ledger, 0, "a").leased == [(0, 1)]
    assert take(ledger, TIMEOUT - 1, "b").leased == []
    assert take(ledger, TIMEOUT, "b").leased == [(0, 2)]
    assert ledger.ack(0, 1) == STALE  # the paused subscriber's acknowledgement
    assert ledger.ack(0, 2) == OK
    assert ledger.ack(0, 1) == STALE  # still, after it is settled
    assert ledger.floor == 1


def test_nack_delays_and_extend_keeps_and_release_frees() -> None:
    ledger = filled(3)
    take(ledger, 0, "a")
    assert ledger.nack(0, 1, 0, 500) == OK
    assert ledger.nack(0, 1, 0, 500) == OK  # a resent nack changes nothing
    assert take(ledger, 499, "b").leased == []
    assert take(ledger, 500, "b").leased == [(0, 2)]
    assert ledger.nack(0, 1, 500, 0) == STALE  # that delivery is over
    assert ledger.extend(1, 1, 900, 5_000) == OK
    assert take(ledger, 1_000, "c").leased == [(2, 2)]  # 2's lease ran out; 1's was extended
    assert ledger.release("a", 1_100) == 1  # a leaves: 1 is free at once
    assert take(ledger, 1_100, "c").leased == [(1, 2)]
    assert ledger.next_change_ms(1_100) == 1_500
    assert ledger.next_change_ms(1_500) == 2_000  # c's lease of 2  # b's lease of 0


def test_after_max_deliveries_a_message_is_dead_and_settles_as_dead() -> None:
    ledger = filled(2)
    for attempt in range(3):
        assert take(ledger, attempt * TIMEOUT, limit=1).leased == [(0, attempt + 1)]
    taken = take(ledger, 3 * TIMEOUT, limit=1)
    assert taken.dead == [0]
    assert taken.leased == [(1, 1)]
    assert ledger.ack(0, 3) == STALE  # dead: its last delivery's acknowledgement comes too late
    ledger.settle(0, DEAD)
    assert ledger.floor == 1


def test_key_order_holds_a_keys_next_message_until_the_earlier_is_settled() -> None:
    ledger = filled(4, [b"k", b"j", b"k", None])
    assert take(ledger, 0, key_ordered=True).leased == [(0, 1), (1, 1), (3, 1)]
    assert ledger.nack(0, 1, 0, 100) == OK
    assert take(ledger, 50, key_ordered=True).leased == []  # 0 waits for its delay, and 2 behind it
    assert take(ledger, 100, key_ordered=True).leased == [(0, 2)]
    assert ledger.ack(0, 2) == OK
    assert take(ledger, 100, key_ordered=True).leased == [(2, 1)]


def test_retention_removing_unsettled_offsets_moves_the_floor() -> None:
    ledger = filled(3)
    take(ledger, 0, limit=1)
    assert ledger.lose_below(2) == [0, 1]
    assert ledger.floor == 2 and ledger.window == 1
    ledger.admit(5, None)  # 3 and 4 are not in the log any more
    assert ledger.floor == 2 and ledger.ack(2, 0) == UNKNOWN  # 2 was never delivered
    assert take(ledger, 0).leased == [(2, 1), (5, 1)]


def test_a_snapshot_brings_back_leases_settlements_and_receipts() -> None:
    ledger = filled(4)
    take(ledger, 0, limit=3)
    ledger.ack(0, 1)
    ledger.ack(2, 1)
    doc = Snapshot(Settings(topic="t", max_deliveries=3), "acme", 42, {0: ledger}, 7)
    recovered = decode(snapshot_record(doc, {0: [0, 2]}).value)
    assert recovered is not None and recovered.tenant == "acme" and recovered.producer_id == 42
    assert recovered.dead_letter_end == 7 and recovered.settings.max_deliveries == 3
    back = recovered.ledgers[0]
    assert back.floor == 1
    assert back.ack(0, 1) == OK  # settled just before the snapshot: a resend is still confirmed
    for offset in range(1, 4):
        back.admit(offset, None)
    assert back.ack(2, 1) == OK
    assert back.ack(1, 1) == OK  # still leased by its delivery, which the recovered ledger honours
    assert take(back, TIMEOUT - 1).leased == [(3, 1)]  # the fresh one; nothing else is due
    assert decode(fence_record(42, 3).value) is None


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from([b"a", b"b", None]), min_size=1, max_size=25),
    st.lists(st.tuples(st.sampled_from(["take", "ack", "nack", "tick", "release"]), st.integers(0, 3)), max_size=80),
)
def test_every_message_ends_acknowledged_once_or_dead_and_keys_stay_in_order(
    keys: list[bytes | None], script: list[tuple[str, int]]
) -> None:
    ledger = filled(len(keys), keys)
    now = 0
    holders = ["a", "b", "c", "d"]
    held: dict[str, list[tuple[int, int]]] = {h: [] for h in holders}
    confirmed: dict[int, int] = {}
    dead: set[int] = set()
    handed: list[int] = []  # offsets in the order their last leases began, per key checked below

    def settle_dead(offsets: list[int]) -> None:
        for offset in offsets:
            dead.add(offset)
            ledger.settle(offset, DEAD)

    def lease(holder: str) -> None:
        taken = take(ledger, now, holder, limit=2, key_ordered=True)
        held[holder].extend(taken.leased)
        handed.extend(offset for offset, _ in taken.leased)
        for offset, _ in taken.leased:  # key order: no earlier offset with the key is unsettled
            key = keys[offset]
            if key is not None:
                earlier = [o for o in range(offset) if keys[o] == key]
                assert all(o in confirmed or o in dead for o in earlier), (offset, earlier)
        settle_dead(taken.dead)

    for action, who in script:
        holder = holders[who]
        if action == "take":
            lease(holder)
        elif action == "ack" and held[holder]:
            offset, receipt = held[holder].pop(0)
            if ledger.ack(offset, receipt) == OK:
                assert confirmed.setdefault(offset, receipt) == receipt
        elif action == "nack" and held[holder]:
            offset, receipt = held[holder].pop()
            ledger.nack(offset, receipt, now, 10)
        elif action == "tick":
            now += TIMEOUT // 2
        elif action == "release":
            ledger.release(holder, now)
            held[holder] = []
    # Then everyone acknowledges whatever it gets until nothing is left.
    for _round in range(100):
        now += TIMEOUT
        for holder in holders:
            lease(holder)
            for offset, receipt in held[holder]:
                if ledger.ack(offset, receipt) == OK:
                    assert confirmed.setdefault(offset, receipt) == receipt
            held[holder] = []
        if ledger.floor == len(keys):
            break
    assert ledger.floor == len(keys)
    assert set(confirmed) | dead == set(range(len(keys)))
    assert not set(confirmed) & dead


def recovered(ledger: Ledger, settled_since: list[int] | None = None) -> Ledger:
    """The ledger as a new coordinator loads it from the snapshot: nothing of the topic read yet."""
    doc = Snapshot(Settings(topic="t"), None, 1, {0: ledger})
    snapshot = decode(snapshot_record(doc, {0: settled_since or []}).value)
    assert snapshot is not None
    back = snapshot.ledgers[0]
    assert back.end == back.floor
    return back


def test_a_recovered_lease_is_acknowledged_by_its_receipt_before_the_topic_is_read_again() -> None:
    ledger = filled(5)
    take(ledger, 0, limit=5)
    assert ledger.ack(0, 1) == OK
    back = recovered(ledger, [0])
    assert back.floor == 1 and back.end == 1
    # The reported bug: "unknown" here, and the message went out again when the lease ran out.
    assert back.ack(2, 1) == OK
    assert back.ack(2, 1) == OK  # a resend (the first answer lost): the same delivery settled it
    assert back.ack(3, 2) == STALE  # a delivery that never was
    assert back.ack(3, 0) == STALE
    assert back.ack(0, 1) == OK  # settled before the crash, its receipt kept by the snapshot
    assert back.ack(9, 1) == UNKNOWN  # never delivered (and not read yet)
    assert take(back, 10 * TIMEOUT).leased == []  # nothing is delivered before it is read
    for offset in range(1, 5):
        assert back.admit(offset, None) == (offset != 2)  # 2 is settled: skipped when read
    assert back.floor == 1
    assert take(back, TIMEOUT).leased == [(1, 2), (3, 2), (4, 2)]  # the leases ran out; 2 never comes again
    assert back.ack(1, 2) == OK
    assert back.floor == 3 and back.ack(2, 1) == OK  # below the floor now: still known by its receipt


def test_a_recovered_lease_is_given_back_or_extended_before_the_topic_is_read_again() -> None:
    ledger = filled(4)
    take(ledger, 0, limit=4)
    back = recovered(ledger)
    assert back.nack(1, 1, 100, 500) == OK
    assert back.extend(2, 1, 100, 5_000) == OK
    assert back.extend(1, 1, 100, 5_000) == STALE  # given back: that delivery is over
    assert back.nack(1, 2, 100, 0) == STALE
    assert back.nack(7, 1, 100, 0) == UNKNOWN and back.extend(7, 1, 100, 0) == UNKNOWN
    assert take(back, 600).leased == []  # 1 is ready, but not read yet
    for offset in range(4):
        back.admit(offset, None)
    assert take(back, 599).leased == []  # 1's delay, 0 and 3's leases, 2's extension
    assert take(back, 600).leased == [(1, 2)]
    assert take(back, TIMEOUT).leased == [(0, 2), (3, 2)]
    assert [back.ack(0, 2), back.ack(1, 2), back.ack(3, 2)] == [OK, OK, OK]
    assert take(back, 5_099).leased == []
    assert take(back, 5_100).leased == [(2, 2)]


def test_a_recovered_key_ordered_lease_holds_its_key_until_settled() -> None:
    keys: list[bytes | None] = [b"k", b"j", b"k"]
    ledger = filled(3, keys)
    assert take(ledger, 0, limit=1, key_ordered=True).leased == [(0, 1)]
    back = recovered(ledger)
    assert back.nack(0, 1, 0, 200) == OK
    for offset, key in enumerate(keys):
        back.admit(offset, key)
    assert take(back, 0, key_ordered=True).leased == [(1, 1)]  # 2 waits behind 0, whose delay runs
    assert take(back, 200, key_ordered=True).leased == [(0, 2)]
    assert back.ack(0, 2) == OK
    assert take(back, 200, key_ordered=True).leased == [(2, 1)]


def test_a_recovered_dead_message_is_not_acknowledged_and_is_dead_lettered_once_read() -> None:
    ledger = filled(2)
    for attempt in range(3):
        take(ledger, attempt * TIMEOUT, limit=1)
    assert take(ledger, 3 * TIMEOUT, limit=1).dead == [0]  # the snapshot is written before its dead letter
    back = recovered(ledger)
    assert back.ack(0, 3) == STALE and back.nack(0, 3, 0, 0) == STALE
    broker = SimpleNamespace(config=ServerConfig(), trace=None)
    subscription = Subscription(broker, "s", Snapshot(Settings(topic="t"), None, 1, {0: back}), (1, 0), 1)  # type: ignore[arg-type]
    batch = encode_batch([RecordData(b"poison"), RecordData(b"fine")])
    subscription._admit(0, Fetched(bytes(batch), high_watermark=2, start_offset=0))
    # The crash came before the letter was written: once its record is read again, it is written.
    assert subscription._dead == [(0, 0)]
    assert take(back, 4 * TIMEOUT).leased == [(1, 2)]  # 1's lease ran out; 0 waits for its letter


def test_never_delivered_messages_are_unknown_to_every_settlement() -> None:
    ledger = filled(2)
    for receipt in (0, 1):
        assert ledger.ack(0, receipt) == UNKNOWN
        assert ledger.nack(0, receipt, 0, 0) == UNKNOWN
        assert ledger.extend(0, receipt, 0, 0) == UNKNOWN
    assert take(ledger, 0).leased == [(0, 1), (1, 1)]  # the nack of delivery 0 did not delay it


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from([b"a", b"b", None]), min_size=1, max_size=12),
    st.lists(st.tuples(st.sampled_from(["take", "ack", "nack", "tick"]), st.integers(0, 2)), max_size=30),
    st.lists(
        st.tuples(st.sampled_from(["read", "take", "ack", "nack", "extend", "resend", "tick"]), st.integers(0, 2)),
        max_size=60,
    ),
)
def test_a_recovered_ledger_confirms_each_message_once_and_never_delivers_an_acknowledged_one(
    keys: list[bytes | None], before: list[tuple[str, int]], after: list[tuple[str, int]]
) -> None:
    """Settlements of recovered deliveries arrive before, while and after the topic is read again: late
    (from a delivery replaced since), twice (resends), or never (leases that run out)."""
    now = 0
    holders = ["a", "b", "c"]
    held: dict[str, list[tuple[int, int]]] = {h: [] for h in holders}
    confirmed: dict[int, int] = {}
    dead: set[int] = set()
    latest: dict[int, int] = {}  # offset -> the receipt of its last delivery

    def run(ledger: Ledger, action: str, holder: str, read: int) -> None:
        nonlocal now
        if action == "take":
            taken = take(ledger, now, holder, limit=2, key_ordered=True)
            for offset, receipt in taken.leased:
                assert offset < read, "delivered before it was read"
                assert offset not in confirmed, "an acknowledged message delivered again"
                assert receipt == latest.get(offset, 0) + 1
                latest[offset] = receipt
                key = keys[offset]
                if key is not None:  # key order: every earlier offset with its key is settled
                    assert all(o in confirmed or o in dead for o in range(offset) if keys[o] == key)
            held[holder].extend(taken.leased)
            for offset in taken.dead:
                dead.add(offset)
                ledger.settle(offset, DEAD)
        elif action in ("ack", "nack", "extend") and held[holder]:
            offset, receipt = held[holder].pop(0) if action != "extend" else held[holder][0]
            if action == "ack":
                status = ledger.ack(offset, receipt)
                assert status == (OK if latest.get(offset) == receipt and offset not in dead else STALE)
                if status == OK:
                    assert confirmed.setdefault(offset, receipt) == receipt
            elif action == "nack":
                assert ledger.nack(offset, receipt, now, 10) in (OK, STALE)
            else:
                assert ledger.extend(offset, receipt, now, TIMEOUT) in (OK, STALE)
        elif action == "resend" and confirmed:
            offset = sorted(confirmed)[len(confirmed) // 2]
            assert ledger.ack(offset, confirmed[offset]) == OK
        elif action == "tick":
            now += TIMEOUT // 2

    ledger = filled(len(keys), keys)
    for action, who in before:
        run(ledger, action, holders[who], len(keys))
    ledger = recovered(ledger, sorted(confirmed))  # every confirmation's receipt kept, as settled_since does
    read = ledger.floor
    for action, who in after:
        if action == "read" and read < len(keys):
            ledger.admit(read, keys[read])
            read += 1
        else:
            run(ledger, action, holders[who], read)
    for offset in range(read, len(keys)):
        ledger.admit(offset, keys[offset])
    for _round in range(100):  # then everyone acknowledges whatever it holds or gets
        now += TIMEOUT
        for holder in holders:
            run(ledger, "take", holder, len(keys))
            while held[holder]:
                run(ledger, "ack", holder, len(keys))
        if ledger.floor == len(keys):
            break
    assert ledger.floor == len(keys)
    assert set(confirmed) | dead == set(range(len(keys)))
    assert not set(confirmed) & dead
