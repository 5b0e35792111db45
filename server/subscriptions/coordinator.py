"""The subscription coordinator: the server the ring gives ``"__sub:<name>"`` reads the subscription's topic,
hands its messages out one by one to whichever subscribers ask (``pull``), and settles them (``settle``).

Nothing is only in memory. Before a message is handed out, and before an acknowledgement is confirmed, the
subscription's whole state is written to its state topic (``server.subscriptions.records``), all changes
that arrived meanwhile in one write (group commit, as a partition's flush). The writes are an idempotent
producer's, and a coordinator taking a subscription over first bumps that producer's epoch and writes a
fence: a paused old coordinator's next write is refused (``PRODUCER_FENCED``) and it lets go, so two
coordinators never both confirm an acknowledgement.

Dead letters go to ``__sub-dlq.<name>`` before the snapshot that settles them; a coordinator taking over
reads that topic from the offset the last snapshot recorded, so a dead letter written just before a crash
settles its message and is not written twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Iterable

from fencing import OffsetOutOfRangeError
from server import internal_topics, metrics
from server.broker import Broker
from server.cluster import Owner
from server.errors import ApiError, out_of_range
from server.messaging.caller import for_tenant
from server.messaging.fetch import Fetched, decompression_limit, fetch_batches
from server.messaging.records import message_json
from server.partition_quota import check_partition_quota
from server.subscriptions.ledger import DEAD, OK, Ledger
from server.subscriptions.records import (
    ORIGIN_HEADERS,
    Settings,
    Snapshot,
    dead_letter_topic,
    decode,
    fence_record,
    snapshot_record,
    state_topic,
    validate_subscription_name,
)
from server.topics import TopicConfig
from talos import BatchError, Record, RecordData, decode_batches

__all__ = ["Subscription", "SubscriptionCoordinator", "unknown_subscription"]

log = logging.getLogger("talos.subscriptions")

STATE_RETENTION_BYTES = 64 * 1024 * 1024  # the newest snapshot is all a coordinator reads
DEAD_LETTER_RETENTION_MS = 7 * 24 * 3600 * 1000
_READ_BYTES = 1024 * 1024
_BUFFER_BYTES = 32 * 1024 * 1024  # per partition: read but unsettled messages kept in memory
_IDLE_S = 60.0  # a subscription nobody pulled from this long is let go (its readers stop)
_RETRY_S = 0.5


def unknown_subscription(name: str) -> ApiError:
    return ApiError(404, "UNKNOWN_SUBSCRIPTION", f"subscription {name!r} does not exist")


def _unreadable(name: str) -> ApiError:
    return ApiError(503, "SUBSCRIPTION_UNREADABLE", f"subscription {name!r}: no state found; retry", retriable=True)


def _not_coordinator(name: str, owner: Owner) -> ApiError:
    return ApiError(
        503, "NOT_COORDINATOR", f"the ring moved subscription {name!r} to {owner.server_id}; retry", retriable=True
    )


class Subscription:
    """One subscription at its coordinator: the ledgers, the unsettled messages, a reader per partition."""

    def __init__(self, broker: Broker, name: str, snapshot: Snapshot, producer: tuple[int, int], sequence: int) -> None:
        self.broker = broker
        self.name = name
        self.settings = snapshot.settings
        self.tenant = snapshot.tenant
        self.snapshot = snapshot
        self.ledgers = snapshot.ledgers
        self.messages: dict[int, dict[int, Record]] = {p: {} for p in self.ledgers}
        self.buffered: dict[int, int] = dict.fromkeys(self.ledgers, 0)
        self.holders: dict[str, float] = {}  # subscriber -> when it last asked
        self.gone: dict[str, float] = {}  # subscribers that left -> when (a relayed pull may still come)
        self.last_used = time.monotonic()
        self._producer = producer
        self._sequence = sequence  # of the state topic's next write
        self._dead_sequence = 0
        self._dead: list[tuple[int, int]] = []  # (partition, offset) to dead-letter in the next write
        self._settled_since: dict[int, list[int]] = {}
        self._changes = 0
        self._saved = 0
        self._writer: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._readers: list[asyncio.Task[None]] = []
        self._rotation = 0
        self.failed: ApiError | None = None

    # ------------------------------------------------------------------ life

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._readers = [loop.create_task(self._read(p)) for p in sorted(self.ledgers)]

    def grow(self, partitions: int) -> None:
        """The topic has ``partitions`` now: read the new ones from their start."""
        for partition in range(len(self.ledgers), partitions):
            self.ledgers[partition] = Ledger(0)
            self.messages[partition] = {}
            self.buffered[partition] = 0
            self._readers.append(asyncio.get_running_loop().create_task(self._read(partition)))

    async def close(self, error: ApiError) -> None:
        self.failed = self.failed or error
        for reader in self._readers:
            reader.cancel()
        for reader in self._readers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
        self._notify()

    def _notify(self) -> None:
        self._wake.set()
        self._wake = asyncio.Event()
        self._room.set()
        self._room = asyncio.Event()

    # ------------------------------------------------------------------ reading the topic

    async def _read(self, partition: int) -> None:
        ledger = self.ledgers[partition]
        settings = self.settings
        wait_ms = min(10_000, self.broker.config.max_wait_ms)
        while True:
            room = self._room
            if ledger.window >= settings.max_in_flight or self.buffered[partition] >= _BUFFER_BYTES:
                await room.wait()  # until something is settled
                continue
            # The reads are the tenant's: billed to it, under its fetch quota.
            caller = for_tenant(self.tenant)
            try:
                try:
                    fetched = await fetch_batches(  # decided transactions only: no aborted message is pushed
                        self.broker, caller, settings.topic, partition, ledger.end, _READ_BYTES, wait_ms, committed=True
                    )
                except OffsetOutOfRangeError as exc:
                    raise out_of_range(exc) from None
            except ApiError as exc:
                await self._read_failed(partition, exc)
                continue
            except Exception:  # a reader that died would leave its partition unread for good
                log.exception("subscription %s: reading %s/%d", self.name, settings.topic, partition)
                await asyncio.sleep(_RETRY_S)
                continue
            try:
                self._admit(partition, fetched)
            except BatchError:  # an unreadable batch header: nothing after it can be found in this answer
                log.exception("subscription %s: %s/%d at %d", self.name, settings.topic, partition, ledger.end)
                await asyncio.sleep(_RETRY_S)

    async def _read_failed(self, partition: int, exc: ApiError) -> None:
        ledger = self.ledgers[partition]
        if exc.code == "OFFSET_OUT_OF_RANGE":
            earliest, latest = int(str(exc.details.get("earliest", 0))), int(str(exc.details.get("latest", 0)))
            if ledger.end < earliest:
                lost = ledger.lose_below(earliest)
                for offset in lost:
                    self.messages[partition].pop(offset, None)
                log.warning(
                    "subscription %s: %s/%d: retention removed offsets below %d (%d never settled)",
                    self.name,
                    self.settings.topic,
                    partition,
                    earliest,
                    len(lost),
                )
                await self._save()
                return
            if ledger.end > latest:  # the topic was made again: start where it is
                log.warning("subscription %s: %s/%d is behind its ledger", self.name, self.settings.topic, partition)
        elif exc.status != 404:
            log.info("subscription %s: reading %s/%d: %s", self.name, self.settings.topic, partition, exc)
        retry_after = exc.headers.get("Retry-After") or exc.headers.get("retry-after")
        await asyncio.sleep(float(retry_after) if retry_after else _RETRY_S if exc.status != 404 else 5.0)

    def _admit(self, partition: int, fetched: Fetched) -> None:
        ledger = self.ledgers[partition]
        held = self.messages[partition]
        added = False
        limit = decompression_limit(self.broker.config)
        for decoded in decode_batches(fetched.body, verify=False, max_decompressed=limit):
            if decoded.header.control:  # a transaction's marker: no message to hand out
                ledger.skip_to(decoded.header.next_offset)
                continue
            if decoded.error is not None:  # a damaged stored batch: nobody can read it, so nobody gets it
                for offset in range(max(decoded.header.base_offset, ledger.end), decoded.header.next_offset):
                    if ledger.admit(offset, None):  # not one settled already (by a recovered lease's ack)
                        ledger.settle(offset, DEAD)
                continue
            for record in decoded.records:
                if record.offset >= ledger.end and ledger.admit(record.offset, record.key):
                    held[record.offset] = record
                    self.buffered[partition] += len(record.value or b"") + len(record.key or b"")
                    added = True
                    if ledger.entries[record.offset].dead:
                        # Recovered waiting for its dead letter: the snapshot was written while the letter
                        # was, and the crash came before it was. Only now is its record here to write.
                        self._dead.append((partition, record.offset))
        if fetched.next_offset > ledger.end:  # past an aborted transaction's batches, left out at the end
            ledger.skip_to(fetched.next_offset)
        if added:
            self._notify()

    # ------------------------------------------------------------------ handing out

    async def pull(self, holder: str, limit: int, wait_s: float) -> list[dict[str, object]]:
        """Up to ``limit`` messages leased to ``holder``, waiting up to ``wait_s`` for one; each is in the
        state topic as delivered before it is returned."""
        deadline = time.monotonic() + wait_s
        while True:
            if self.failed is not None:
                raise self.failed
            if holder in self.gone:  # its connection closed while this pull was relayed: lease it nothing
                return []
            self.holders[holder] = self.last_used = time.monotonic()
            with contextlib.suppress(ApiError):  # a deleted topic: its readers wait
                self.grow(self.broker.topic(self.settings.topic).partitions)
            wake = self._wake
            out = self._take(holder, limit)
            if out or self._dead:
                await self._save()
            if out:
                return out
            now = time.monotonic()
            if now >= deadline:
                return []
            timeout = deadline - now
            timed = self._next_change_ms()
            if timed is not None:
                timeout = min(timeout, max(0.0, timed / 1000 - time.time()) + 0.001)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout)

    def _take(self, holder: str, limit: int) -> list[dict[str, object]]:
        settings = self.settings
        now_ms = int(time.time() * 1000)
        order = sorted(self.ledgers)
        if not order:
            return []
        self._rotation = (self._rotation + 1) % len(order)
        out: list[dict[str, object]] = []
        for partition in order[self._rotation :] + order[: self._rotation]:
            if len(out) >= limit:
                break
            taken = self.ledgers[partition].take(
                now_ms,
                holder,
                limit - len(out),
                ack_timeout_ms=settings.ack_timeout_ms,
                max_deliveries=settings.max_deliveries,
                key_ordered=settings.key_ordered,
            )
            held = self.messages[partition]
            trace = self.broker.trace
            for offset, receipt in taken.leased:
                item = message_json(held[offset])
                item.update(topic=settings.topic, partition=partition, delivery=receipt)
                out.append(item)
                trace.record(
                    settings.topic,
                    partition,
                    offset,
                    "delivered",
                    subscription=self.name,
                    subscriber=holder,
                    delivery=receipt,
                )
            self._dead.extend((partition, offset) for offset in taken.dead)
        return out

    def _next_change_ms(self) -> int | None:
        now_ms = int(time.time() * 1000)
        times = [t for t in (ledger.next_change_ms(now_ms) for ledger in self.ledgers.values()) if t is not None]
        return min(times) if times else None

    # ------------------------------------------------------------------ settling

    async def settle(self, holder: str, op: str, items: Iterable[tuple[int, int, int]], ms: int = 0) -> list[str]:
        """Acknowledge (``ack``), give back (``nack``, delivered again after ``ms``) or extend (``extend``: the
        lease ends ``ms``, 0: the ack timeout, from now) delivered messages, each ``(partition, offset,
        delivery)``; a status for each: ``ok``, ``stale`` (that delivery is over) or ``unknown`` (never
        delivered, or no such partition). Confirmed once written. Leases recovered from the snapshot are
        settled before the readers reach them (``Ledger``)."""
        if self.failed is not None:
            raise self.failed
        if op == "extend" and not ms:
            ms = self.settings.ack_timeout_ms
        self.holders[holder] = self.last_used = time.monotonic()
        now_ms = int(time.time() * 1000)
        results = []
        changed = False
        for partition, offset, receipt in items:
            ledger = self.ledgers.get(partition)
            if ledger is None:
                results.append("unknown")
                continue
            if op == "ack":
                settled_before = offset in ledger.settled or offset < ledger.floor
                status = ledger.ack(offset, receipt)
                if status == OK and not settled_before:
                    self._drop(partition, offset)
                    self.broker.trace.record(
                        self.settings.topic,
                        partition,
                        offset,
                        "acked",
                        subscription=self.name,
                        subscriber=holder,
                        delivery=receipt,
                    )
                    self._settled_since.setdefault(partition, []).append(offset)
                    changed = True
            elif op == "nack":
                status = ledger.nack(offset, receipt, now_ms, ms)
                changed = changed or status == OK
            else:
                status = ledger.extend(offset, receipt, now_ms, ms)
                changed = changed or status == OK
            results.append(status)
        if changed:
            metrics.subscription_settled(op, results.count(OK))
            self._notify()
            await self._save()
        return results

    def release(self, holder: str) -> int:
        """A subscriber went away: what it held is ready for the others at once (not written: after a
        crash its leases run out instead)."""
        self.holders.pop(holder, None)
        self.gone[holder] = time.monotonic()
        now_ms = int(time.time() * 1000)
        count = sum(ledger.release(holder, now_ms) for ledger in self.ledgers.values())
        if count:
            self._notify()
        return count

    def _drop(self, partition: int, offset: int) -> None:
        record = self.messages[partition].pop(offset, None)
        if record is not None:
            self.buffered[partition] -= len(record.value or b"") + len(record.key or b"")

    # ------------------------------------------------------------------ writing the state

    async def _save(self) -> None:
        """Return once the state as it is now is in the state topic (one write for everyone waiting)."""
        self._changes += 1
        target = self._changes
        while self._saved < target:
            if self.failed is not None:
                raise self.failed
            if self._writer is None or self._writer.done():
                self._writer = asyncio.get_running_loop().create_task(self._write())
            await asyncio.shield(self._writer)

    async def _write(self) -> None:
        version = self._changes
        try:
            if self._dead:
                await self._dead_letter()
            settled_since, self._settled_since = self._settled_since, {}
            producer = (*self._producer, self._sequence)
            record = snapshot_record(self.snapshot, settled_since)
            await internal_topics.append(self.broker, state_topic(self.name), 0, [record], producer=producer)
            self._sequence += 1
            self._saved = version
        except ApiError as exc:
            log.warning("subscription %s: state not written, letting it go: %s", self.name, exc)
            self.failed = ApiError(503, "SUBSCRIPTION_MOVED", f"subscription {self.name!r}: {exc}", retriable=True)
            raise self.failed from exc

    async def _dead_letter(self) -> None:
        dead, self._dead = self._dead, []
        records = []
        counts = []
        for partition, offset in dead:
            record = self.messages[partition].get(offset)
            entry = self.ledgers[partition].entries.get(offset)
            deliveries = entry.deliveries if entry is not None else 0
            counts.append(deliveries)
            origin = (self.settings.topic, str(partition), str(offset), str(deliveries))
            headers = tuple(record.headers if record else ()) + tuple(
                (name, value.encode()) for name, value in zip(ORIGIN_HEADERS, origin, strict=True)
            )
            records.append(RecordData(record.value if record else None, record.key if record else None, headers))
        producer = (*self._producer, self._dead_sequence)
        first = await internal_topics.append(self.broker, dead_letter_topic(self.name), 0, records, producer=producer)
        self._dead_sequence += len(records)
        self.snapshot.dead_letter_end = max(self.snapshot.dead_letter_end, first + len(records))
        for (partition, offset), deliveries in zip(dead, counts, strict=True):
            self.ledgers[partition].settle(offset, DEAD)
            self._drop(partition, offset)
            self.broker.trace.record(
                self.settings.topic,
                partition,
                offset,
                "dead_lettered",
                subscription=self.name,
                dead_letter_topic=dead_letter_topic(self.name),
                deliveries=deliveries,
            )
            self._settled_since.setdefault(partition, []).append(offset)
        metrics.subscription_dead_lettered(len(records))
        self._notify()

    # ------------------------------------------------------------------ describing

    def describe(self) -> dict[str, object]:
        rows = []
        for partition in sorted(self.ledgers):
            ledger = self.ledgers[partition]
            rows.append(
                {
                    "partition": partition,
                    "floor": ledger.floor,
                    "read_to": ledger.end,
                    "unsettled": ledger.unsettled(),
                    "leased": ledger.leased(),
                }
            )
        return {"subscribers": len(self.holders), "partitions": rows}


class SubscriptionCoordinator:
    """The subscriptions this server coordinates, loaded on first use and let go when the ring moves them."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._active: dict[str, Subscription] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        broker.ownership_listeners.append(self.release_unowned)

    def owner(self, name: str) -> Owner:
        return self._broker.owner_of(f"__sub:{name}")

    def config_of(self, name: str) -> TopicConfig:
        """The subscription's state topic (its tenant is the subscription's); 404 if there is none."""
        validate_subscription_name(name)
        try:
            return self._broker.topic(state_topic(name))
        except ApiError as exc:
            if exc.status == 404:
                raise unknown_subscription(name) from None
            raise

    async def release_unowned(self) -> None:
        registered = self._broker.cluster is None or self._broker.cluster.registered
        for name in list(self._active):
            try:
                local = registered and self.owner(name).local
            except ApiError:
                local = False
            if not local:
                log.info("subscription %s: no longer its coordinator", name)
                await self._let_go(name, _not_coordinator(name, self.owner(name)) if registered else None)

    async def _let_go(self, name: str, error: ApiError | None) -> None:
        active = self._active.pop(name, None)
        if active is not None:
            await active.close(error or ApiError(503, "NOT_COORDINATOR", "this server left the ring", retriable=True))
        metrics.subscriptions_coordinated(len(self._active))

    async def get(self, name: str) -> Subscription:
        """The subscription, loaded here if this server is its coordinator (503 if another is)."""
        owner = self.owner(name)
        if not owner.local:
            raise _not_coordinator(name, owner)
        active = self._active.get(name)
        if active is not None and active.failed is None:
            return active
        async with self._locks.setdefault(name, asyncio.Lock()):
            active = self._active.get(name)
            if active is not None and active.failed is not None:
                await self._let_go(name, None)
                active = None
            if active is None:
                active = await self._load(name)
                self._active[name] = active
                active.start()
                metrics.subscriptions_coordinated(len(self._active))
            return active

    # ------------------------------------------------------------------ making and loading

    async def create(self, name: str, settings: Settings, tenant: str | None) -> dict[str, object]:
        validate_subscription_name(name)
        broker = self._broker
        topic = broker.topic(settings.topic)  # 404 for an unknown topic
        owner = self.owner(name)
        if not owner.local:
            raise _not_coordinator(name, owner)
        async with self._locks.setdefault(name, asyncio.Lock()):
            try:
                broker.topic(state_topic(name))
            except ApiError as exc:
                if exc.status != 404:
                    raise
            else:
                raise ApiError(409, "SUBSCRIPTION_EXISTS", f"subscription {name!r} exists")
            check_partition_quota(broker, tenant, None, 2)
            now_ms = int(time.time() * 1000)
            for config in (
                TopicConfig(
                    state_topic(name), 1, retention_bytes=STATE_RETENTION_BYTES, created_ms=now_ms, tenant=tenant
                ),
                TopicConfig(
                    dead_letter_topic(name), 1, retention_ms=DEAD_LETTER_RETENTION_MS, created_ms=now_ms, tenant=tenant
                ),
            ):
                await internal_topics.ensure(broker, config)
            ledgers = {}
            for partition in range(topic.partitions):
                earliest, latest = await internal_topics.bounds(broker, settings.topic, partition)
                ledgers[partition] = Ledger(earliest if settings.start == "earliest" else latest)
            producer = await broker.io(broker.producer_ids.allocate, None, None)
            snapshot = Snapshot(settings, tenant, producer[0], ledgers)
            await internal_topics.append(
                broker, state_topic(name), 0, [snapshot_record(snapshot, {})], producer=(*producer, 0)
            )
            active = Subscription(broker, name, snapshot, producer, 1)
            self._active[name] = active
            active.start()
            metrics.subscriptions_coordinated(len(self._active))
            log.info("subscription %s: made on %s (%s)", name, settings.topic, settings)
            return self._describe(name, active)

    async def _load(self, name: str) -> Subscription:
        broker = self._broker
        topic = state_topic(name)
        self.config_of(name)
        earliest, latest = await internal_topics.bounds(broker, topic, 0)
        newest = await self._newest_snapshot(topic, earliest, latest)
        if newest is None:
            raise ApiError(
                503, "SUBSCRIPTION_UNREADABLE", f"subscription {name!r}: no state found; retry", retriable=True
            )
        # Fence every older coordinator first, then read what it wrote before the fence.
        producer = await broker.io(broker.producer_ids.allocate, newest.producer_id, None)
        fence = await internal_topics.append(broker, topic, 0, [fence_record(*producer)], producer=(*producer, 0))
        snapshot = await self._newest_snapshot(topic, earliest, fence)
        if snapshot is None:
            raise ApiError(
                503, "SUBSCRIPTION_UNREADABLE", f"subscription {name!r}: no state found; retry", retriable=True
            )
        snapshot.producer_id = producer[0]
        partitions = broker.topic(snapshot.settings.topic).partitions
        for partition in range(partitions):  # partitions added since: read from their start
            snapshot.ledgers.setdefault(partition, Ledger(0))
        await self._settle_dead_letters(name, snapshot)
        active = Subscription(broker, name, snapshot, producer, 1)
        log.info(
            "subscription %s: coordinating (epoch %d, floors %s)",
            name,
            producer[1],
            {p: ledger.floor for p, ledger in snapshot.ledgers.items()},
        )
        return active

    async def _newest_snapshot(self, topic: str, earliest: int, end: int) -> Snapshot | None:
        """The last snapshot below ``end`` (reading back in growing steps past fences)."""
        step = 16
        stop = end
        while stop > earliest:
            start = max(earliest, stop - step)
            records = await internal_topics.read_all(self._broker, topic, 0, start=start)
            for offset, _key, value in reversed(records):
                if offset < stop:
                    snapshot = decode(value)
                    if snapshot is not None:
                        return snapshot
            stop, step = start, step * 4
        return None

    async def _settle_dead_letters(self, name: str, snapshot: Snapshot) -> None:
        """Dead letters written after the snapshot (just before a crash) settle their messages."""
        _, end = await internal_topics.bounds(self._broker, dead_letter_topic(name), 0)
        if end <= snapshot.dead_letter_end:
            return
        records = await internal_topics.read_records(
            self._broker, dead_letter_topic(name), 0, start=snapshot.dead_letter_end
        )
        for record in records:
            headers = {k: (v or b"").decode(errors="replace") for k, v in record.headers}
            try:
                partition, offset = int(headers[ORIGIN_HEADERS[1]]), int(headers[ORIGIN_HEADERS[2]])
            except (KeyError, ValueError):
                continue
            ledger = snapshot.ledgers.get(partition)
            if ledger is not None and offset >= ledger.floor:
                ledger.settle(offset, DEAD)
        snapshot.dead_letter_end = end

    # ------------------------------------------------------------------ the API

    async def describe(self, name: str) -> dict[str, object]:
        return self._describe(name, await self.get(name))

    def _describe(self, name: str, active: Subscription) -> dict[str, object]:
        return {
            "name": name,
            "tenant": active.tenant,
            "coordinator": self._broker.config.member_id,
            "dead_letter_topic": dead_letter_topic(name),
            **active.settings.to_json(),
            **active.describe(),
        }

    async def delete(self, name: str) -> None:
        self.config_of(name)
        await self._let_go(name, unknown_subscription(name))
        for topic in (state_topic(name), dead_letter_topic(name)):
            with contextlib.suppress(ApiError):
                await self._broker.delete_topic(topic)

    async def maintain(self) -> None:
        """Let go of subscriptions nobody used for a while (their readers stop; the state is written)."""
        now = time.monotonic()
        for name, active in list(self._active.items()):
            for holder, seen in list(active.holders.items()):
                if now - seen > _IDLE_S:
                    active.holders.pop(holder, None)
            for holder, left in list(active.gone.items()):
                if now - left > _IDLE_S:  # far longer than any pull waits
                    del active.gone[holder]
            if active.failed is not None or (not active.holders and now - active.last_used > _IDLE_S):
                await self._let_go(name, None)

    async def close(self) -> None:
        for name in list(self._active):
            await self._let_go(name, None)


def new_holder() -> str:
    return uuid.uuid4().hex[:16]
