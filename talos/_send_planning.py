"""What ``send`` and ``send_many`` put into a producer's accumulator (both twins; no I/O).

``send``: a record built from the caller's value, key, headers and timestamp (:func:`build_record`), with the
caller's trace context as a header (:func:`with_header`). ``send_many``: the caller's records read once
(values, ``(key, value)`` pairs or :class:`RecordData`), planned per partition (:func:`plan_many`), and queued
batch by batch into the accumulator (:func:`queue_many`), each batch told to answer the call's
:class:`ManyOutcome`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from talos._accumulator import Accumulator, PendingBatch, any_partition, choose_partition, record_sizes
from talos._codec import RecordData
from talos._futures import ManyOutcome
from talos._partitioning import partition_for_key

__all__ = ["Headers", "ManyRecords", "build_record", "plan_many", "queue_many", "with_header"]

Headers = Mapping[str, bytes | str | None] | Sequence[tuple[str, bytes | None]] | None


class _Queueing(Protocol):
    """What queueing reads of a producer (``talos._producer``, which imports this module)."""

    @property
    def _acc(self) -> Accumulator[Any]: ...

    @property
    def _buffer_bytes(self) -> int: ...

    @property
    def _sticky(self) -> dict[str, int]: ...


def build_record(
    value: bytes | str | None, key: bytes | str | None, headers: Headers, timestamp: int | None
) -> RecordData:
    def as_bytes(data: bytes | str | None) -> bytes | None:
        return data.encode() if isinstance(data, str) else data

    if headers is None:
        pairs: list[tuple[str, bytes | None]] = []
    elif isinstance(headers, Mapping):
        pairs = [(k, as_bytes(v)) for k, v in headers.items()]
    else:
        pairs = [(k, as_bytes(v)) for k, v in headers]
    return RecordData(as_bytes(value), as_bytes(key), pairs, timestamp)


def with_header(headers: Headers, name: str, value: str) -> Headers:
    """``headers`` plus ``name: value``, unless the caller set ``name`` itself."""
    if headers is None:
        return [(name, value.encode())]
    items = headers.items() if isinstance(headers, Mapping) else headers
    pairs = [(k, v.encode() if isinstance(v, str) else v) for k, v in items]
    if any(k == name for k, _ in pairs):
        return pairs
    return [*pairs, (name, value.encode())]


ManyRecords = Iterable[bytes | str | tuple[bytes | str | None, bytes | str | None] | RecordData | None]


def _as_bytes(data: object) -> bytes | None:
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, bytes):
        return bytes(data)
    raise TypeError(f"send_many takes keys and values of bytes, str or None, not {type(data).__name__}")


@dataclass(slots=True)
class _Group:
    """Records of one ``send_many`` call bound for one partition (None: the topic's sticky partition, moved on
    as batches fill), in the order given; ``positions`` are their places in the call's list."""

    partition: int | None
    positions: Sequence[int]
    values: list[bytes | None]  # with keys (None: no key) and sizes, encoded without an object per record
    keys: list[bytes | None] | None = None
    sizes: list[int] | None = None
    records: list[RecordData] | None = None  # instead: records with headers or timestamps, queued one by one


def _plain(items: list[Any]) -> tuple[list[bytes | None] | None, list[bytes | None]] | None:
    """``send_many``'s records as (keys, or None when none has one; values); None when one has headers or a
    timestamp."""
    if set(map(type, items)) <= {bytes}:  # values only: nothing to do per record
        return None, items
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    for item in items:
        if isinstance(item, RecordData):
            if item.headers or item.timestamp is not None:
                return None
            key, value = item.key, item.value
        elif isinstance(item, tuple):
            key, value = item
        else:
            key, value = None, item
        keys.append(_as_bytes(key))
        values.append(_as_bytes(value))
    return (keys if any(key is not None for key in keys) else None), values


