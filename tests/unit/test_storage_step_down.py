"""Storage health and the step-down rule (server.storage_health, server.coordination.stepdown): pure logic."""

from __future__ import annotations

import contextlib

from hypothesis import given
from hypothesis import strategies as st

from server.coordination.stepdown import PeerStorage, writers_besides
from server.storage_health import StorageHealth


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def health() -> tuple[StorageHealth, Clock]:
    clock = Clock()
    return StorageHealth(monotonic=clock, wall=clock), clock


def test_a_flush_that_does_not_return_counts_as_failing_from_its_start() -> None:
    h, clock = health()
    token = h.begin("a flush of t/0")
    clock.now += 1.0
    assert h.state(stall_s=2.0).failing_s == 0  # a slow flush is not yet a failure
    clock.now += 2.0
    state = h.state(stall_s=2.0)
    assert state.failing_s == 3.0
    assert "a flush of t/0 running for 3.0 s" in state.problem
    h.end(token)
    assert h.state(stall_s=2.0).failing_s == 0


def test_a_failure_lasts_until_an_operation_begun_after_it_succeeds() -> None:
    h, clock = health()
    early = h.begin("probe")
    clock.now += 1
    h.end(h.begin("loading t/0"), OSError("cannot load t/0"))
    clock.now += 4
    h.end(early)  # began before the failure: proves nothing about the storage now
    assert h.state().failing_s == 4.0
    later = h.begin("probe")
    clock.now += 0.5
    h.end(later)
    state = h.state()
    assert state.failing_s == 0
    assert state.last_ok_ms == int(clock.now * 1000)
    clock.now += 3
    assert h.state().ok_for_s == 3.0


def test_a_stuck_operation_is_forgotten_once_a_later_one_succeeds() -> None:
    h, clock = health()
    h.begin("a flush of t/0")  # stuck inside the storage client for good
    clock.now += 10
    assert h.state().failing_s == 10
    probe = h.begin("probe")
    clock.now += 0.1
    h.end(probe)
    assert h.state().failing_s == 0
    clock.now += 5
    assert h.state().ok_for_s == 5.0  # the storage works again, whatever that old thread does


def test_storage_that_stalled_works_only_since_the_stall_ended() -> None:
    # A stall ends as a success, not an error (HDFS stopped, then resumed: the stuck hsync returns). The storage
    # worked before the stall, but "working since" must start when the stall ended: peers that see a long
    # ok_for_s take it as proof the storage works for us, and step down on it (seen in CI: after HDFS stopped for
    # everybody, the first server to write again looked like a sustained writer and the others left the ring).
    h, clock = health()
    h.end(h.begin("probe"))
    clock.now += 10
    assert h.state().ok_for_s == 10
    flush = h.begin("a flush of t/0")
    clock.now += 30
    assert h.state().ok_for_s == 0
    h.end(flush)  # the storage came back
    state = h.state()
    assert (state.failing_s, state.ok_for_s, state.ok_since_ms) == (0, 0, 0)
    clock.now += 1
    assert h.state().ok_for_s == 1
    # the same when the stuck operation is forgotten because a later one succeeded
    stuck = h.begin("a flush of t/1")
    clock.now += 30
    h.end(h.begin("probe"))
    clock.now += 1
    assert h.state().ok_for_s == 1
    h.end(stuck)  # superseded: says nothing
    assert h.state().ok_for_s == 1


def test_an_error_makes_storage_failing_from_the_operations_start() -> None:
    h, clock = health()
    token = h.begin("probe")
    clock.now += 1.5
    h.end(token, OSError("connection reset"))
    clock.now += 1
    state = h.state()
    assert state.failing_s == 2.5
    assert "connection reset" in state.problem
    assert state.ok_for_s == 0


def test_forgotten_operations_say_nothing() -> None:
    h, clock = health()
    token = h.begin("loading t/0")
    clock.now += 10
    h.forget(token)  # ZooKeeper failed first
    assert h.state().failing_s == 0
    assert h.state().last_ok_ms == 0


PEERS = {"b": PeerStorage(True, 99_000, 1_000), "c": PeerStorage(True, 90_000, 1_000)}


