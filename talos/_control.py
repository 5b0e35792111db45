"""Transaction markers: the control batch a transaction's coordinator has written on each of its partitions
when it commits or aborts, in Kafka's bytes (so that the Kafka listener hands it on as it is).

A control batch has the :data:`~talos._codec.TRANSACTIONAL` and :data:`~talos._codec.CONTROL` flags, the
transaction's producer id and epoch, ``base_sequence`` -1, no compression and one record:

    key    int16 version (0), int16 type (0 abort, 1 commit)
    value  int16 version (0), int32 coordinator epoch

Its offset counts like any record's; no reader hands it out as a message. Pure: no I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from talos._codec import CONTROL, TRANSACTIONAL, BatchHeader, Record, RecordData, encode_batch
from talos._errors import CorruptBatchError

__all__ = ["ControlType", "Marker", "marker_batch", "parse_marker"]

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class ControlType(IntEnum):
    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True)
class Marker:
    """A transaction's end on one partition: which producer's transaction, committed or aborted, and the
    epoch of the coordinator that decided it (a marker from an older coordinator is refused)."""

    producer_id: int
    producer_epoch: int
    type: ControlType
    coordinator_epoch: int

    @property
    def committed(self) -> bool:
        return self.type is ControlType.COMMIT


def marker_batch(marker: Marker, *, timestamp_ms: int, base_offset: int = 0) -> bytes:
    """The control batch of ``marker``."""
    record = RecordData(_VALUE.pack(0, marker.coordinator_epoch), _KEY.pack(0, marker.type), timestamp=timestamp_ms)
    return encode_batch(
        [record],
        base_offset=base_offset,
        producer_id=marker.producer_id,
        producer_epoch=marker.producer_epoch,
        base_sequence=-1,
        attributes=TRANSACTIONAL | CONTROL,
    )


def parse_marker(header: BatchHeader, records: list[Record]) -> Marker:
    """The marker a control batch holds. Raises :class:`CorruptBatchError` if it holds none: the type
    Kafka gives its other control records (2 and up) are not a transaction's end."""
    if not header.control or len(records) != 1:
        raise CorruptBatchError(f"batch at {header.base_offset} is not one transaction marker")
    key, value = records[0].key, records[0].value
    if key is None or len(key) < _KEY.size or value is None or len(value) < _VALUE.size:
        raise CorruptBatchError(f"marker at {header.base_offset}: key or value too short")
    _, kind = _KEY.unpack_from(key)
    if kind not in (ControlType.ABORT, ControlType.COMMIT):
        raise CorruptBatchError(f"marker at {header.base_offset}: control type {kind} is not commit or abort")
    _, coordinator_epoch = _VALUE.unpack_from(value)  # later versions may add fields: read the ones known
    return Marker(header.producer_id, header.producer_epoch, ControlType(kind), coordinator_epoch)
