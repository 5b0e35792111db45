"""Waiting with a bound for work that may never end (a storage or ZooKeeper call that hangs).

Two helpers shared by the shutdown (``Broker.close``, the app's lifespan) and readiness: a blocking call on a
daemon thread of its own, whose outcome is a future on the event loop (a stuck call is left behind, and never
holds up the process's exit, as a pool's thread would), and a step awaited until a deadline, then given up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable

__all__ = ["in_daemon_thread", "until_deadline"]

log = logging.getLogger("talos.server")


def in_daemon_thread(function: Callable[[], object], *, name: str) -> asyncio.Future[None]:
    """Run ``function`` on a new daemon thread; the future (of the running loop) settles with its outcome."""
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if outcome.done():
            return
        if error is None:
            outcome.set_result(None)
        else:
            outcome.set_exception(error)

    def run() -> None:
        error: BaseException | None = None
        try:
            function()
        except BaseException as exc:
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (a shutdown)
            loop.call_soon_threadsafe(settle, error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return outcome


async def until_deadline(what: str, step: Awaitable[object], deadline: float, gave_up: list[str]) -> None:
    """Await ``step`` until ``deadline`` (a ``time.monotonic()``); past it, cancel it and add ``what`` to
    ``gave_up``. A step that fails is logged, not raised: the next steps of a shutdown still run."""
    task = asyncio.ensure_future(step)
    done, _ = await asyncio.wait({task}, timeout=max(0.0, deadline - time.monotonic()))
    if not done:
        task.cancel()
        gave_up.append(what)
        log.warning("shutdown: gave up %s (the shutdown deadline)", what)
    elif not task.cancelled() and task.exception() is not None:
        log.warning("shutdown: %s failed: %r", what, task.exception())
