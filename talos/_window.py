"""Swift's write protocol on the client: keep what was accepted until it is durable (pure, no I/O).

With ``acks="accepted"`` the partition's owner answers once a batch is in its memory, with its load
session S (the partition's epoch: it changes when the partition moves or reloads) and its durable
checkpoint C (every offset below C is flushed). A batch is *confirmed* once C passes its end. If S
changes, whatever was accepted but not confirmed may be gone: everything after the new C is sent again,
in order, before anything newer (and the owner refuses writes that still carry the old S).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from talos._accumulator import PendingBatch

__all__ = ["Accepted", "PartitionWindow"]


@dataclass(frozen=True, slots=True)
class Accepted:
    batch: PendingBatch[Any]
    base_offset: int
    next_offset: int


@dataclass
class PartitionWindow:
    session: int | None = None
    checkpoint: int = 0
    unconfirmed: deque[Accepted] = field(default_factory=deque)
    lock: threading.Lock = field(default_factory=threading.Lock)  # one sender (or resender) at a time

    def accepted(
        self, batch: PendingBatch[Any], base: int, next_offset: int, checkpoint: int, session: int
    ) -> list[Accepted]:
        """The owner accepted ``batch``; returns the batches now confirmed (oldest first)."""
        self.session = session
        self.unconfirmed.append(Accepted(batch, base, next_offset))
        return self.advance(checkpoint)

    def advance(self, checkpoint: int) -> list[Accepted]:
        """The durable checkpoint moved to ``checkpoint``; returns the batches it confirms."""
        self.checkpoint = max(self.checkpoint, checkpoint)
        confirmed = []
        while self.unconfirmed and self.unconfirmed[0].next_offset <= self.checkpoint:
            confirmed.append(self.unconfirmed.popleft())
        return confirmed

    def moved(self, session: int, old_session_end: int) -> tuple[list[Accepted], list[PendingBatch[Any]]]:
        """The partition has a new session. ``old_session_end``: how far the session our batches were accepted
        in got durable (the owner reads it from the segments that session sealed). Returns (batches
        confirmed by it, batches to send again). Not the new session's checkpoint: other producers' writes
        may since have pushed it past offsets our lost batches once had."""
        self.checkpoint = old_session_end
        confirmed = []
        while self.unconfirmed and self.unconfirmed[0].next_offset <= old_session_end:
            confirmed.append(self.unconfirmed.popleft())
        resend = [entry.batch for entry in self.unconfirmed]
        self.unconfirmed.clear()
        self.session = session
        return confirmed, resend

    @property
    def empty(self) -> bool:
        return not self.unconfirmed
