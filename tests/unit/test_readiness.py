"""StorageCheck: a storage call that hangs answers the probe in time, never piles up threads, and is
replaced by a fresh check once it returns."""

from __future__ import annotations

import asyncio
import threading

from server.http.readiness import StorageCheck


def test_a_hanging_check_times_out_runs_once_and_recovers() -> None:
    release = threading.Event()
    calls: list[int] = []

    def check() -> None:
        calls.append(1)
        release.wait(10)

    async def scenario() -> None:
        probe = StorageCheck(check, timeout_s=0.05)
        for _ in range(3):
            assert await probe.problem() == "storage did not answer within 0.05 s"
        assert len(calls) == 1, "probes while a check hangs wait for that one, not a new thread each"
        release.set()
        await asyncio.sleep(0.1)  # the stuck check returns
        assert await probe.problem() is None
        assert len(calls) == 2, "a finished check is not reused: the next probe checks afresh"

    asyncio.run(scenario())


def test_a_failing_check_reports_the_error() -> None:
    def check() -> None:
        raise ConnectionRefusedError("namenode:8020")

    async def scenario() -> str | None:
        return await StorageCheck(check, timeout_s=5).problem()

    assert asyncio.run(scenario()) == "storage unreachable: namenode:8020"
