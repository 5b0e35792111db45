"""How this server's storage has been doing: the evidence a step-down is decided on (pure, no I/O).

Flushes and the storage probe report here: each storage operation is ``begin``-ed and ``end``-ed, and an
operation still running counts as failing from its start, since a cut from HDFS shows as an ``hsync`` that
never returns, not as an error. An operation that began *after* a stuck one and succeeded shows the storage
works again: the stuck one is forgotten (its thread may stay inside the storage client for minutes, and
must not keep the server marked as failing once it can write again).

The clock is injected (``time.monotonic`` for durations, ``time.time`` for the wall time peers compare), so
tests drive it by hand.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["STALLED_AFTER_S", "StorageHealth", "StorageState"]

#: A storage operation running longer than this counts as failing (from its start). Flushes take milliseconds;
#: a busy HDFS may take a second.
STALLED_AFTER_S = 2.0


@dataclass(frozen=True, slots=True)
class StorageState:
    failing_s: float  # how long storage has been failing or stalled (0: it works)
    last_ok_ms: int  # wall time of the last successful storage operation (0: none yet)
    ok_for_s: float  # how long storage has worked since it last failed (0 while failing)
    ok_since_ms: int  # wall time since which it has worked (0 while failing, or before any success)
    problem: str  # the latest failure, for logs and readiness ("" when none)


class StorageHealth:
    def __init__(
        self,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._monotonic = monotonic
        self._wall = wall
        self._lock = threading.Lock()
        self._tokens = itertools.count()
        self._running: dict[int, tuple[float, str]] = {}  # token → (start, what)
        self._failing_since: float | None = None
        self._ok_since: float | None = None
        self._last_ok_ms = 0
        self._problem = ""

    def begin(self, what: str) -> int:
        """A storage operation starts (from any thread); pass the token to :meth:`end`."""
        token = next(self._tokens)
        with self._lock:
            self._running[token] = (self._monotonic(), what)
        return token

    def end(self, token: int, error: BaseException | None = None) -> None:
        """The operation ``token`` returned: successfully, or with ``error``."""
        now = self._monotonic()
        with self._lock:
            started, what = self._running.pop(token, (None, ""))
            if started is None:
                return  # superseded: a later operation succeeded while this one was stuck
            if error is None:
                self._succeeded(started, now)
            else:
                self._failed(started, f"{what}: {error}")

    def forget(self, token: int) -> None:
        """The operation ``token`` ended in a way that says nothing of the storage (ZooKeeper failed first)."""
        with self._lock:
            self._running.pop(token, None)

    @contextlib.contextmanager
    def operation(
        self,
        what: str,
        *,
        failures: tuple[type[BaseException], ...] = (Exception,),
        answered: tuple[type[BaseException], ...] = (),
    ) -> Iterator[None]:
        """One storage operation, begun and ended around the block: an exception of ``failures`` ends it as a
        failure, one of ``answered`` (the storage answered, with a refusal) as a success, any other says nothing
        of the storage (ZooKeeper failed first, say)."""
        token = self.begin(what)
        try:
            yield
        except answered:
            self.end(token)
            raise
        except failures as exc:
            self.end(token, exc)
            raise
        except BaseException:
            self.forget(token)
            raise
        self.end(token)

    def _succeeded(self, started: float, now: float) -> None:
        # A stall ends as a success (the stuck hsync returns once HDFS resumes): the storage works since now, not
        # since before the stall, or peers would take it for a server whose storage never stopped.
        stalled = now - started > STALLED_AFTER_S
        for token, (other, _what) in list(self._running.items()):
            if other < started:
                stalled = stalled or now - other > STALLED_AFTER_S
                del self._running[token]
        if self._failing_since is not None and self._failing_since > started:
            return  # it began before the latest failure: no proof the storage works since
        self._failing_since = None
        if self._ok_since is None or stalled:
            self._ok_since = now
        self._last_ok_ms = int(self._wall() * 1000)

    def _failed(self, since: float, problem: str) -> None:
        self._problem = problem
        self._ok_since = None
        if self._failing_since is None or since < self._failing_since:
            self._failing_since = since

    def state(self, *, stall_s: float = STALLED_AFTER_S) -> StorageState:
        """Where things stand now; an operation running longer than ``stall_s`` counts as failing."""
        now = self._monotonic()
        with self._lock:
            failing_since = self._failing_since
            problem = self._problem
            stuck = [(started, what) for started, what in self._running.values() if now - started > stall_s]
            if stuck:
                started, what = min(stuck)
                if failing_since is None or started < failing_since:
                    failing_since = started
                problem = f"{what} running for {now - started:.1f} s"
            failing_s = now - failing_since if failing_since is not None else 0.0
            ok_for_s = now - self._ok_since if self._ok_since is not None and not stuck else 0.0
            ok_since_ms = int((self._wall() - ok_for_s) * 1000) if ok_for_s else 0
            return StorageState(failing_s, self._last_ok_ms, ok_for_s, ok_since_ms, problem if failing_s else "")

    def last_ok_ms(self) -> int:
        with self._lock:
            return self._last_ok_ms
