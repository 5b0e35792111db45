"""Names of the files in a partition directory.

    <base:020d>.<epoch:010d>.log                          open segment, written by the owner of <epoch>
    <base:020d>.<epoch:010d>.sealing                      an open segment a takeover moved aside (POSIX)
                                                          before reading it; still open until renamed sealed
    <base:020d>.<epoch:010d>.<end:020d>.<length>.sealed   closed segment: offsets [base, end) are its
                                                          first <length> bytes; anything after is ignored
    <base>.<epoch>.<end>.<length>.g<generation>.sealed    a compacted segment: the same offsets, fewer of
                                                          them; it replaces the segments it covers that have
                                                          a lower generation (plain sealed ones are 0)
    <base:020d>.<epoch:010d>.<end:020d>.cleaning          a compaction's output being written by the owner
                                                          of <epoch> (a takeover deletes those of older epochs)
    _epoch/<epoch:010d>                                   marker of an owner's epoch, created exclusively
    _start/<offset:020d>                                  the log's start offset (records deleted below it)

A sealed name carries the valid length because on HDFS a torn tail cannot be truncated in place
(and on POSIX a fenced writer may still append to the inode): the name, not the file size, is the truth.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "EPOCH_DIR",
    "START_DIR",
    "CleaningName",
    "SegmentName",
    "epoch_marker_name",
    "parse_epoch_marker",
    "parse_start_marker",
    "start_marker_name",
]

EPOCH_DIR = "_epoch"
START_DIR = "_start"
_OPEN = re.compile(r"^(\d{20})\.(\d{10})\.(log|sealing)$")
_SEALED = re.compile(r"^(\d{20})\.(\d{10})\.(\d{20})\.(\d+)(?:\.g(\d+))?\.sealed$")
_CLEANING = re.compile(r"^(\d{20})\.(\d{10})\.(\d{20})\.cleaning$")
_MARKER = re.compile(r"^\d{10}$")
_START = re.compile(r"^\d{20}$")


@dataclass(frozen=True, slots=True)
class SegmentName:
    base: int
    epoch: int
    end: int | None = None  # None while open
    length: int | None = None
    moved_aside: bool = False  # an open segment a takeover renamed to ``.sealing``
    generation: int = 0  # how many compactions made it (0: as written)

    @property
    def sealed(self) -> bool:
        return self.end is not None

    def __str__(self) -> str:
        if self.end is None:
            return f"{self.base:020d}.{self.epoch:010d}.{'sealing' if self.moved_aside else 'log'}"
        generation = f".g{self.generation}" if self.generation else ""
        return f"{self.base:020d}.{self.epoch:010d}.{self.end:020d}.{self.length}{generation}.sealed"

    def seal(self, end: int, length: int) -> SegmentName:
        return SegmentName(self.base, self.epoch, end, length)

    def covers(self, other: SegmentName) -> bool:
        """Whether this sealed segment's offsets include all of ``other``'s."""
        assert self.end is not None and other.end is not None
        return self.base <= other.base and other.end <= self.end

    def move_aside(self) -> SegmentName:
        return SegmentName(self.base, self.epoch, moved_aside=True)

    @classmethod
    def parse(cls, name: str) -> SegmentName | None:
        if match := _OPEN.match(name):
            return cls(int(match[1]), int(match[2]), moved_aside=match[3] == "sealing")
        if match := _SEALED.match(name):
            return cls(int(match[1]), int(match[2]), int(match[3]), int(match[4]), generation=int(match[5] or 0))
        return None


@dataclass(frozen=True, slots=True)
class CleaningName:
    """A compaction's output while its owner (of ``epoch``) writes it; it becomes a sealed segment by a rename."""

    base: int
    epoch: int
    end: int

    def __str__(self) -> str:
        return f"{self.base:020d}.{self.epoch:010d}.{self.end:020d}.cleaning"

    @classmethod
    def parse(cls, name: str) -> CleaningName | None:
        match = _CLEANING.match(name)
        return cls(int(match[1]), int(match[2]), int(match[3])) if match else None


def epoch_marker_name(epoch: int) -> str:
    return f"{epoch:010d}"


def parse_epoch_marker(name: str) -> int | None:
    return int(name) if _MARKER.match(name) else None


def start_marker_name(offset: int) -> str:
    return f"{offset:020d}"


def parse_start_marker(name: str) -> int | None:
    return int(name) if _START.match(name) else None
