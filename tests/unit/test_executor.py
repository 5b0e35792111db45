"""The "min-heap with memory" pool: a key's work stays on its thread while it has any; other work goes
to the least-loaded thread; a stuck key holds up only itself."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from server.partition.executor import AffinityExecutor


@pytest.fixture
def pool() -> Iterator[AffinityExecutor]:
    executor = AffinityExecutor(4, "test")
    try:
        yield executor
    finally:
        executor.shutdown()


def test_a_keys_work_runs_in_order_on_one_thread(pool: AffinityExecutor) -> None:
    seen: list[tuple[int, str]] = []
    futures = [pool.submit("t/0", lambda i=i: seen.append((i, threading.current_thread().name))) for i in range(200)]
    for future in futures:
        future.result(5)
    assert [i for i, _ in seen] == list(range(200))
    assert len({name for _, name in seen}) == 1


def test_a_stuck_key_holds_up_only_itself(pool: AffinityExecutor) -> None:
    release = threading.Event()
    stuck = [pool.submit("slow/0", release.wait, 10) for _ in range(3)]
    time.sleep(0.6)  # stuck for longer than a storage call takes
    started = time.monotonic()
    others = [pool.submit(f"fast/{i}", time.sleep, 0.01) for i in range(30)]
    for future in others:
        future.result(5)
    assert time.monotonic() - started < 3  # done while slow/0 still waits
    assert not any(f.done() for f in stuck)
    release.set()
    assert all(f.result(5) for f in stuck)


def _running(futures: list[Future[Any]]) -> None:
    """Until every one of them has started (on a loaded machine a thread may start its task late), so the sleep
    after it is time they have all been stuck."""
    deadline = time.monotonic() + 10
    while not all(f.running() for f in futures):
        assert time.monotonic() < deadline, "the tasks did not start"
        time.sleep(0.005)


def test_when_every_thread_is_stuck_a_new_key_gets_a_spare_thread_which_retires_after() -> None:
    pool = AffinityExecutor(2, "test", spare_after_s=0.3, max_spares=1)
    release = threading.Event()
    try:
        stuck = [pool.submit(f"stuck/{i}", release.wait, 10) for i in range(2)]
        _running(stuck)
        time.sleep(0.5)  # both threads stuck past spare_after_s (a call on a half-open connection)
        spare = pool.submit("new/0", lambda: threading.current_thread().name).result(5)
        assert spare == "test-2" and pool.stats.spares == 1
        # That spare retired with its work done, so the next stuck pool gets one again; then the cap holds
        stuck.append(pool.submit("stuck/2", release.wait, 10))
        _running(stuck)
        time.sleep(0.5)
        assert pool.stats.spares == 2
        late = pool.submit("new/1", lambda: threading.current_thread().name)
        time.sleep(0.2)
        assert pool.stats.spares == 2 and not late.done()  # max_spares stuck too: it waits its turn
        release.set()
        assert late.result(5) in {"test-0", "test-1", "test-3"}
        assert all(f.result(5) for f in stuck)
        assert pool.queued() == 0
    finally:
        release.set()
        pool.shutdown()


def test_new_keys_go_to_the_least_loaded_thread(pool: AffinityExecutor) -> None:
    release = threading.Event()
    blockers = [pool.submit(f"busy/{i}", release.wait, 10) for i in range(3)]  # three threads busy
    names = {pool.submit(f"k/{i}", lambda: threading.current_thread().name).result(5) for i in range(10)}
    assert len(names) == 1  # all on the one idle thread, none queued behind a blocker
    release.set()
    for future in blockers:
        future.result(5)


def test_errors_reach_the_caller_and_stats_count_queueing(pool: AffinityExecutor) -> None:
    def fail() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        pool.submit("e", fail).result(5)
    for future in [pool.submit("q", time.sleep, 0.02) for _ in range(5)]:
        future.result(5)
    assert pool.stats.tasks == 6
    assert pool.stats.queued_s > 0.02 * 3  # the later ones waited behind the earlier ones on their thread
    assert pool.queued() == 0


def test_the_keyed_view_serves_asyncio(pool: AffinityExecutor) -> None:
    import asyncio

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        view = pool.for_key(("orders", 3))
        return list(await asyncio.gather(*(loop.run_in_executor(view, pow, i, 2) for i in range(5))))

    assert asyncio.run(main()) == [0, 1, 4, 9, 16]
    pool.shutdown()
    with pytest.raises(RuntimeError):
        pool.submit("late", print)
