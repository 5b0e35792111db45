"""``RecordFuture``: the sync producer's answer for one record, resolved together with its whole batch.

A ``concurrent.futures.Future`` per record costs a Condition and a lock (~3 µs); at hundreds of thousands
of records a second that is the producer's largest cost. Records of one batch succeed or fail together,
so they share one :class:`BatchOutcome` and each future is two slots. The calls are those of
``concurrent.futures.Future`` that a producer's caller uses.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from talos._accumulator import RecordMetadata

__all__ = ["BatchOutcome", "RecordFuture"]


class BatchOutcome:
    __slots__ = ("_callbacks", "_event", "base", "error", "partition", "topic")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.base = -1
        self.error: BaseException | None = None
        self._event = threading.Event()
        self._callbacks: list[tuple[RecordFuture, Callable[[RecordFuture], object]]] = []

    def resolve(self, base: int, error: BaseException | None) -> None:
        self.base = base
        self.error = error
        self._event.set()
        callbacks, self._callbacks = self._callbacks, []
        for future, callback in callbacks:
            callback(future)


class RecordFuture:
    """Where one record was stored (:class:`RecordMetadata`), or why it was not."""

    __slots__ = ("_index", "_outcome")

    def __init__(self, outcome: BatchOutcome, index: int) -> None:
        self._outcome = outcome
        self._index = index

    def done(self) -> bool:
        return self._outcome._event.is_set()

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return not self.done()

    def cancel(self) -> bool:
        return False  # a queued record cannot be taken back

    def _wait(self, timeout: float | None) -> BatchOutcome:
        if not self._outcome._event.wait(timeout):
            raise TimeoutError("the record is not acknowledged yet")
        return self._outcome

    def result(self, timeout: float | None = None) -> RecordMetadata:
        outcome = self._wait(timeout)
        if outcome.error is not None:
            raise outcome.error
        return RecordMetadata(outcome.topic, outcome.partition, outcome.base + self._index if outcome.base >= 0 else -1)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._wait(timeout).error

    def add_done_callback(self, callback: Callable[[RecordFuture], object]) -> None:
        outcome = self._outcome
        if not outcome._event.is_set():
            outcome._callbacks.append((self, callback))
            if not outcome._event.is_set():
                return
            # resolved meanwhile: run it here unless resolve() already took it
            try:
                outcome._callbacks.remove((self, callback))
            except ValueError:
                return
        callback(self)
