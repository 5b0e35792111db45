"""Names of the files in a partition directory.

    <base:020d>.<epoch:010d>.log                          open segment, written by the owner of <epoch>
    <base:020d>.<epoch:010d>.sealing                      an open segment a takeover moved aside (POSIX)
                                                          before reading it; still open until renamed sealed
    <base:020d>.<epoch:010d>.<end:020d>.<length>.sealed   closed segment: offsets [base, end) are its
                                                          first <length> bytes; anything after is ignored
    _epoch/<epoch:010d>                                   marker of an owner's epoch, created exclusively

A sealed name carries the valid length because on HDFS a torn tail cannot be truncated in place
(and on POSIX a fenced writer may still append to the inode): the name, not the file size, is the truth.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["EPOCH_DIR", "SegmentName", "epoch_marker_name", "parse_epoch_marker"]

EPOCH_DIR = "_epoch"
_OPEN = re.compile(r"^(\d{20})\.(\d{10})\.(log|sealing)$")
_SEALED = re.compile(r"^(\d{20})\.(\d{10})\.(\d{20})\.(\d+)\.sealed$")
_MARKER = re.compile(r"^\d{10}$")


@dataclass(frozen=True, slots=True)
class SegmentName:
    base: int
    epoch: int
    end: int | None = None  # None while open
    length: int | None = None
    moved_aside: bool = False  # an open segment a takeover renamed to ``.sealing``

    @property
    def sealed(self) -> bool:
        return self.end is not None

    def __str__(self) -> str:
        if self.end is None:
            return f"{self.base:020d}.{self.epoch:010d}.{'sealing' if self.moved_aside else 'log'}"
        return f"{self.base:020d}.{self.epoch:010d}.{self.end:020d}.{self.length}.sealed"

    def seal(self, end: int, length: int) -> SegmentName:
        return SegmentName(self.base, self.epoch, end, length)

    def move_aside(self) -> SegmentName:
        return SegmentName(self.base, self.epoch, moved_aside=True)

    @classmethod
    def parse(cls, name: str) -> SegmentName | None:
        if match := _OPEN.match(name):
            return cls(int(match[1]), int(match[2]), moved_aside=match[3] == "sealing")
        if match := _SEALED.match(name):
            return cls(int(match[1]), int(match[2]), int(match[3]), int(match[4]))
        return None


def epoch_marker_name(epoch: int) -> str:
    return f"{epoch:010d}"


def parse_epoch_marker(name: str) -> int | None:
    return int(name) if _MARKER.match(name) else None
