"""Recent batches of every partition in memory, under one shared byte budget (oldest evicted first)."""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Iterable

__all__ = ["PartitionTail", "TailCache"]


class PartitionTail:
    """One partition's cached batches: contiguous, from :attr:`start` to :attr:`end`."""

    def __init__(self, cache: TailCache, key: tuple[str, int]) -> None:
        self._cache = cache
        self._key = key
        self._bases: list[int] = []
        self._ends: list[int] = []
        self._batches: list[bytes | bytearray] = []
        self._first = 0  # index of the oldest live entry (entries before it were evicted)

    @property
    def start(self) -> int | None:
        """The lowest cached offset, or None when nothing is cached."""
        return self._bases[self._first] if self._first < len(self._bases) else None

    def add(self, base: int, end: int, batch: bytes | bytearray) -> None:
        self.extend(((base, end, batch),))

    def extend(self, stored: Iterable[tuple[int, int, bytes | bytearray]]) -> None:
        """Cache ``(base, end, batch)`` in order (a flush's), accounted to the budget at once: once per flush,
        not per batch (a group of single messages is one batch each)."""
        size = 0
        for base, end, batch in stored:
            if self._first < len(self._ends) and self._ends[-1] != base:
                if size:
                    self._cache.account(self._key, self, size)
                    size = 0
                self.clear()  # not contiguous (the log was reloaded): start over
            self._bases.append(base)
            self._ends.append(end)
            self._batches.append(batch)
            size += len(batch)
        if size:
            self._cache.account(self._key, self, size)

    def read(self, offset: int, max_bytes: int, until: int | None = None) -> list[bytes | bytearray] | None:
        """Batches from the one holding ``offset``, up to the one holding ``until - 1`` (a reader that takes that
        many messages at most needs no more); None if ``offset`` is not cached (read the log)."""
        start = self.start
        if start is None or offset < start:
            return None
        index = bisect.bisect_right(self._ends, offset, lo=self._first)
        stop = len(self._batches)
        if until is not None:
            stop = min(stop, bisect.bisect_left(self._ends, until, lo=index) + 1)
        out: list[bytes | bytearray] = []
        size = 0
        while index < stop:
            batch = self._batches[index]
            if out and size + len(batch) > max_bytes:
                break
            out.append(batch)
            size += len(batch)
            index += 1
        return out

    def evict_oldest(self) -> int:
        if self._first >= len(self._batches):
            return 0
        size = len(self._batches[self._first])
        self._batches[self._first] = b""
        self._first += 1
        if self._first > 1024 and self._first * 2 > len(self._batches):
            # Compact now and then so the lists do not grow without bound.
            del self._bases[: self._first], self._ends[: self._first], self._batches[: self._first]
            self._first = 0
        return size

    def clear(self) -> None:
        while self.evict_oldest():
            pass
        self._cache.forget(self._key)

    def drop_below(self, offset: int) -> None:
        """Forget the batches that end at or below ``offset`` (compacted: readers get the log's smaller copy)."""
        freed = 0
        while self._first < len(self._ends) and self._ends[self._first] <= offset:
            freed += self.evict_oldest()
        if freed:
            self._cache.release(self._key, freed)


class TailCache:
    """The shared budget. Eviction takes the oldest batch of the partition that cached least recently."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self.used = 0
        self._sizes: OrderedDict[tuple[str, int], tuple[PartitionTail, int]] = OrderedDict()

    def partition(self, topic: str, partition: int) -> PartitionTail:
        return PartitionTail(self, (topic, partition))

    def account(self, key: tuple[str, int], tail: PartitionTail, size: int) -> None:
        held = self._sizes.pop(key, (tail, 0))[1]
        self._sizes[key] = (tail, held + size)
        self.used += size
        while self.used > self.budget and self._sizes:
            victim_key, (victim, victim_held) = next(iter(self._sizes.items()))
            freed = victim.evict_oldest()
            if freed == 0:
                del self._sizes[victim_key]
                continue
            self.used -= freed
            if victim_held - freed <= 0:
                del self._sizes[victim_key]
            else:
                self._sizes[victim_key] = (victim, victim_held - freed)
                self._sizes.move_to_end(victim_key, last=False)

    def release(self, key: tuple[str, int], size: int) -> None:
        """``size`` bytes of ``key``'s batches were dropped by the partition itself."""
        entry = self._sizes.get(key)
        if entry is None:
            return
        tail, held = entry
        freed = min(size, held)
        self.used -= freed
        if held - freed <= 0:
            del self._sizes[key]
        else:
            self._sizes[key] = (tail, held - freed)

    def forget(self, key: tuple[str, int]) -> None:
        held = self._sizes.pop(key, (None, 0))[1]
        self.used -= held
