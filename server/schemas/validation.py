"""Produce-time validation (a topic's ``value_schema_validation`` / ``key_schema_validation``): every record's value
(key) must carry, in Confluent's framing (magic byte 0, then the schema id as 4 bytes big-endian), the id of a
schema registered under the topic's subject ``<topic>-value`` (``<topic>-key``). A null value (a compacted topic's
tombstone) or key has no schema and passes.

Checked on the partition's owner, which decodes the records of such topics only (the write path of any other
topic never parses records). The ids a subject may carry are kept here for a few seconds; an id that is not
among them sends one fresh question to the registry's coordinator (at most one per subject each half second)
before the record is refused, so a producer that registers and then writes is not refused. A version deleted
since may be taken for those few seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Final
from urllib.parse import quote

from server.broker import Broker, NotOwnerError
from server.errors import ApiError
from server.messaging.forwarder import answer_of
from server.schemas.coordinator import SchemaCoordinator
from server.topics import TopicConfig
from talos import Record, decode_records, iter_batches

__all__ = ["SchemaValidator", "framed_id", "validates"]

_FRESH_S: Final = 5.0
# An id not among a subject's asks the coordinator again, at most this often per subject: records framed with
# ids nobody registered cost no round trip each.
_MISS_S: Final = 0.5
_KEPT: Final = 10_000  # subjects' ids kept at most (then forgotten all at once)
_MAGIC: Final = 0


def validates(config: TopicConfig) -> bool:
    return config.value_schema_validation or config.key_schema_validation


def framed_id(data: bytes | None) -> int | None:
    """The schema id Confluent's framing puts in front of ``data``; None if it has none."""
    if data is None or len(data) < 5 or data[0] != _MAGIC:
        return None
    return int.from_bytes(data[1:5], "big")


class SchemaValidator:
    def __init__(self, broker: Broker, coordinator: SchemaCoordinator) -> None:
        self._broker = broker
        self._coordinator = coordinator
        self._known: dict[tuple[str | None, str], tuple[float, frozenset[int]]] = {}

    async def check(self, config: TopicConfig, batches: Iterable[bytes | bytearray]) -> None:
        """422 SCHEMA_VALIDATION_FAILED naming the first record whose value or key breaks the topic's rule."""
        wanted: dict[str, set[int]] = {"value": set(), "key": set()}
        for index, record in enumerate(_records(batches)):
            for field, on, data in (
                ("value", config.value_schema_validation, record.value),
                ("key", config.key_schema_validation, record.key),
            ):
                if not on or data is None:
                    continue
                schema_id = framed_id(data)
                if schema_id is None:
                    why = f"record {index}'s {field} carries no schema id (Confluent's framing: byte 0, a 4-byte id)"
                    raise _refused(config.name, why)
                wanted[field].add(schema_id)
        for field, ids in wanted.items():
            if ids:
                await self._require(config, field, ids)

    async def _require(self, config: TopicConfig, field: str, ids: set[int]) -> None:
        subject = f"{config.name}-{field}"
        key = (config.tenant, subject)
        known = self._known.get(key)
        now = time.monotonic()
        if known is None or now - known[0] > _FRESH_S or (not ids <= known[1] and now - known[0] > _MISS_S):
            tenant = config.tenant if self._broker.security.enabled else None
            if len(self._known) >= _KEPT:
                self._known.clear()
            known = (now, await self._registered(tenant, subject))
            self._known[key] = known
        missing = sorted(ids - known[1])
        if missing:
            raise _refused(config.name, f"schema id {missing[0]} is not registered under the subject {subject}")

    async def _registered(self, tenant: str | None, subject: str) -> frozenset[int]:
        """The ids of the subject's live versions, from the registry's coordinator (the servers' own request)."""
        owner = await self._coordinator.owner()
        if owner.local:
            try:
                return await self._coordinator.read(lambda r: frozenset(v.id for v in r.live(tenant, subject)))
            except NotOwnerError:
                owner = await self._coordinator.owner()
        reply = await self._broker.forwarder.send(
            owner, "GET", f"/schema-registry/subjects/{quote(subject, safe='')}/ids", query={}, headers={}, body=None
        )
        if reply.status == 404:
            return frozenset()
        return frozenset(int(i) for i in answer_of(reply).get("ids", []))


def _records(batches: Iterable[bytes | bytearray]) -> Iterator[Record]:
    for batch in batches:
        for position, header in iter_batches(batch, verify=False):
            if not header.control:  # a transaction's marker holds no record of the topic's
                yield from decode_records(batch, position, verify=False)


def _refused(topic: str, why: str) -> ApiError:
    return ApiError(422, "SCHEMA_VALIDATION_FAILED", f"topic {topic!r} validates schemas: {why}")
