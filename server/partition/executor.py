"""Talos's "min-heap with memory" thread pool, for blocking storage work.

A plain pool hashes requests to threads, so a partition whose storage is slow stalls every partition
hashed to the same thread. Here each thread has its own queue, and the pool remembers which thread is
working on which key (a partition) while it has work queued or running:

* work for a key already on a thread goes to that thread (one partition's work stays in order, on one
  thread, and a stuck partition holds up only itself);
* work for any other key goes to the thread with the fewest tasks queued or running (the min-heap; with
  the handful of threads a server has, a scan is as fast as a heap and always exact), leaving out threads
  whose current task has run for more than ``stall_s`` (storage calls take milliseconds: such a thread is
  stuck on a slow partition, and counting its queue would not show that) unless every thread is;
* when every thread has been stuck for longer than ``spare_after_s`` (a cut from HDFS can leave a call
  waiting on a half-open connection for good), a new key gets a spare thread of its own, up to
  ``max_spares``: stuck calls cost their threads, never the pool. A spare retires once it has no work.

Each pool counts its tasks and the time they waited in a queue, for ``/metrics``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["AffinityExecutor", "KeyedExecutor", "PoolStats"]

log = logging.getLogger("talos.server")
T = TypeVar("T")
_STOP = object()


@dataclass
class PoolStats:
    tasks: int = 0
    queued_s: float = 0.0  # summed over tasks: from submit to start
    running_s: float = 0.0
    spares: int = 0  # spare threads started because every thread was stuck


class _Worker:
    def __init__(self, pool: AffinityExecutor, index: int, *, spare: bool = False) -> None:
        self.pool = pool
        self.spare = spare
        self.retired = False  # a spare with no work left: guarded by the pool's lock
        self.load = 0  # tasks queued or running: guarded by the pool's lock
        self.busy_since: float | None = None  # when the running task started (None: idle)
        self.jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self.run, name=f"{pool.name}-{index}", daemon=True)

    def run(self) -> None:
        while True:
            job = self.jobs.get()
            if job is _STOP:
                return
            key, future, function, args, submitted = job
            started = self.busy_since = time.monotonic()
            try:
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(function(*args))
                    except BaseException as exc:
                        future.set_exception(exc)
            finally:
                self.busy_since = None
                self.pool._done(self, key, started - submitted, time.monotonic() - started)
            if self.retired:
                return


class AffinityExecutor:
    def __init__(
        self, threads: int, name: str, *, stall_s: float = 0.5, spare_after_s: float = 10.0, max_spares: int = 32
    ) -> None:
        if threads < 1:
            raise ValueError("threads must be >= 1")
        self.name = name
        self._stall_s = stall_s
        self._spare_after_s = spare_after_s
        self._max_spares = max_spares
        self._lock = threading.Lock()
        self._workers = [_Worker(self, i) for i in range(threads)]
        self._started = threads
        self._holding: dict[Hashable, tuple[_Worker, int]] = {}  # key → (its thread, its tasks there)
        self.stats = PoolStats()
        self._closed = False
        for worker in self._workers:
            worker.thread.start()

    def submit(self, key: Hashable, function: Callable[..., T], *args: Any) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self.name}: the executor is shut down")
            held = self._holding.get(key)
            worker = held[0] if held is not None else self._least_loaded()
            self._holding[key] = (worker, (held[1] if held is not None else 0) + 1)
            worker.load += 1
        worker.jobs.put((key, future, function, args, time.monotonic()))
        return future

    def _least_loaded(self) -> _Worker:
        now = time.monotonic()
        moving = [w for w in self._workers if w.busy_since is None or now - w.busy_since < self._stall_s]
        if moving:
            return min(moving, key=lambda w: (w.load, w.busy_since or 0.0))
        stuck = all(now - (w.busy_since or now) >= self._spare_after_s for w in self._workers)
        if stuck and sum(w.spare for w in self._workers) < self._max_spares:
            return self._spare()
        return min(self._workers, key=lambda w: (w.load, w.busy_since or 0.0))

    def _spare(self) -> _Worker:
        """A new thread for a pool whose every thread is stuck (under the lock)."""
        worker = _Worker(self, self._started, spare=True)
        self._started += 1
        self._workers.append(worker)
        worker.thread.start()
        self.stats.spares += 1
        log.warning(
            "%s: every thread has been stuck in a call for over %.0f s (storage that does not answer): new work "
            "goes to a spare thread (%d started so far)",
            self.name,
            self._spare_after_s,
            self.stats.spares,
        )
        return worker

    def _done(self, worker: _Worker, key: Hashable, waited: float, ran: float) -> None:
        with self._lock:
            worker.load -= 1
            held = self._holding[key]
            if held[1] == 1:
                del self._holding[key]  # nothing of the key left: its next task may go anywhere
            else:
                self._holding[key] = (held[0], held[1] - 1)
            self.stats.tasks += 1
            self.stats.queued_s += waited
            self.stats.running_s += ran
            if worker.spare and worker.load == 0 and not self._closed:
                worker.retired = True  # nothing is queued on it, and nothing new can be: it leaves the pool
                self._workers.remove(worker)

    def queued(self) -> int:
        """Tasks queued or running now."""
        with self._lock:
            return sum(w.load for w in self._workers)

    def for_key(self, key: Hashable) -> KeyedExecutor:
        """An :class:`Executor` sending everything to this pool under ``key`` (for ``run_in_executor``)."""
        return KeyedExecutor(self, key)

    def shutdown(self, wait: bool = True) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            workers = list(self._workers)
        for worker in workers:
            worker.jobs.put(_STOP)
        if wait:
            for worker in workers:
                worker.thread.join()


class KeyedExecutor(Executor):
    """One key's view of an :class:`AffinityExecutor`."""

    def __init__(self, pool: AffinityExecutor, key: Hashable) -> None:
        self._pool = pool
        self._key = key

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        if kwargs:
            return self._pool.submit(self._key, lambda: fn(*args, **kwargs))
        return self._pool.submit(self._key, fn, *args)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """The pool is shared: a key's view does not stop it."""
