"""A watchdog for the server's event loop (issue 35, "Nothing hangs").

Everything a server does for its clients runs on one asyncio event loop, ``/healthz`` included: one call that
blocks it (a synchronous ZooKeeper or storage call, a ``threading.Lock`` a storage thread holds, a long
computation) stops the whole server, and nothing reaches the log to say what did. So a daemon thread asks the
loop to run a no-op every ``interval_s`` (``call_soon_threadsafe``); when the loop has not run it within
``stall_s``, the thread logs one warning with the Python stack the loop's thread is at (``sys._current_frames``),
which names the blocking call, and, once the loop runs the no-op, one line with how long the stall lasted. The
stalls are counted on ``/metrics`` (``talos_event_loop_stalls_total``, ``talos_event_loop_longest_stall_seconds``).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback

from server import metrics

__all__ = ["LoopWatchdog"]

log = logging.getLogger("talos.server")


class _Ping:
    """One no-op sent to the loop, and when the loop ran it."""

    __slots__ = ("answered", "done", "sent")

    def __init__(self) -> None:
        self.sent = time.monotonic()
        self.answered = 0.0
        self.done = threading.Event()

    def answer(self) -> None:  # on the loop
        self.answered = time.monotonic()
        self.done.set()


class LoopWatchdog:
    """Start it on the loop it watches (:meth:`start`, from a coroutine); :meth:`stop` never blocks the loop."""

    def __init__(self, *, interval_s: float = 1.0, stall_s: float = 3.0) -> None:
        if not 0 < interval_s <= stall_s:
            raise ValueError(f"need 0 < interval_s <= stall_s, got {interval_s} and {stall_s}")
        self.interval_s = interval_s
        self.stall_s = stall_s
        self.stalls = 0  # stalls seen (each logged once)
        self.longest_s = 0.0  # the longest stall that ended
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> LoopWatchdog:
        """Watch the running loop (call this from a coroutine on it)."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._thread = threading.Thread(target=self._run, name="talos-loop-watchdog", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching. On the loop's thread it returns at once (joining would wait for a ping the loop can only
        answer once this returns); from another thread it waits for the watchdog's thread to end."""
        self._stop.set()
        thread = self._thread
        if thread is not None and threading.get_ident() != self._loop_thread:
            thread.join(self.stall_s + self.interval_s)

    def loop_stack(self) -> str:
        """The Python stack the loop's thread is at now (innermost call last)."""
        frame = sys._current_frames().get(self._loop_thread)
        if frame is None:
            return "  (the loop's thread has no Python frame)\n"
        return "".join(traceback.format_stack(frame))

    def _run(self) -> None:
        loop = self._loop
        assert loop is not None
        while not self._stop.is_set():
            ping = _Ping()
            try:
                loop.call_soon_threadsafe(ping.answer)
            except RuntimeError:  # the loop is closed: nothing left to watch
                return
            if not ping.done.wait(self.stall_s):
                if self._stop.is_set():
                    return  # stopped while the loop shut down: not a stall
                # A process paused whole (SIGSTOP, a frozen VM) wakes both threads at once, its clock gone on:
                # a loop that answers at once then was not stuck, and is not reported.
                if not ping.done.wait(min(0.5, self.interval_s)):
                    self._stalled(ping)
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - ping.sent)))

    def _stalled(self, ping: _Ping) -> None:
        self.stalls += 1
        metrics.loop_stalled()
        log.warning(
            "the event loop has not run for %.1f s (every request waits, /healthz too); its thread is at:\n%s",
            time.monotonic() - ping.sent,
            self.loop_stack().rstrip("\n"),
        )
        while not ping.done.wait(self.interval_s):
            if self._stop.is_set() or self._loop is None or self._loop.is_closed():
                return
        # The loop ran the no-op ``ping.answered - ping.sent`` after it was sent: the stall lasted at least that
        # long, and at most one ``interval_s`` more (when it began just after the previous ping was answered).
        seconds = ping.answered - ping.sent
        self.longest_s = max(self.longest_s, seconds)
        metrics.loop_longest_stall(self.longest_s)
        log.warning("the event loop runs again after a stall of %.1f s", seconds)
