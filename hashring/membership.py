"""Delayed reassignment (Xiaomi Talos): who should be in the ring, as a pure function of time.

A live server joins the ring once it has been up for ``join_delay``; a ring member whose registration
(ephemeral node) is gone leaves only after ``reassign_delay``, so a restart inside the delay moves
nothing. A live server that stepped down (its storage failing) leaves at once and joins again like a new
one. Any server may compute this and publish the result (CAS on the versioned ring).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from hashring.ring import DEFAULT_VNODES, Ring

__all__ = ["MembershipChange", "next_members"]


@dataclass(frozen=True)
class MembershipChange:
    members: dict[str, int]  # the ring's members after the change
    added: frozenset[str]
    removed: frozenset[str]
    next_check_in: float | None  # seconds until a pending join or removal becomes due (None: nothing pending)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed)


def next_members(
    ring: Ring,
    live_since: Mapping[str, float],
    missing_since: Mapping[str, float],
    now: float,
    *,
    join_delay: float,
    reassign_delay: float,
    vnodes: int = DEFAULT_VNODES,
    stepped_down: Collection[str] = (),
) -> MembershipChange:
    """``live_since``: registered servers that can serve → since when. ``missing_since``: ring members without a
    registration → since when they have been seen missing (the caller remembers first sightings).
    ``stepped_down``: registered servers that asked to leave (they cannot write): out now, not after a delay."""
    members = dict(ring.members)
    waits: list[float] = []
    added = set()
    for server, since in live_since.items():
        if server in members:
            continue
        if now - since >= join_delay:
            members[server] = vnodes
            added.add(server)
        else:
            waits.append(join_delay - (now - since))
    removed = set()
    for member in list(members):
        if member in live_since or member in added:
            continue
        if member in stepped_down and len(members) > 1:  # never the last one: an empty ring serves nothing
            del members[member]
            removed.add(member)
            continue
        since = missing_since.get(member, now)
        if now - since >= reassign_delay:
            del members[member]
            removed.add(member)
        else:
            waits.append(reassign_delay - (now - since))
    return MembershipChange(members, frozenset(added), frozenset(removed), min(waits) if waits else None)
