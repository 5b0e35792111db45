"""A consistent-hash ring whose members carry their own virtual-node counts (on ``uhashring``).

The ring is a pure value: the members' vnode counts and a version. Every server builds the same ring from
the same counts (published in ZooKeeper), so they agree on who owns ``"<topic>:<partition>"`` without
talking to each other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from uhashring import HashRing

__all__ = ["DEFAULT_VNODES", "Ring", "partition_key"]

DEFAULT_VNODES = 160


def partition_key(topic: str, partition: int) -> str:
    """The ring key of a partition."""
    return f"{topic}:{partition}"


@dataclass(frozen=True)
class Ring:
    """Members (server id → virtual-node count) at a version."""

    members: Mapping[str, int]
    version: int = 0
    _ring: HashRing | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if any(count < 1 for count in self.members.values()):
            raise ValueError("every member needs at least one virtual node")
        if self.members:
            ring = HashRing(nodes={member: {"vnodes": count} for member, count in sorted(self.members.items())})
            object.__setattr__(self, "_ring", ring)

    @classmethod
    def of(cls, members: Iterable[str], *, vnodes: int = DEFAULT_VNODES, version: int = 0) -> Ring:
        return cls({member: vnodes for member in members}, version)

    def owner(self, key: str) -> str:
        if self._ring is None:
            raise LookupError("the ring has no members")
        return str(self._ring.get_node(key))

    def place(self, keys: Iterable[str]) -> dict[str, str]:
        """Owner of each key."""
        return {key: self.owner(key) for key in keys}

    def with_members(self, members: Mapping[str, int]) -> Ring:
        """The next version with these members."""
        return Ring(dict(members), self.version + 1)

    def to_json(self) -> dict[str, object]:
        return {"version": self.version, "members": dict(sorted(self.members.items()))}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Ring:
        members = data.get("members", {})
        version = data.get("version", 0)
        if not isinstance(members, Mapping) or not isinstance(version, int):
            raise ValueError("a ring is {'version': int, 'members': {id: vnodes}}")
        return cls({str(k): int(v) for k, v in members.items()}, version)
