"""The group coordinator: the server the ring gives ``"__group:<name>"`` keeps the group's members and
locks in memory (:class:`GroupState`) and its committed offsets in ``__consumer_offsets``.

Nothing else is kept: when the ring moves the key, or this server dies, the next coordinator reads the
group's records back (:func:`fold`), waits out the old locks (``grace_until``) and goes on. Each group's
calls are serialised by an asyncio lock, so a state change and the record that reports it stay in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from typing import Any

from fencing import OffsetOutOfRangeError
from server import internal_topics, metrics
from server.broker import Broker
from server.cluster import Owner
from server.errors import ApiError
from server.groups.catalog import GroupCatalog, StorageGroupCatalog, ZkGroupCatalog
from server.groups.offsets import (
    OFFSETS_RETENTION_MS,
    OFFSETS_TOPIC,
    PendingCommit,
    commit_record,
    decided_order,
    fold,
    group_record,
    kafka_record,
    offsets_partition,
    snapshot_record,
)
from server.groups.state import BROADCAST, EXCLUSIVE, GroupState, Member, OffsetKey, tp_json
from server.messaging.caller import SERVERS, for_tenant
from server.messaging.fetch import fetch_batches
from server.messaging.offsets import offsets as partition_offsets
from server.messaging.produce import produce_batch
from server.partition_quota import check_partition_quota
from server.topics import TopicConfig
from talos import encode_batch, iter_batches
from talos._codec import TRANSACTIONAL

__all__ = ["DEAD_LETTER_PREFIX", "GROUP_NAME", "RETRY_PREFIX", "GroupCoordinator", "validate_group_name"]

log = logging.getLogger("talos.groups")

GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
RETRY_PREFIX = "__retry."
DEAD_LETTER_PREFIX = "__dlq."
_GRACE_MARGIN_S = 1.0  # beyond the largest session: a heartbeat the old coordinator answered late
_SIDE_TOPIC_RETENTION_MS = 7 * 24 * 3600 * 1000
# The group catalog (ZooKeeper, or the storage standalone) is waited for at most this long, on the I/O threads:
# a join holds its group's lock meanwhile, and a catalog that does not answer must not hold it for ever.
_CATALOG_WAIT_S = 10.0

TopicPartition = tuple[str, int]


def validate_group_name(name: str) -> str:
    if not GROUP_NAME.match(name):
        raise ApiError(
            400,
            "INVALID_GROUP_NAME",
            f"invalid group name {name[:300]!r}: 1-200 characters of A-Z a-z 0-9 . _ -, not starting with . _ -",
        )
    return name


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dead_letter_topic(group: str) -> str:
    return DEAD_LETTER_PREFIX + group


class GroupCoordinator:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._groups: dict[str, GroupState] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._snapshot_at: dict[str, float] = {}
        # Offsets committed in transactions not decided yet, per group and producer id (``decided_order``)
        self._pending: dict[str, dict[int, PendingCommit]] = {}
        self._catalog: GroupCatalog
        if broker.cluster is not None:
            self._catalog = ZkGroupCatalog(broker.cluster.zk)
        else:
            self._catalog = StorageGroupCatalog(broker.fs, broker.root)
        self._registered: set[str] = set()
        self._registering: dict[str, asyncio.Future[None]] = {}  # at most one catalog write per name at a time
        broker.ownership_listeners.append(self.release_unowned)

    def owner(self, group: str) -> Owner:
        return self._broker.owner_of(f"__group:{group}")

    # ---------------------------------------------------------------- loading and ownership

    async def release_unowned(self) -> None:
        """Forget the groups the ring gave another server (or all, when the session is lost)."""
        registered = self._broker.cluster is None or self._broker.cluster.registered
        for name in list(self._groups):
            try:
                local = registered and self.owner(name).local
            except ApiError:
                local = False
            if not local:
                log.info("group %s: no longer its coordinator", name)
                self._groups.pop(name, None)
                self._pending.pop(name, None)
        metrics.groups_coordinated(len(self._groups))

    async def _offsets_topic(self) -> TopicConfig:
        config = TopicConfig(
            OFFSETS_TOPIC,
            self._broker.config.group_offsets_partitions,
            retention_ms=OFFSETS_RETENTION_MS,
            created_ms=int(time.time() * 1000),
        )
        return await internal_topics.ensure(self._broker, config)

    async def _append(self, group: str, record: Any) -> None:
        config = await self._offsets_topic()
        await internal_topics.append(self._broker, OFFSETS_TOPIC, offsets_partition(group, config.partitions), [record])

    async def _load(self, name: str) -> GroupState:
        config = await self._offsets_topic()
        partition = offsets_partition(name, config.partitions)
        batches = await internal_topics.read_batches(self._broker, OFFSETS_TOPIC, partition)
        ordered, pending = decided_order(name, batches)
        recovered = fold(name, ordered)
        self._pending[name] = pending
        now = time.monotonic()
        active = recovered.members > 0
        state = GroupState(
            name,
            generation=recovered.generation + 1,
            mode=recovered.mode if active else None,
            offsets=recovered.offsets,
            grace_until=now + recovered.session_s + _GRACE_MARGIN_S if active else 0.0,
            kafka=recovered.kafka,
        )
        log.info(
            "group %s: coordinating (generation %d, %d committed offsets, %s)",
            name,
            state.generation,
            len(state.offsets),
            f"waiting {recovered.session_s + _GRACE_MARGIN_S:.1f}s for old locks" if active else "no members",
        )
        if not pending:  # (a snapshot must not pass over undecided transactions' offsets: see maintain)
            await self._append(name, snapshot_record(state))
            self._snapshot_at[name] = now
        return state

    def loaded(self, name: str) -> GroupState | None:
        """The group's state if this server coordinates it and holds it in memory now, for reading only (the
        console's list shows it without loading every group); None otherwise."""
        return self._groups.get(name)

    @contextlib.asynccontextmanager
    async def _group(self, name: str, *, create: bool = True) -> AsyncIterator[GroupState]:
        validate_group_name(name)
        owner = self.owner(name)
        if not owner.local:
            raise ApiError(
                503, "NOT_COORDINATOR", f"the ring moved group {name!r} to {owner.server_id}; retry", retriable=True
            )
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            state = self._groups.get(name)
            if state is None:
                if not create and name not in await self.list():
                    raise ApiError(404, "UNKNOWN_GROUP", f"group {name!r} does not exist")
                state = await self._load(name)
                self._groups[name] = state
                metrics.groups_coordinated(len(self._groups))
            if self._pending.get(name):  # offsets of transactions decided since: every answer shows them
                await self._resolve(name, state)
            generation = state.generation
            try:
                yield state
            finally:
                if state.generation != generation:
                    metrics.group_rebalanced()
                    try:
                        await self._append(name, group_record(state))
                    except ApiError as exc:  # advisory: the next coordinator only waits longer or shorter
                        log.warning("group %s: could not record generation %d: %s", name, state.generation, exc)

    def _partitions(self, topics: Iterable[str]) -> dict[str, int]:
        counts = {}
        for topic in topics:
            try:
                # Known here (the watch; a join looks its topics up): no ZooKeeper read per heartbeat for a deleted one.
                counts[topic] = self._broker.topic(topic, known_only=True).partitions
            except ApiError:
                counts[topic] = 0  # deleted: nothing to assign
        return counts

    def _answer(self, state: GroupState, member: Member) -> dict[str, object]:
        exclusive = state.mode == EXCLUSIVE
        return {
            **state.answer(member),
            "retry_topic": retry_topic(state.name) if exclusive else None,
            "dead_letter_topic": dead_letter_topic(state.name) if exclusive else None,
        }

    async def _ensure_side_topics(self, name: str, tenant: str | None) -> None:
        """The group's retry and dead-letter topics, made on its first exclusive join: the group's tenant
        owns them (what is written there is billed to it), and they count against its partition quota,
        checked before either is made."""
        missing = []
        for side in (retry_topic(name), dead_letter_topic(name)):
            try:
                self._broker.topic(side)
            except ApiError as exc:
                if exc.status != 404:
                    raise
                missing.append(TopicConfig(side, 1, retention_ms=_SIDE_TOPIC_RETENTION_MS, tenant=tenant))
        if missing:
            check_partition_quota(self._broker, tenant, None, sum(config.partitions for config in missing))
        for config in missing:
            await internal_topics.ensure(self._broker, config)

    # ---------------------------------------------------------------- the API

    async def join(
        self,
        name: str,
        *,
        tenant: str | None = None,
        topics: list[str],
        session_s: float,
        mode: str,
        instance: str | None,
        owned: list[TopicPartition],
    ) -> dict[str, object]:
        validate_group_name(name)
        config = self._broker.config
        if not config.group_min_session_s <= session_s <= config.group_max_session_s:
            raise ApiError(
                400,
                "INVALID_REQUEST",
                f"session_timeout_ms must be between {int(config.group_min_session_s * 1000)} and "
                f"{int(config.group_max_session_s * 1000)}",
            )
        for topic in topics:
            self._broker.topic(topic)  # 404 for an unknown topic
        subscribed = list(dict.fromkeys(topics))
        if mode == EXCLUSIVE:
            await self._ensure_side_topics(name, tenant)
            subscribed.append(retry_topic(name))
        member_id = f"{instance or 'member'}-{uuid.uuid4().hex[:12]}"
        async with self._group(name) as state:
            member = state.join(
                time.monotonic(),
                member_id=member_id,
                instance=instance or member_id,
                topics=subscribed,
                session_s=session_s,
                mode=mode,
                partitions=self._partitions(state.topics() | set(subscribed)),
                claims=owned,
            )
            await self.register(name)
            log.info("group %s: %s joined (generation %d)", name, member_id, state.generation)
            return self._answer(state, member)

    async def register(self, name: str) -> None:
        """List the group (``GET /v1/groups``), once it is used. Waited for at most ``_CATALOG_WAIT_S``: then the
        caller goes on (the group is listed by a later call; the write in flight is not sent again meanwhile)."""
        if name in self._registered:
            return
        writing = self._registering.get(name)
        if writing is None or writing.done():
            writing = self._registering[name] = asyncio.ensure_future(self._broker.io(self._catalog.register, name))
            writing.add_done_callback(_retrieve)
        try:
            await asyncio.wait_for(asyncio.shield(writing), _CATALOG_WAIT_S)
        except TimeoutError:
            log.warning("group %s: the group catalog did not answer within %g s; listed later", name, _CATALOG_WAIT_S)
            return
        self._registered.add(name)
        self._registering.pop(name, None)

    async def kafka_membership(self, name: str) -> dict[str, object] | None:
        """The group's Kafka members as last recorded (None: none recorded), for a listener that coordinates the
        group and has no members of it in memory (it restarted, or the ring moved the group here). 404 for a group
        never used (nothing is loaded or made for it)."""
        async with self._group(name, create=False) as state:
            return state.kafka

    async def record_kafka_membership(self, name: str, membership: dict[str, object]) -> None:
        """Record the group's Kafka members (a rebalance completed, or the last member left), durably."""
        async with self._group(name) as state:
            await self._append(name, kafka_record(name, membership))
            state.kafka = membership

    async def heartbeat(self, name: str, member_id: str, owned: list[TopicPartition]) -> dict[str, object]:
        async with self._group(name) as state:
            member = state.heartbeat(time.monotonic(), member_id, owned, self._partitions(state.topics()))
            return self._answer(state, member)

    async def leave(self, name: str, member_id: str) -> None:
        async with self._group(name) as state:
            state.leave(time.monotonic(), member_id)
            log.info("group %s: %s left (generation %d)", name, member_id, state.generation)

    async def commit(
        self, name: str, member_id: str | None, items: list[tuple[TopicPartition, int, int | None]]
    ) -> dict[str, object]:
        await self.register(name)  # listed once used, also by a commit alone (found again after a restart)
        async with self._group(name) as state:
            instance = state.check_commit(time.monotonic(), member_id, [(tp, gen) for tp, _, gen in items])
            offsets: dict[OffsetKey, int] = {(instance, tp[0], tp[1]): offset for tp, offset, _ in items}
            await self._append(name, commit_record(name, offsets))
            for held in self._pending.get(name, {}).values():
                held.supersede(offsets)  # written after them: it wins, whatever their transactions decide
            for key, offset in offsets.items():  # the message trace: what this commit moved past
                before = state.offsets.get(key, 0)
                if offset > before:
                    self._broker.trace.record(
                        key[1], key[2], before, "committed", last=offset - 1, group=name, member=member_id
                    )
            state.offsets.update(offsets)
            metrics.group_committed()
            return {"committed": [{**tp_json((t, p)), "offset": o} for (_, t, p), o in offsets.items()]}

    async def commit_in_transaction(
        self,
        name: str,
        member_id: str | None,
        items: list[tuple[TopicPartition, int, int | None]],
        *,
        producer_id: int,
        producer_epoch: int,
        transactional_id: str,
        tenant: str | None,
    ) -> dict[str, object]:
        """Offsets committed in a producer's transaction (Kafka's TxnOffsetCommit): written to the group's
        offsets partition in a transactional batch of the producer (which its transaction must have added:
        AddOffsetsToTxn), pending until its marker lands there, then committed or dropped with it."""
        await self.register(name)
        async with self._group(name) as state:
            instance = state.check_commit(time.monotonic(), member_id, [(tp, gen) for tp, _, gen in items])
            offsets: dict[OffsetKey, int] = {(instance, tp[0], tp[1]): offset for tp, offset, _ in items}
            config = await self._offsets_topic()
            batch = encode_batch(
                [commit_record(name, offsets)],
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=-1,  # Kafka's too: fenced by its epoch, not deduplicated
                attributes=TRANSACTIONAL,
            )
            stored = await produce_batch(
                self._broker,
                for_tenant(tenant),
                OFFSETS_TOPIC,
                offsets_partition(name, config.partitions),
                bytearray(batch),
                transactional_id=transactional_id,
            )
            held = self._pending.setdefault(name, {}).setdefault(producer_id, PendingCommit(stored.base_offset))
            held.offsets.update(offsets)
            return {"pending": [{**tp_json((t, p)), "offset": o} for (_, t, p), o in offsets.items()]}

    async def unstable_offsets(self, name: str) -> set[TopicPartition]:
        """The partitions with offsets committed in a transaction not decided yet (OffsetFetch's
        ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for them, and the client asks again)."""
        async with self._group(name, create=False):
            return {(t, p) for held in self._pending.get(name, {}).values() for (_, t, p) in held.offsets}

    async def _resolve(self, name: str, state: GroupState) -> None:
        """Settle the group's pending transactional commits whose transaction is decided: the offsets
        partition's last stable offset has passed their first batch, which a read-committed read then holds
        (committed) or leaves out (aborted)."""
        pending = self._pending.get(name)
        if not pending:
            return
        config = await self._offsets_topic()
        partition = offsets_partition(name, config.partitions)
        for producer_id, held in list(pending.items()):
            try:
                read = await fetch_batches(
                    self._broker, SERVERS, OFFSETS_TOPIC, partition, held.first_offset, 1, committed=True
                )
            except OffsetOutOfRangeError:  # retention removed it: decided long ago, its effect was recorded
                del pending[producer_id]
                continue
            if read.last_stable_offset <= held.first_offset:
                continue  # still open
            first = next(iter_batches(read.body, verify=False), None) if read.body else None
            if first is not None and first[1].base_offset == held.first_offset:
                state.offsets.update(held.offsets)
            del pending[producer_id]

    async def offsets(self, name: str, instance: str | None) -> dict[str, object]:
        async with self._group(name, create=False) as state:
            rows = [
                {"topic": t, "partition": p, "offset": o, **({"instance": i} if i else {})}
                for (i, t, p), o in sorted(state.offsets.items())
                if instance is None or i == instance
            ]
            return {"group": name, "offsets": rows}

    async def reset(
        self, name: str, *, topic: str, partition: int | None, to: str, offset: int | None, timestamp: int | None
    ) -> dict[str, object]:
        config = self._broker.topic(topic)
        if partition is not None:
            self._broker.check_partition(topic, partition)
        indexes = range(config.partitions) if partition is None else [partition]
        async with self._group(name) as state:
            state.check_commit(time.monotonic(), None, [])  # 409 while members are active
            targets: dict[OffsetKey, int] = {}
            for index in indexes:
                earliest, latest = await internal_topics.bounds(self._broker, topic, index)
                if to == "earliest":
                    value = earliest
                elif to == "latest":
                    value = latest
                elif to == "timestamp":
                    found = await partition_offsets(self._broker, SERVERS, topic, index, timestamp=timestamp)
                    value = int(found["offset"])
                else:
                    value = min(max(int(offset or 0), earliest), latest)
                targets[("", topic, index)] = value
            await self._append(name, commit_record(name, targets))
            state.offsets.update(targets)
            return {"group": name, "offsets": [{**tp_json((t, p)), "offset": o} for (_, t, p), o in targets.items()]}

    async def _check_listed(self, name: str) -> None:
        """404 unless the group was used (joined or committed to: listed), whether or not its state is loaded here
        (a lookup may load a group nobody used)."""
        validate_group_name(name)
        if name not in self._registered and name not in await self.list():
            raise ApiError(404, "UNKNOWN_GROUP", f"group {name!r} does not exist")

    async def delete(self, name: str) -> None:
        """Forget the group (Kafka's DeleteGroups): its committed offsets, and its name from the listing. 409
        ``GROUP_NOT_EMPTY`` while it has members; 404 for a group that does not exist. Its owner tenant keeps the
        name (the security document's claim), as a deleted tenant's groups stay claimed."""
        await self._check_listed(name)
        async with self._group(name, create=False) as state:
            state.expire(time.monotonic())
            if state.members:
                raise ApiError(
                    409, "GROUP_NOT_EMPTY", f"group {name!r} has {len(state.members)} active member(s)", retriable=True
                )
            state.offsets.clear()
            state.kafka = None
            await self._append(name, snapshot_record(state))  # a new coordinator folds it back to no offsets
            try:
                await asyncio.wait_for(self._broker.io(self._catalog.unregister, name), _CATALOG_WAIT_S)
            except TimeoutError:
                log.warning(
                    "group %s: the group catalog did not answer within %g s; still listed", name, _CATALOG_WAIT_S
                )
            self._registered.discard(name)
            self._registering.pop(name, None)
            self._groups.pop(name, None)
            self._snapshot_at.pop(name, None)
            metrics.groups_coordinated(len(self._groups))
            log.info("group %s: deleted", name)

    async def delete_offsets(self, name: str, partitions: list[TopicPartition]) -> set[str]:
        """Forget the group's committed offsets of ``partitions`` (every instance's), but those of topics an active
        member consumes (Kafka's OffsetDelete): those topics are the answer. 404 for a group that does not exist."""
        await self._check_listed(name)
        wanted = set(partitions)
        async with self._group(name, create=False) as state:
            state.expire(time.monotonic())
            subscribed = {topic for topic, _ in wanted} & state.topics()
            gone = [key for key in state.offsets if (key[1], key[2]) in wanted and key[1] not in subscribed]
            if gone:
                for key in gone:
                    del state.offsets[key]
                await self._append(name, snapshot_record(state))
            return subscribed

    async def describe(self, name: str) -> dict[str, object]:
        async with self._group(name, create=False) as state:
            now = time.monotonic()
            state.expire(now)
            members = [
                {
                    "member_id": m.member_id,
                    "instance": m.instance,
                    "topics": list(m.topics),
                    "assignment": [tp_json(tp) for tp, _ in state.assignment(m)],
                    "revoking": [tp_json(tp) for tp in sorted(m.revoking)],
                    "session_timeout_ms": int(m.session_s * 1000),
                    "expires_in_ms": max(int((m.deadline - now) * 1000), 0),
                }
                for m in state.members.values()
            ]
            holders = {tp: lock.member for tp, lock in state.locks.items()}
            topics = state.topics() | {t for (_, t, _) in state.offsets}
            instances = sorted({i for (i, _, _) in state.offsets} | {""}) if state.mode == BROADCAST else [""]
            snapshot: dict[str, object] = {
                "group": name,
                "coordinator": self._broker.config.member_id,
                "mode": state.mode,
                "state": state.state(now),
                "generation": state.generation,
                "members": members,
                "target": [{**tp_json(tp), "member": m} for tp, m in sorted(state.target.items())],
            }
        partitions = []
        counts = self._partitions(sorted(topics))
        for topic, count in counts.items():
            for index in range(count):
                try:
                    high: int | None = (await internal_topics.bounds(self._broker, topic, index))[1]
                except ApiError:
                    high = None  # its owner cannot answer now
                for instance in instances:
                    committed = state.offsets.get((instance, topic, index))
                    lag = high - committed if high is not None and committed is not None else None
                    row: dict[str, object] = {
                        "topic": topic,
                        "partition": index,
                        "member": holders.get((topic, index)),
                        "committed": committed,
                        "high_watermark": high,
                        "lag": lag,
                    }
                    if state.mode == BROADCAST:
                        row["instance"] = instance
                    partitions.append(row)
        snapshot["partitions"] = partitions
        return snapshot

    async def list(self) -> list[str]:
        try:
            return await asyncio.wait_for(self._broker.io(self._catalog.list), _CATALOG_WAIT_S)
        except TimeoutError:
            raise ApiError(
                503,
                "GROUP_CATALOG_UNAVAILABLE",
                f"the group catalog did not answer within {_CATALOG_WAIT_S:g} s; retry",
                retriable=True,
                headers={"Retry-After": "1"},
            ) from None

    async def maintain(self) -> None:
        """Expire silent members and rewrite each group's state every ``group_snapshot_interval_s``."""
        interval = self._broker.config.group_snapshot_interval_s
        for name in list(self._groups):
            with contextlib.suppress(ApiError):
                async with self._group(name) as state:
                    state.expire(time.monotonic())
                    # A snapshot written while a transaction's offsets are undecided would, once they are
                    # decided after it, hide them from a replay that applies them at their marker: wait.
                    due = time.monotonic() - self._snapshot_at.get(name, 0.0) >= interval
                    if due and not self._pending.get(name):
                        await self._append(name, snapshot_record(state))
                        self._snapshot_at[name] = time.monotonic()


def _retrieve(future: asyncio.Future[None]) -> None:
    """A catalog write nobody waits for any more may fail: its exception is not "never retrieved"."""
    if not future.cancelled():
        future.exception()
