"""The compactor's key index: the latest offset of each key, in a fixed amount of memory.

Kafka's cleaner keeps a "skimpy offset map": an open-addressing table of key hashes, each with the offset of
the key's latest record, sized once. This is the same: every slot is 24 bytes (a 16-byte BLAKE2b digest of
the key and the offset), probed linearly, filled to at most 90 %. When it is full the compactor stops at the
last segment it indexed whole and compacts that far (the next pass goes on from there), so a partition of any
size is compacted in bounded memory. Two keys with one 128-bit digest would be taken for one key (the odds
are those of an MD5 collision between keys, which Kafka accepts too). Pure: no I/O.
"""

from __future__ import annotations

import hashlib

__all__ = ["SLOT_BYTES", "KeyIndex"]

SLOT_BYTES = 24
_DIGEST = 16
_LOAD_FACTOR = 0.9


def digest(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=_DIGEST).digest()


class KeyIndex:
    """Key → the highest offset :meth:`put` for it, for at most :attr:`capacity` keys."""

    def __init__(self, memory_bytes: int) -> None:
        self.slots = max(memory_bytes // SLOT_BYTES, 2)
        self.capacity = max(int(self.slots * _LOAD_FACTOR), 1)
        self._table = bytearray(self.slots * SLOT_BYTES)
        self._view = memoryview(self._table)
        self.size = 0

    @property
    def memory_bytes(self) -> int:
        return len(self._table)

    @property
    def full(self) -> bool:
        return self.size >= self.capacity

    def clear(self) -> None:
        # A new zeroed table (calloc: pages come zeroed) rather than a 32 MiB copy of zeros under the GIL.
        self._view.release()
        self._table = bytearray(len(self._table))
        self._view = memoryview(self._table)
        self.size = 0

    def _find(self, hashed: bytes) -> int:
        """The byte position of ``hashed``'s slot, or of the empty slot where it would go."""
        slots, view = self.slots, self._view
        slot = int.from_bytes(hashed[:8], "little") % slots
        while True:
            position = slot * SLOT_BYTES
            # An empty slot has offset field 0 (offsets are stored plus one).
            if (
                view[position + _DIGEST : position + SLOT_BYTES] == b"\0" * 8
                or view[position : position + _DIGEST] == hashed
            ):
                return position
            slot = slot + 1 if slot + 1 < slots else 0

    def put(self, key: bytes, offset: int) -> bool:
        """Remember ``offset`` for ``key`` if higher than the one held. False (and nothing changed) when the
        key is new and the index is full."""
        hashed = digest(key)
        position = self._find(hashed)
        stored = int.from_bytes(self._view[position + _DIGEST : position + SLOT_BYTES], "little")
        if stored == 0:
            if self.full:
                return False
            self.size += 1
            self._table[position : position + _DIGEST] = hashed
        if offset + 1 > stored:
            self._table[position + _DIGEST : position + SLOT_BYTES] = (offset + 1).to_bytes(8, "little")
        return True

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, or -1 if it is not in the index."""
        position = self._find(digest(key))
        return int.from_bytes(self._view[position + _DIGEST : position + SLOT_BYTES], "little") - 1
