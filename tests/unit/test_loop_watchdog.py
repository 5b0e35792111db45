"""LoopWatchdog: a loop blocked on purpose is reported once, with the stack naming the blocking call, and again
when it runs; a loop that keeps running is never reported; the stalls reach /metrics."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from server import metrics
from server.loop_watchdog import LoopWatchdog


def _blocks_the_loop_on_purpose(seconds: float) -> None:
    time.sleep(seconds)  # what a synchronous ZooKeeper or storage call on the loop does


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "talos.server" and r.levelno == logging.WARNING]


def test_a_blocked_loop_is_logged_once_with_the_blocking_call_and_its_length(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="talos.server")

    async def scenario() -> LoopWatchdog:
        watchdog = LoopWatchdog(interval_s=0.05, stall_s=0.3).start()
        await asyncio.sleep(0.2)  # pings answered: no stall
        _blocks_the_loop_on_purpose(1.2)
        await asyncio.sleep(0.3)  # the loop runs again: the recovery line
        watchdog.stop()
        return watchdog

    watchdog = asyncio.run(scenario())
    assert watchdog.stalls == 1
    assert 1.0 <= watchdog.longest_s <= 1.5
    stalled, recovered = _warnings(caplog)
    assert stalled.startswith("the event loop has not run for ")
    assert "_blocks_the_loop_on_purpose" in stalled, stalled
    assert "time.sleep(seconds)" in stalled.splitlines()[-1], "the stack ends at the blocking line itself"
    assert recovered.startswith("the event loop runs again after a stall of 1.")


def test_a_loop_that_keeps_running_is_never_reported(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="talos.server")

    async def scenario() -> LoopWatchdog:
        watchdog = LoopWatchdog(interval_s=0.02, stall_s=0.2).start()
        for _ in range(20):
            _blocks_the_loop_on_purpose(0.05)  # busy, but never for stall_s
            await asyncio.sleep(0.01)
        watchdog.stop()
        return watchdog

    watchdog = asyncio.run(scenario())
    assert watchdog.stalls == 0
    assert _warnings(caplog) == []


def test_stop_on_the_loop_returns_at_once_and_the_thread_ends() -> None:
    async def scenario() -> tuple[LoopWatchdog, float]:
        watchdog = LoopWatchdog(interval_s=0.05, stall_s=5.0).start()
        await asyncio.sleep(0.1)
        began = time.monotonic()
        watchdog.stop()
        return watchdog, time.monotonic() - began

    watchdog, took = asyncio.run(scenario())
    assert took < 0.05, "stop() on the loop must not wait for the watchdog (it waits for the loop)"
    assert watchdog._thread is not None
    watchdog._thread.join(2)
    assert not watchdog._thread.is_alive()
    assert not [t for t in threading.enumerate() if t is watchdog._thread]


def test_a_closed_loop_ends_the_watchdog_without_a_report(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="talos.server")

    async def scenario() -> LoopWatchdog:
        return LoopWatchdog(interval_s=0.02, stall_s=0.1).start()  # never stopped: the loop just ends

    watchdog = asyncio.run(scenario())
    assert watchdog._thread is not None
    watchdog._thread.join(2)
    assert not watchdog._thread.is_alive()
    assert _warnings(caplog) == []


def test_stalls_are_on_the_metrics_page() -> None:
    async def scenario() -> None:
        watchdog = LoopWatchdog(interval_s=0.05, stall_s=0.2).start()
        await asyncio.sleep(0.1)
        _blocks_the_loop_on_purpose(0.5)
        await asyncio.sleep(0.2)
        watchdog.stop()

    asyncio.run(scenario())
    page = metrics.render().decode()
    stalls = next(line for line in page.splitlines() if line.startswith("talos_event_loop_stalls_total "))
    assert float(stalls.split()[1]) >= 1
    longest = next(line for line in page.splitlines() if line.startswith("talos_event_loop_longest_stall_seconds "))
    assert float(longest.split()[1]) >= 0.4


def test_interval_and_stall_are_checked() -> None:
    with pytest.raises(ValueError, match="interval_s <= stall_s"):
        LoopWatchdog(interval_s=2.0, stall_s=1.0)