def _as_record(item: Any) -> RecordData:
    if isinstance(item, RecordData):
        return item
    if isinstance(item, tuple):
        key, value = item
        return RecordData(_as_bytes(value), _as_bytes(key))
    return RecordData(_as_bytes(item))


def plan_many(items: list[Any], partition: int | None, partitions: int, topic: str) -> list[_Group]:
    """Where ``send_many``'s records go (pure; the per-record work is done here, before any lock): all to
    ``partition``; else, when none has a key, to the topic's sticky partition; else each keyed record to its
    key's partition and the others together to one partition, so that each partition gets its records in the
    order given."""
    if partition is not None:
        choose_partition(None, partition, partitions, {}, topic)  # refuses a partition the topic does not have
    plain = _plain(items)
    everything = range(len(items))
    if plain is None:
        records = [_as_record(item) for item in items]
        if partition is not None or all(record.key is None for record in records):
            return [_Group(partition, everything, [], records=records)]
        unkeyed = any_partition(partitions)
        targets = [unkeyed if r.key is None else partition_for_key(r.key, partitions) for r in records]
        return [
            _Group(target, positions, [], records=[records[i] for i in positions])
            for target, positions in _positions_by_partition(targets).items()
        ]
    keys, values = plain
    if keys is None or partition is not None:
        return [_Group(partition, everything, values, keys, record_sizes(keys, values))]
    unkeyed = any_partition(partitions)
    targets = [unkeyed if key is None else partition_for_key(key, partitions) for key in keys]
    groups = []
    for target, positions in _positions_by_partition(targets).items():
        group_keys, group_values = [keys[i] for i in positions], [values[i] for i in positions]
        groups.append(_Group(target, positions, group_values, group_keys, record_sizes(group_keys, group_values)))
    return groups


def _positions_by_partition(targets: list[int]) -> dict[int, list[int]]:
    grouped: dict[int, list[int]] = {}
    for position, target in enumerate(targets):
        grouped.setdefault(target, []).append(position)
    return grouped


def queue_many(
    producer: _Queueing, topic: str, partitions: int, groups: list[_Group], outcome: ManyOutcome
) -> Iterator[None]:
    """Queue planned records into the accumulator, each batch they reach told to answer ``outcome``. Yields
    whenever ``buffer_bytes`` are queued: the twin waits for room (the blocking one releasing its lock), then
    goes on."""
    acc: Accumulator[Any] = producer._acc
    for group in groups:
        if group.records is not None:
            yield from _queue_records(producer, topic, partitions, group, outcome)
            continue
        assert group.sizes is not None
        start, count = 0, len(group.values)
        while start < count:
            while acc.buffered_bytes >= producer._buffer_bytes:
                yield
            target = group.partition
            if target is None:
                target = choose_partition(None, None, partitions, producer._sticky, topic)
            batch, first, end = acc.add_values(
                topic, target, group.keys, group.values, group.sizes, start, time.monotonic()
            )
            outcome.expect()
            batch.waiters.append((outcome, first, group.positions[start:end]))
            if group.partition is None and end < count:  # a full batch: the next records go to another partition
                producer._sticky[topic] = (target + 1) % partitions
            start = end


def _queue_records(
    producer: _Queueing, topic: str, partitions: int, group: _Group, outcome: ManyOutcome
) -> Iterator[None]:
    """:func:`queue_many` for records with headers or timestamps: one by one, as ``send`` queues them."""
    assert group.records is not None
    acc: Accumulator[Any] = producer._acc
    last: PendingBatch[Any] | None = None
    first = 0
    positions: list[int] = []
    for record, position in zip(group.records, group.positions, strict=True):
        while acc.buffered_bytes >= producer._buffer_bytes:
            yield
        target = choose_partition(record.key, group.partition, partitions, producer._sticky, topic)
        batch = acc.add(topic, target, record, time.monotonic())
        index = batch.count - 1
        if batch is last and index == first + len(positions):
            positions.append(position)
            continue
        last, first, positions = batch, index, [position]
        outcome.expect()
        batch.waiters.append((outcome, index, positions))
