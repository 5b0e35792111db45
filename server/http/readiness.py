"""The storage half of ``/readyz``: is the partition storage answering?

An HDFS client retries while the NameNode is down, so a check can take as long as the outage. Kubernetes
probes every few seconds and gives up after its timeout; the check must answer within that, and must not
start a new stuck thread per probe. So one check runs at a time, on a daemon thread of its own (not the
storage pools, where it would queue behind flushes, nor the loop's default executor, which DNS lookups
share); a probe that finds it still running waits at most ``timeout_s`` for it and reports storage as not
answering. When storage comes back the stuck check returns, and the next probe starts a fresh one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from server.bounded import in_daemon_thread


class StorageCheck:
    def __init__(self, check: Callable[[], object], *, timeout_s: float = 2.0) -> None:
        self._check = check
        self._timeout_s = timeout_s
        self._running: asyncio.Future[None] | None = None

    async def problem(self) -> str | None:
        """None when storage answered within ``timeout_s``; else what is wrong, for the 503."""
        if self._running is None or self._running.done():
            self._running = self._start()
        try:
            await asyncio.wait_for(asyncio.shield(self._running), self._timeout_s)
        except TimeoutError:
            return f"storage did not answer within {self._timeout_s:g} s"
        except Exception as exc:
            return f"storage unreachable: {exc}"
        return None

    def _start(self) -> asyncio.Future[None]:
        # A daemon thread: a check stuck on dead storage must not hold up the process's exit.
        return in_daemon_thread(self._check, name="talos-readyz")