def test_steps_down_only_on_a_peer_that_wrote_since_our_storage_began_failing() -> None:
    ring = {"a": 100, "b": 100, "c": 100}
    found = writers_besides("a", ring, PEERS, now_ms=100_000, failing_since_ms=95_000, fresh_ms=5_000)
    assert found == ["b"]  # c's last write is older than our failure, and stale


def test_storage_down_for_everybody_leaves_nobody_with_evidence() -> None:
    ring = {"a": 100, "b": 100, "c": 100}
    peers = {"b": PeerStorage(True, 95_100, 1_000), "c": PeerStorage(True, 95_000, 1_000)}
    # everybody's last success is from when the storage went down: older than fresh_ms
    assert writers_besides("a", ring, peers, now_ms=101_000, failing_since_ms=95_000, fresh_ms=5_000) == []


def test_stepped_down_and_non_members_are_no_evidence() -> None:
    peers = {"b": PeerStorage(False, 99_900, 1_000), "d": PeerStorage(True, 99_900, 1_000)}
    ring = {"a": 100, "b": 100}
    assert writers_besides("a", ring, peers, now_ms=100_000, failing_since_ms=95_000, fresh_ms=5_000) == []


@given(
    st.dictionaries(
        st.sampled_from(["a", "b", "c", "d"]),
        st.tuples(st.booleans(), st.integers(0, 200_000), st.integers(0, 200_000)),
    ),
    st.integers(0, 200_000),
)
def test_evidence_is_always_a_writable_other_ring_member_newer_than_the_failure(
    raw: dict[str, tuple[bool, int, int]], failing_since_ms: int
) -> None:
    peers = {name: PeerStorage(writable, ok, since) for name, (writable, ok, since) in raw.items()}
    ring = {"a": 1, "b": 1, "c": 1}
    args = {"now_ms": 200_000, "failing_since_ms": failing_since_ms, "fresh_ms": 5_000, "sustained_ms": 5_000}
    for writer in writers_besides("a", ring, peers, **args):
        assert writer != "a" and writer in ring
        assert peers[writer].writable
        assert peers[writer].last_ok_ms > failing_since_ms
        assert peers[writer].last_ok_ms >= 195_000
        assert 0 < peers[writer].ok_since_ms <= 195_000


def test_a_write_already_on_its_way_when_the_storage_went_down_is_no_evidence() -> None:
    ring = {"a": 100, "b": 100}
    peers = {"b": PeerStorage(True, 95_500, 1_000)}  # acknowledged 0.5 s after our stuck flush began
    args = {"now_ms": 97_000, "failing_since_ms": 95_000, "fresh_ms": 5_000}
    assert writers_besides("a", ring, peers, **args) == ["b"]
    assert writers_besides("a", ring, peers, **args, margin_ms=2_000) == []


def test_a_peer_counts_only_once_its_storage_has_worked_for_a_while() -> None:
    ring = {"a": 100, "b": 100}
    args = {"now_ms": 130_000, "failing_since_ms": 100_000, "fresh_ms": 5_000, "sustained_ms": 5_000}
    # the storage came back for everybody at 129 s: b wrote first, a second before we would have
    assert writers_besides("a", ring, {"b": PeerStorage(True, 129_500, 129_000)}, **args) == []
    assert writers_besides("a", ring, {"b": PeerStorage(True, 129_500, 120_000)}, **args) == ["b"]
    assert writers_besides("a", ring, {"b": PeerStorage(True, 129_500, 0)}, **args) == []  # failing now


def test_an_operation_block_ends_as_what_its_exception_says_of_the_storage() -> None:
    h, clock = health()
    with contextlib.suppress(LookupError), h.operation("loading t/0", failures=(OSError,)):
        clock.now += 10
        raise LookupError("ZooKeeper first")  # says nothing of the storage
    assert h.state().failing_s == 0 and h.state().last_ok_ms == 0
    with contextlib.suppress(PermissionError), h.operation("flush", failures=(OSError,), answered=(PermissionError,)):
        raise PermissionError("fenced")  # the storage answered
    assert h.state().last_ok_ms > 0
    with contextlib.suppress(OSError), h.operation("flush", failures=(OSError,)):
        raise OSError("cut")
    clock.now += 1
    assert h.state().failing_s == 1.0 and "flush: cut" in h.state().problem
