"""What a push subscription has done with one partition: settled, leased, waiting. Pure (no I/O), so it is
unit- and property-tested on its own.

The ledger covers a *window* of the partition, ``[floor, end)``: every offset below ``floor`` is settled
(acknowledged, dead-lettered or removed by retention); ``end`` is the next offset the coordinator has not
read yet. Inside the window each offset is either settled (with the *receipt*, the delivery count, of the
acknowledgement that settled it) or an :class:`Entry`: ready to deliver (fresh, nacked, or its lease ran
out) or leased to a subscriber until a deadline. A delivery's receipt is its delivery count, so an
acknowledgement from a delivery that has since timed out and gone to someone else is told apart ("stale")
from the acknowledgement of the current one: at most one acknowledgement per message is ever confirmed.

A ledger recovered from a snapshot starts with ``end`` at the floor, but its settled offsets and entries
(leases, nacked messages) may lie past ``end``: they are settled by their receipts at once, and wait there
until the coordinator reads their offsets again, to be delivered (or skipped, if settled) in order.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = ["DEAD", "GONE", "OK", "STALE", "UNKNOWN", "Entry", "Ledger", "Take"]

OK, STALE, UNKNOWN = "ok", "stale", "unknown"
DEAD = -1  # receipt of an offset settled by dead-lettering
GONE = -2  # receipt of an offset retention removed before it was settled
_RECENT = 65_536  # receipts kept per partition after the floor passed them (answers a resent acknowledgement)


@dataclass(slots=True)
class Entry:
    """An unsettled offset. ``until_ms``: leased, the ack deadline; not leased, not delivered before it."""

    deliveries: int = 0
    leased: bool = False
    until_ms: int = 0
    holder: str | None = None
    dead: bool = False  # its deliveries are used up: waiting to be written to the dead-letter topic


@dataclass(slots=True)
class Take:
    """What one call of :meth:`Ledger.take` handed out: ``leased`` (offset, receipt) to deliver now, and
    offsets whose deliveries are used up, to dead-letter."""

    leased: list[tuple[int, int]]
    dead: list[int]


class Ledger:
    def __init__(
        self,
        floor: int,
        *,
        settled: Iterable[tuple[int, int]] = (),
        entries: Iterable[tuple[int, Entry]] = (),
        recent: Iterable[tuple[int, int]] = (),
    ) -> None:
        self.floor = floor
        self.end = floor  # nothing of the window is read yet
        self.settled: dict[int, int] = {o: r for o, r in settled if o >= floor}
        # Recovered entries may lie beyond ``end``: they wait there until their offset is admitted.
        self.entries: dict[int, Entry] = {o: e for o, e in sorted(entries, key=lambda pair: pair[0]) if o >= floor}
        self.recent: OrderedDict[int, int] = OrderedDict(recent)
        self.keys: dict[int, bytes | None] = {}  # the key of every admitted, unsettled offset (key order)
        self._last_recovered = max(self.entries, default=-1)
        self._sorted = True

    # ------------------------------------------------------------------ the window

    def admit(self, offset: int, key: bytes | None) -> bool:
        """Add the next offset read from the partition to the window; False if it is already settled."""
        if offset < self.end:
            return False
        self.skip_to(offset)  # the log does not hold those below (retention removed them under the read)
        self.end = offset + 1
        if offset in self.settled:
            self._advance()
            return False
        if offset not in self.entries:
            self.entries[offset] = Entry()
            if offset < self._last_recovered:
                self._sorted = False
        self.keys[offset] = key
        return True

    def skip_to(self, offset: int) -> None:
        """The partition holds no message from the window's end up to ``offset``: a transaction's marker, or
        records compaction removed. Settled as gone, so that the next read starts past them."""
        if offset > self.end:
            start, self.end = self.end, offset
            self._gap(start, offset)

    def _gap(self, start: int, stop: int) -> None:
        for offset in range(start, stop):
            self.entries.pop(offset, None)
            self.settled.setdefault(offset, GONE)
        self._advance()

    def lose_below(self, offset: int) -> list[int]:
        """Retention removed everything below ``offset``: settle it as gone; the offsets that were unsettled."""
        if offset <= self.floor:
            return []
        lost = [o for o in self.entries if o < offset and not self.entries[o].dead]
        for o in [o for o in self.entries if o < offset]:
            del self.entries[o]
            self.keys.pop(o, None)
        for o in [o for o in self.settled if o < offset]:
            self._remember(o, self.settled.pop(o))
        self.floor = offset
        self.end = max(self.end, offset)
        self._advance()
        return lost

    @property
    def window(self) -> int:
        return self.end - self.floor

    def unsettled(self) -> int:
        return sum(1 for o in self.entries if o < self.end)

    def leased(self) -> int:
        return sum(1 for o, e in self.entries.items() if o < self.end and e.leased)

    def _ordered(self) -> Iterator[tuple[int, Entry]]:
        if not self._sorted:
            self.entries = dict(sorted(self.entries.items()))
            self._sorted = True
        return iter(self.entries.items())  # take() changes entries, never which offsets there are

    # ------------------------------------------------------------------ delivering

    def take(
        self,
        now_ms: int,
        holder: str,
        limit: int,
        *,
        ack_timeout_ms: int,
        max_deliveries: int,
        key_ordered: bool,
    ) -> Take:
        """Lease up to ``limit`` ready messages to ``holder`` in offset order. With ``key_ordered`` a message
        is not handed out while an earlier one with its key is unsettled. A message already delivered
        ``max_deliveries`` times (0: no limit) is marked dead instead (the caller dead-letters it)."""
        out = Take([], [])
        blocked: set[bytes] = set()
        for offset, entry in self._ordered():
            if offset >= self.end or len(out.leased) >= limit:
                break
            key = self.keys.get(offset) if key_ordered else None
            held = entry.dead or entry.until_ms > now_ms  # leased and in time, or not ready yet
            if held or (key is not None and key in blocked):
                if key is not None:
                    blocked.add(key)
                continue
            if max_deliveries and entry.deliveries >= max_deliveries:
                entry.dead, entry.leased, entry.holder = True, False, None
                out.dead.append(offset)
                if key is not None:
                    blocked.add(key)
                continue
            entry.deliveries += 1
            entry.leased, entry.until_ms, entry.holder = True, now_ms + ack_timeout_ms, holder
            out.leased.append((offset, entry.deliveries))
            if key is not None:
                blocked.add(key)
        return out

    def next_change_ms(self, now_ms: int) -> int | None:
        """When, after ``now_ms``, the next lease runs out or waiting message becomes ready (None: never; what
        is ready but held back by key order waits for a settlement instead)."""
        times = [e.until_ms for o, e in self.entries.items() if o < self.end and not e.dead and e.until_ms > now_ms]
        return min(times) if times else None

    # ------------------------------------------------------------------ settling

    def ack(self, offset: int, receipt: int) -> str:
        """Settle a delivered message: OK if ``receipt`` is its current delivery (or the one that settled it),
        STALE if it was delivered but that delivery is over (another has it, it is dead or settled otherwise),
        UNKNOWN if no delivery of it is known."""
        if offset in self.settled or offset < self.floor:
            return self._settled_status(offset, receipt)
        entry = self._current(offset, receipt)
        if not isinstance(entry, Entry):
            return entry
        self.settle(offset, receipt)
        return OK

    def settle(self, offset: int, receipt: int) -> None:
        self.entries.pop(offset, None)
        self.keys.pop(offset, None)
        self.settled[offset] = receipt
        self._advance()

    def nack(self, offset: int, receipt: int, now_ms: int, delay_ms: int) -> str:
        """Give a leased message back, to be delivered again after ``delay_ms``."""
        entry = self._current(offset, receipt)
        if not isinstance(entry, Entry):
            return entry
        entry.leased, entry.until_ms, entry.holder = False, now_ms + delay_ms, None
        return OK

    def extend(self, offset: int, receipt: int, now_ms: int, extra_ms: int) -> str:
        """Move a leased message's deadline to ``extra_ms`` from now."""
        entry = self._current(offset, receipt)
        if not isinstance(entry, Entry):
            return entry
        if not entry.leased:  # given back already: the delivery is over
            return STALE
        entry.until_ms = now_ms + extra_ms
        return OK

    def release(self, holder: str, now_ms: int) -> int:
        """A subscriber left: its leased messages are ready again at once; how many."""
        count = 0
        for entry in self.entries.values():
            if entry.leased and entry.holder == holder:
                entry.leased, entry.until_ms, entry.holder = False, now_ms, None
                count += 1
        return count

    def _current(self, offset: int, receipt: int) -> Entry | str:
        """The unsettled entry whose current delivery ``receipt`` is, else the status that answers it.

        An entry may lie at or past ``end``: a lease recovered from a snapshot, whose offset the coordinator
        has not read again yet. Its delivery is as real as before the restart, so it is settled, given back or
        extended by its receipt at once (the subscriber reconnects and acknowledges long before a slow read
        catches up, and its lease would otherwise run out and the message go out again). Settled there, the
        offset is skipped when it is read (``admit``); given back, it waits there and is delivered in order
        once read; an offset past ``end`` that is not an entry was never delivered."""
        if offset in self.settled or offset < self.floor:
            return STALE  # the delivery is over: the message is settled
        entry = self.entries.get(offset)
        if entry is None or not entry.deliveries:
            return UNKNOWN
        if entry.dead or entry.deliveries != receipt:
            return STALE
        return entry

    def _settled_status(self, offset: int, receipt: int) -> str:
        """An acknowledgement of a settled offset: OK again for the delivery that settled it (a resend whose
        answer was lost); STALE for any other, or once its receipt is no longer kept."""
        known = self.settled.get(offset) if offset in self.settled else self.recent.get(offset)
        return OK if known is not None and known == receipt and receipt > 0 else STALE

    def _advance(self) -> None:
        while self.floor in self.settled and self.floor < self.end:
            self._remember(self.floor, self.settled.pop(self.floor))
            self.floor += 1

    def _remember(self, offset: int, receipt: int) -> None:
        self.recent[offset] = receipt
        if len(self.recent) > _RECENT:
            self.recent.popitem(last=False)

    # ------------------------------------------------------------------ persisting

    def to_json(self, settled_since: Iterable[int] = ()) -> dict[str, object]:
        """The state to recover: floor, settled offsets in the window, and every entry that was delivered or
        is timed (fresh ones are read again). ``settled_since``: offsets settled since the last snapshot,
        kept with their receipts even below the floor, so a resent acknowledgement is still confirmed."""
        recent = [[o, self.recent[o]] for o in settled_since if o < self.floor and o in self.recent]
        return {
            "floor": self.floor,
            "settled": [[o, r] for o, r in self.settled.items()],
            "entries": [
                [o, e.deliveries, int(e.leased), e.until_ms, int(e.dead)]
                for o, e in self.entries.items()
                if e.deliveries or e.until_ms or e.dead
            ],
            "recent": recent,
        }

    @classmethod
    def from_json(cls, doc: dict[str, object]) -> Ledger:
        def pairs(name: str) -> list[tuple[int, int]]:
            raw = doc.get(name) or []
            assert isinstance(raw, list)
            return [(int(o), int(r)) for o, r in raw]

        raw_entries = doc.get("entries") or []
        assert isinstance(raw_entries, list)
        entries = [
            (int(o), Entry(int(d), bool(leased), int(until), None, bool(dead)))
            for o, d, leased, until, dead in raw_entries
        ]
        floor = doc.get("floor", 0)
        assert isinstance(floor, int)
        return cls(floor, settled=pairs("settled"), entries=entries, recent=pairs("recent"))
