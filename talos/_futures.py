"""The producers' answers: :class:`RecordMetadata`, where a record was stored; ``RecordFuture``, the sync
producer's answer for one record, resolved together with its whole batch; ``RecordsFuture``, its answer for a
whole ``send_many`` call.

A ``concurrent.futures.Future`` per record costs a Condition and a lock (~3 µs); at hundreds of thousands
of records a second that is the producer's largest cost. Records of one batch succeed or fail together,
so they share one :class:`BatchOutcome` and each future is two slots. A ``send_many`` call has one
:class:`ManyOutcome` however many batches its records went into, and holds their offsets as ints until they
are asked for. The calls are those of ``concurrent.futures.Future`` that a producer's caller uses.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["BatchOutcome", "ManyOutcome", "RecordFuture", "RecordMetadata", "RecordsFuture"]


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record was stored."""

    topic: str
    partition: int
    offset: int


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


class ManyOutcome:
    """The answer to one ``send_many`` call (both producers), filled in batch by batch as they are answered:
    each record's partition and offset (ints, no object per record until :meth:`metadata`), and the error of
    the first record, in the order given, that failed. ``on_done`` is called once every batch is answered."""

    __slots__ = ("_lock", "_on_done", "_pending", "error", "failed_at", "offsets", "partitions", "topic")

    def __init__(self, topic: str, count: int, on_done: Callable[[ManyOutcome], object]) -> None:
        self.topic = topic
        self.offsets = [-1] * count
        self.partitions = [0] * count
        self.error: BaseException | None = None
        self.failed_at = count  # the place of the first record that failed
        self._pending = 1  # held by the call until all its records are queued: early answers cannot finish it
        self._lock = threading.Lock()  # the blocking producer answers batches from several threads
        self._on_done = on_done

    def expect(self) -> None:
        """One more batch holds some of the call's records."""
        with self._lock:
            self._pending += 1

    def settle(self, partition: int, base: int, positions: Sequence[int], error: BaseException | None) -> None:
        """A batch holding the records at ``positions`` (ascending) was answered: stored from offset ``base``
        (-1: stored, offsets unknown), or failed."""
        with self._lock:
            if error is not None:
                if positions[0] < self.failed_at:
                    self.failed_at, self.error = positions[0], error
            elif isinstance(positions, range) and positions.step == 1:
                count = len(positions)
                offsets = range(base, base + count) if base >= 0 else [-1] * count
                self.offsets[positions.start : positions.stop] = offsets
                self.partitions[positions.start : positions.stop] = [partition] * count
            else:
                for index, position in enumerate(positions):
                    self.offsets[position] = base + index if base >= 0 else -1
                    self.partitions[position] = partition
        self.release()

    def release(self) -> None:
        """A part is answered (or the call has queued everything): the last one calls ``on_done``."""
        with self._lock:
            self._pending -= 1
            finished = self._pending == 0
        if finished:
            self._on_done(self)

    def metadata(self) -> list[RecordMetadata]:
        topic = self.topic
        return [RecordMetadata(topic, p, o) for p, o in zip(self.partitions, self.offsets, strict=True)]


class RecordsFuture:
    """Where the records of one ``send_many`` call were stored: ``result()`` is a list of
    :class:`RecordMetadata`, in the order the records were given, once every one is stored; or it raises the
    error of the first record (in that order) that was not (others may have been stored)."""

    __slots__ = ("_callbacks", "_event", "_lock", "_metadata", "outcome")

    def __init__(self, topic: str, count: int) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[RecordsFuture], object]] = []
        self._metadata: list[RecordMetadata] | None = None
        self.outcome = ManyOutcome(topic, count, self._finish)

    def _finish(self, _outcome: ManyOutcome) -> None:
        with self._lock:
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def done(self) -> bool:
        return self._event.is_set()

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return not self.done()

    def cancel(self) -> bool:
        return False  # queued records cannot be taken back

    def _wait(self, timeout: float | None) -> ManyOutcome:
        if not self._event.wait(timeout):
            raise TimeoutError("the records are not all acknowledged yet")
        return self.outcome

    def result(self, timeout: float | None = None) -> list[RecordMetadata]:
        outcome = self._wait(timeout)
        if outcome.error is not None:
            raise outcome.error
        if self._metadata is None:
            self._metadata = outcome.metadata()
        return self._metadata

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._wait(timeout).error

    def add_done_callback(self, callback: Callable[[RecordsFuture], object]) -> None:
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return
        callback(self)
