"""The transaction coordinator: the owner of a transactional id's ``__transaction_state`` partition keeps the
id's state (``server.transactions.state``) in memory and every change of it in that partition, and writes the
commit or abort markers on the transaction's partitions.

Placement and fencing: the coordinator of an id is whoever owns its state partition now. Every state change is
a durable append to that partition *as loaded here*: a server that lost the partition (the ring moved it, a
newer load fenced it) fails the append, so a zombie coordinator changes nothing. The partition's load epoch is
the coordinator epoch the markers carry; a partition refuses a marker from an older one than it has seen.

Order, as Kafka's: the decision (PrepareCommit or PrepareAbort) is durable before any marker is written;
Complete is written only after every marker is durable; a coordinator that loads the partition finishes every
Prepare it finds. Calls for one id are serialised by an asyncio lock. A transaction open past its timeout is
fenced (epoch + 1) and aborted by :meth:`TransactionCoordinator.maintain`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import orjson

from server import internal_topics, metrics
from server.broker import Broker, NotOwnerError
from server.cluster import Owner
from server.errors import ApiError
from server.messaging.caller import SERVERS
from server.messaging.forwarder import JSON, answer_of
from server.messaging.markers import write_marker
from server.partition.loaded import LoadedPartition
from server.transactions.records import (
    TRANSACTION_STATE_TOPIC,
    fold,
    key_of,
    partition_of,
    state_record,
    tombstone,
    topic_config,
)
from server.transactions.state import (
    EXHAUSTED_EPOCH,
    MAX_EPOCH,
    PREPARED,
    AbortFirst,
    AlreadyDone,
    TopicPartition,
    TxnError,
    TxnMetadata,
    TxnStatus,
    add_partitions,
    client_identity,
    complete,
    end_transaction,
    expired,
    fence_and_abort,
    init_producer,
    leased,
    markers_for,
    renew_lease,
    require_known,
    timed_out,
    verify_partitions,
)
from talos import RecordData, encode_batch
from talos._control import ControlType, Marker

__all__ = ["NAMED_TIMEOUT_MS", "TransactionCoordinator", "validate_transactional_id"]

log = logging.getLogger("talos.transactions")

_MARKER_RETRY_S = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
_INLINE_COMPLETION_S = 10.0  # an end waits this long for its markers, then they go on in the background
# The transaction timeout a named producer's id gets (Kafka's default transaction.timeout.ms): a connector task
# writes without transactions, but its id is one like any other.
NAMED_TIMEOUT_MS = 60_000


def validate_transactional_id(transactional_id: str) -> str:
    """1-249 printable characters (Kafka's bound): it is a record key, never a path."""
    if not 0 < len(transactional_id) <= 249 or not transactional_id.isprintable():
        raise ApiError(400, "INVALID_REQUEST", "a transactional id is 1-249 printable characters")
    return transactional_id


@dataclass
class _Shard:
    """One ``__transaction_state`` partition this server coordinates: the load it is read from and written to,
    and the state of every id in it."""

    loaded: LoadedPartition
    states: dict[str, TxnMetadata] = field(default_factory=dict)

    @property
    def coordinator_epoch(self) -> int:
        return self.loaded.log.epoch

    @property
    def current(self) -> bool:
        return not self.loaded.failed


class TransactionCoordinator:
    def __init__(self, broker: Broker, *, clock: Callable[[], float] = time.time) -> None:
        self._broker = broker
        self._clock = clock
        self._shards: dict[int, _Shard] = {}
        self._loading: dict[int, asyncio.Future[_Shard]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        # id → the decision being completed and its task (one per decision: a reload's state is another)
        self._completing: dict[str, tuple[TxnMetadata, asyncio.Task[None]]] = {}
        self._partitions: int | None = None
        broker.ownership_listeners.append(self.release_unowned)

    # ---------------------------------------------------------------- placement and loading

    async def _topic_partitions(self) -> int:
        if self._partitions is None:
            config = await internal_topics.ensure(self._broker, topic_config())
            self._partitions = config.partitions
        return self._partitions

    async def owner(self, tenant: str | None, transactional_id: str) -> Owner:
        """The server that coordinates the id now."""
        partition = partition_of(self._tenant(tenant), transactional_id, await self._topic_partitions())
        return self._broker.owner(TRANSACTION_STATE_TOPIC, partition)

    async def release_unowned(self) -> None:
        """Forget the shards whose partition this server no longer owns (their next owner reads them back)."""
        for index, shard in list(self._shards.items()):
            try:
                local = self._broker.owns(TRANSACTION_STATE_TOPIC, index) and shard.current
            except ApiError:
                local = False
            if not local:
                log.info("%s/%d: no longer its coordinator", TRANSACTION_STATE_TOPIC, index)
                self._shards.pop(index, None)
        metrics.transactional_ids(sum(len(s.states) for s in self._shards.values()))

    async def _shard(self, index: int) -> _Shard:
        """The shard of partition ``index``, read back if this server has just taken it over (or reloaded it).
        Raises :class:`NotOwnerError` if another server owns it."""
        loaded = await self._broker.partition(TRANSACTION_STATE_TOPIC, index)
        shard = self._shards.get(index)
        if shard is not None and shard.loaded is loaded and shard.current:
            return shard
        pending = self._loading.get(index)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._loading[index] = pending
            try:
                shard = _Shard(loaded, fold(await internal_topics.read_load(loaded)))
                self._shards[index] = shard
                metrics.transactional_ids(sum(len(s.states) for s in self._shards.values()))
                pending.set_result(shard)
            except BaseException as exc:
                pending.set_exception(exc)
                pending.exception()
                raise
            finally:
                del self._loading[index]
            log.info(
                "%s/%d: coordinating %d transactional ids (coordinator epoch %d)",
                TRANSACTION_STATE_TOPIC,
                index,
                len(shard.states),
                shard.coordinator_epoch,
            )
            for key, state in shard.states.items():
                if state.status in (TxnStatus.PREPARE_COMMIT, TxnStatus.PREPARE_ABORT):
                    self._complete_later(index, key, state)  # a decision the previous coordinator did not finish
            return shard
        return await asyncio.shield(pending)

    async def _located(self, tenant: str | None, transactional_id: str) -> tuple[str | None, int, str]:
        """The id's owner as kept, its shard's partition and its key."""
        validate_transactional_id(transactional_id)
        tenant = self._tenant(tenant)
        index = partition_of(tenant, transactional_id, await self._topic_partitions())
        return tenant, index, _key(tenant, transactional_id)

    # ---------------------------------------------------------------- what clients ask

    async def init(
        self,
        tenant: str | None,
        transactional_id: str,
        *,
        timeout_ms: int,
        expected: tuple[int, int] | None = None,
        lease_ms: int = 0,
    ) -> tuple[int, int]:
        """InitProducerId: the id's producer id and new epoch, which fences every older instance. An open
        transaction of an older instance is aborted first, and answered CONCURRENT_TRANSACTIONS (retry). With
        ``lease_ms`` (a named producer's claim) the new instance holds the id's lease that long; while another
        instance's lease lasts, a new one is refused PRODUCER_BUSY instead."""
        tenant, index, key = await self._located(tenant, transactional_id)
        async with self._lock(key):
            shard = await self._shard(index)
            for _ in range(2):  # a second time after aborting an older instance's open transaction
                current = shard.states.get(key)
                if current is None:
                    current = await self._named_before(tenant, transactional_id, timeout_ms)
                fresh = await self._fresh_producer_id(tenant, current)
                now_ms = self._now_ms()
                with _refusals():
                    outcome = init_producer(
                        current,
                        transactional_id=transactional_id,
                        tenant=tenant,
                        timeout_ms=timeout_ms,
                        max_timeout_ms=self._broker.config.transaction_max_timeout_ms,
                        now_ms=now_ms,
                        fresh_producer_id=fresh,
                        expected=expected,
                    )
                if isinstance(outcome, AbortFirst):
                    await self._persist(shard, key, outcome.metadata)
                    log.info("%s: a new instance aborts the open transaction of the older one", transactional_id)
                    metrics.transaction_ended("abort", "fence")
                    await self._complete_within(index, key, outcome.metadata)
                    if shard.states.get(key) is outcome.metadata:  # still completing: Kafka's answer, retried
                        break
                    continue
                ready = leased(outcome.metadata, lease_ms=lease_ms, now_ms=now_ms)
                await self._persist(shard, key, ready)
                await self._raise_epochs(current, ready)
                return ready.producer_id, ready.producer_epoch
            raise _still_completing(transactional_id)

    async def renew(
        self, tenant: str | None, transactional_id: str, producer_id: int, producer_epoch: int, *, lease_ms: int
    ) -> tuple[int, int]:
        """A named producer's holder keeps its lease ``lease_ms`` longer (0 releases it): PRODUCER_FENCED once
        a newer instance took the id over."""
        tenant, index, key = await self._located(tenant, transactional_id)
        async with self._lock(key):
            shard = await self._shard(index)
            current = shard.states.get(key)
            if current is None:  # a holder that claimed before the upgrade renews: it keeps its lease
                current = await self._named_before(tenant, transactional_id, NAMED_TIMEOUT_MS)
            with _refusals():
                renewed = renew_lease(
                    current,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    lease_ms=lease_ms,
                    now_ms=self._now_ms(),
                )
            await self._persist(shard, key, renewed)
            return producer_id, producer_epoch

    async def _named_before(self, tenant: str | None, name: str, timeout_ms: int) -> TxnMetadata | None:
        """A named producer claimed before named producers were transactional ids, as the state it continues
        from (its producer id, that id's epoch, its lease): a new instance fences the old one's id, not a new
        one. None for any other id."""
        found = await self._broker.io(self._broker.producer_ids.named, tenant, name)
        if found is None:
            return None
        producer_id, epoch, lease = found
        log.info("%s: taking over the named producer %d (epoch %d) kept before", name, producer_id, epoch)
        return TxnMetadata(
            transactional_id=name,
            tenant=tenant,
            producer_id=producer_id,
            producer_epoch=epoch,
            timeout_ms=timeout_ms,
            status=TxnStatus.EMPTY,
            updated_ms=self._now_ms(),
            lease_epoch=-1 if lease is None else lease.epoch,
            lease_until_ms=0 if lease is None else lease.until_ms,
        )

    async def _raise_epochs(self, before: TxnMetadata | None, after: TxnMetadata) -> None:
        """The producer id allocator learns the new instance's epoch, so a partition that loads later fences the
        older instances' idempotent writes from it alone (a connector task writes without transactions); a
        producer id rotated away is fenced there for good."""
        raised = [(after.producer_id, after.producer_epoch)]
        if before is not None and before.producer_id != after.producer_id:
            raised.append((before.producer_id, MAX_EPOCH))
        for producer_id, epoch in raised:
            await self._broker.io(self._broker.producer_ids.raise_epoch, producer_id, epoch)

    async def add_partitions(
        self,
        tenant: str | None,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> None:
        """AddPartitionsToTxn (and AddOffsetsToTxn with the group's offsets partition). The caller has checked
        the partitions exist and that it may write them."""
        tenant, index, key = await self._located(tenant, transactional_id)
        wanted = frozenset(partitions)
        async with self._lock(key):
            shard = await self._shard(index)
            with _refusals():
                changed = add_partitions(
                    shard.states.get(key),
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    partitions=wanted,
                    now_ms=self._now_ms(),
                )
            if changed is not None:
                await self._persist(shard, key, changed)

    async def verify(
        self,
        tenant: str | None,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partition: TopicPartition,
    ) -> bool:
        """KIP-890 part 1: whether ``partition`` is in the producer's open transaction (a partition owner asks
        before it opens a transaction of this producer). Raises as AddPartitionsToTxn would."""
        tenant, index, key = await self._located(tenant, transactional_id)
        shard = await self._shard(index)
        with _refusals():
            found = verify_partitions(
                shard.states.get(key), producer_id=producer_id, producer_epoch=producer_epoch, partitions=[partition]
            )
        return found[partition]

    async def in_transaction(
        self,
        tenant: str | None,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topic: str,
        partition: int,
    ) -> bool:
        """:meth:`verify` at the id's coordinator, wherever it is (a partition's owner asks; the
        ``server.partition.transactions.Verifier`` the broker is given)."""
        tenant = self._tenant(tenant)
        owner = await self.owner(tenant, transactional_id)
        if owner.local:
            with contextlib.suppress(NotOwnerError):  # moved meanwhile: ask its new owner
                return await self.verify(tenant, transactional_id, producer_id, producer_epoch, (topic, partition))
            owner = await self.owner(tenant, transactional_id)
        body = {
            "tenant": tenant,
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "topic": topic,
            "partition": partition,
        }
        reply = await self._broker.forwarder.send(
            owner,
            "POST",
            f"/v1/transactions/{quote(transactional_id, safe='')}/verify",
            query={},
            headers={"content-type": JSON},
            body=orjson.dumps(body),
        )
        return bool(answer_of(reply).get("in_transaction"))

    async def end(
        self,
        tenant: str | None,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        *,
        commit: bool,
        bump: bool,
    ) -> tuple[int, int]:
        """EndTxn: the decision is durable when this returns, and its markers are written (or, past a bound,
        being written in the background: the id answers CONCURRENT_TRANSACTIONS until they are). Returns the
        producer id and epoch the client goes on with (a new epoch when ``bump``)."""
        tenant, index, key = await self._located(tenant, transactional_id)
        async with self._lock(key):
            shard = await self._shard(index)
            current = shard.states.get(key)
            fresh = await self._fresh_producer_id(tenant, current)
            with _refusals():
                outcome = end_transaction(
                    current,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    commit=commit,
                    bump=bump,
                    now_ms=self._now_ms(),
                    fresh_producer_id=fresh,
                )
            if isinstance(outcome, AlreadyDone):
                return client_identity(outcome.metadata)
            await self._persist(shard, key, outcome.metadata)
            metrics.transaction_ended("commit" if commit else "abort", "client")
            await self._complete_within(index, key, outcome.metadata)
            return client_identity(outcome.metadata)

    async def describe(self, tenant: str | None, transactional_id: str) -> dict[str, Any]:
        tenant, index, key = await self._located(tenant, transactional_id)
        shard = await self._shard(index)
        with _refusals():
            return self._described(require_known(shard.states.get(key), transactional_id))

    def coordinated(self, tenant: str | None) -> list[dict[str, Any]]:
        """The ids this server coordinates now (every tenant's when ``tenant`` is None: the admin)."""
        return [
            self._described(state)
            for shard in self._shards.values()
            if shard.current
            for state in shard.states.values()
            if tenant is None or state.tenant == tenant
        ]

    async def state_partitions(self) -> int:
        """How many ``__transaction_state`` partitions (shards) there are."""
        return await self._topic_partitions()

    async def listed(self, tenant: str | None, index: int) -> list[dict[str, Any]]:
        """The ids of shard ``index`` (``tenant``'s; every tenant's for None: the admin), read back if this
        server has just taken it over. Raises :class:`NotOwnerError` if another server owns it."""
        shard = await self._shard(index)
        return [self._described(s) for s in shard.states.values() if tenant is None or s.tenant == tenant]

    # ---------------------------------------------------------------- the coordinator's own moves

    async def maintain(self) -> None:
        """Fence and abort every transaction open past its timeout (Kafka: every 10 s); forget ids idle past
        ``transactional_id_expiration_ms`` (Kafka's ``transactional.id.expiration.ms``: a tombstone, which
        compaction drops)."""
        await self._load_owned()
        now = self._now_ms()
        expiration = self._broker.config.transactional_id_expiration_ms
        for index, shard in list(self._shards.items()):
            for key, state in list(shard.states.items()):
                if timed_out(state, now_ms=now) and key not in self._completing:
                    with contextlib.suppress(Exception):
                        await self._abort_timed_out(index, key)
                elif state.status in PREPARED:
                    # A decision whose completion gave up (a state write failed on a load that stayed current):
                    # taken up again, or its partitions' readers would wait on it for good.
                    self._complete_later(index, key, state)
                elif expired(state, now_ms=now, expiration_ms=expiration):
                    with contextlib.suppress(Exception):
                        await self._expire(shard, key)

    async def _expire(self, shard: _Shard, key: str) -> None:
        async with self._lock(key):
            state = shard.states.get(key)
            expiration = self._broker.config.transactional_id_expiration_ms
            if state is None or not expired(state, now_ms=self._now_ms(), expiration_ms=expiration):
                return
            record_key, _ = tombstone(state.tenant, state.transactional_id)
            await shard.loaded.produce(bytearray(encode_batch([RecordData(None, record_key)])))
            del shard.states[key]
            log.info("%s: idle since %d: expired", state.transactional_id, state.updated_ms)

    async def _load_owned(self) -> None:
        """Take up every shard this server owns now, asked for or not: an open transaction whose producer went
        away must still time out (its partitions' readers wait on it), and a decision found there finished."""
        try:
            count = self._broker.topic(TRANSACTION_STATE_TOPIC).partitions
        except ApiError:
            return  # nobody used transactions yet
        for index in range(count):
            if self._broker.owns(TRANSACTION_STATE_TOPIC, index):  # (a shard held and current: a lookup)
                with contextlib.suppress(NotOwnerError, ApiError):
                    await self._shard(index)

    async def _abort_timed_out(self, index: int, key: str) -> None:
        async with self._lock(key):
            shard = await self._shard(index)
            state = shard.states.get(key)
            if state is None or not timed_out(state, now_ms=self._now_ms()):
                return
            fresh = await self._fresh_producer_id(state.tenant, state)
            prepared = fence_and_abort(state, now_ms=self._now_ms(), fresh_producer_id=fresh)
            log.info("%s: open for over %d ms: fenced and aborted", state.transactional_id, state.timeout_ms)
            await self._persist(shard, key, prepared)
            metrics.transaction_ended("abort", "timeout")
            self._complete_later(index, key, prepared)

    async def _complete_within(self, index: int, key: str, prepared: TxnMetadata) -> None:
        """Write the markers and Complete, waiting at most a bound (then they go on in the background)."""
        task = self._complete_later(index, key, prepared)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), _INLINE_COMPLETION_S)

    def _complete_later(self, index: int, key: str, prepared: TxnMetadata) -> asyncio.Task[None]:
        """The task completing ``prepared``: the one running, or a new one. A task of the same decision as read
        by an older load of the shard is not reused: it stops at its next attempt (superseded), and the state
        this load read back would then be left prepared, its partitions' LSO held for good."""
        running = self._completing.get(key)
        if running is not None and running[0] is prepared and not running[1].done():
            return running[1]
        task = asyncio.get_running_loop().create_task(self._complete(index, key, prepared))
        self._completing[key] = (prepared, task)

        def forget(done: asyncio.Task[None]) -> None:
            current = self._completing.get(key)
            if current is not None and current[1] is done:
                del self._completing[key]

        task.add_done_callback(forget)
        return task

    async def _complete(self, index: int, key: str, prepared: TxnMetadata) -> None:
        """Every marker of the decided transaction, retried until written, then its Complete record: only while
        this server still coordinates the shard (a newer coordinator finishes it otherwise)."""
        shard = self._shards.get(index)
        if shard is None:
            return
        commit, producer_id, epoch, partitions = markers_for(prepared)
        kind = ControlType.COMMIT if commit else ControlType.ABORT
        marker = Marker(producer_id, epoch, kind, shard.coordinator_epoch)
        try:
            await asyncio.gather(*(self._write_marker(shard, marker, tp, prepared.bumped) for tp in partitions))
            # Not under the id's lock (an end holds it while it waits for this): nothing else changes a prepared
            # state (every request answers CONCURRENT_TRANSACTIONS meanwhile, the timeout sweep skips it).
            if shard.states.get(key) is prepared and shard.current:
                await self._persist(shard, key, complete(prepared, now_ms=self._now_ms()))
        except _Superseded as exc:
            log.info("%s: %s; its next coordinator completes it", prepared.transactional_id, exc)
        except Exception:
            log.exception("%s: completing failed; retried when the shard loads", prepared.transactional_id)

    async def _write_marker(self, shard: _Shard, marker: Marker, partition: TopicPartition, bumped: bool) -> None:
        topic, index = partition
        attempt = 0
        while True:
            if not shard.current or self._shards.get(shard.loaded.index) is not shard:
                raise _Superseded("this server no longer coordinates the shard")
            try:
                await write_marker(self._broker, SERVERS, topic, index, marker, bumped=bumped)
                metrics.transaction_marker("written")
                return
            except ApiError as exc:
                if exc.code == "TRANSACTION_COORDINATOR_FENCED":
                    raise _Superseded(exc.message) from exc
                if exc.status == 404:  # the topic was deleted: nothing is left to close there
                    log.info("%s/%d: gone; no marker needed", topic, index)
                    return
                if exc.code == "PRODUCER_FENCED":
                    # A newer epoch of this producer is on the partition already (written by a later decision of
                    # this id): this marker is superseded there; nothing is open of this transaction.
                    return
                delay = _MARKER_RETRY_S[min(attempt, len(_MARKER_RETRY_S) - 1)]
                metrics.transaction_marker("retried")
                log.info("%s/%d: marker not written yet (%s); retrying in %.2fs", topic, index, exc.message, delay)
            except Exception as exc:  # the owner unreachable, moving: retried
                delay = _MARKER_RETRY_S[min(attempt, len(_MARKER_RETRY_S) - 1)]
                log.info("%s/%d: marker not written yet (%r); retrying in %.2fs", topic, index, exc, delay)
            attempt += 1
            await asyncio.sleep(delay)

    # ---------------------------------------------------------------- state writes

    async def _persist(self, shard: _Shard, key: str, metadata: TxnMetadata) -> None:
        """Append the new state to the shard's partition *as loaded here* (a load that lost it fails), then
        hold it in memory."""
        record_key, value = state_record(metadata)
        batch = bytearray(encode_batch([RecordData(value, record_key)]))
        await shard.loaded.produce(batch)
        shard.states[key] = metadata
        metrics.transactional_ids(sum(len(s.states) for s in self._shards.values()))

    async def _fresh_producer_id(self, tenant: str | None, current: TxnMetadata | None) -> int:
        """A never-used producer id owned by ``tenant``, when the transition may need one (a new id, an epoch
        near exhaustion); -1 otherwise (no allocator call on the hot path)."""
        near_exhaustion = current is not None and current.producer_epoch >= EXHAUSTED_EPOCH - 1
        if current is not None and current.status is not TxnStatus.DEAD and not near_exhaustion:
            return -1
        loop = asyncio.get_running_loop()
        producer_id, _epoch = await loop.run_in_executor(
            self._broker.executor, self._broker.producer_ids.allocate, None, tenant
        )
        return producer_id

    def _described(self, state: TxnMetadata) -> dict[str, Any]:
        return {**_described(state), "coordinator": self._broker.config.member_id}

    def _tenant(self, tenant: str | None) -> str | None:
        """The owner an id is kept under: nobody's with auth off (whatever tenant a request names)."""
        return tenant if self._broker.security.enabled else None

    def _lock(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)


class _Superseded(Exception):
    """A newer coordinator has the shard: this one stops completing."""


def _key(tenant: str | None, transactional_id: str) -> str:
    return key_of(tenant, transactional_id).decode()


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """A pure transition's refusal as the services' error (the Kafka edge maps its code)."""
    try:
        yield
    except TxnError as exc:
        raise exc.api_error() from None


def _still_completing(transactional_id: str) -> ApiError:
    return ApiError(
        409,
        "CONCURRENT_TRANSACTIONS",
        f"transactional id {transactional_id!r}: the older instance's open transaction is being aborted; retry",
        retriable=True,
    )


def _described(state: TxnMetadata) -> dict[str, Any]:
    return {
        "transactional_id": state.transactional_id,
        "state": state.status.value,
        "producer_id": state.producer_id,
        "producer_epoch": state.producer_epoch,
        "timeout_ms": state.timeout_ms,
        "start_ms": state.start_ms,
        "updated_ms": state.updated_ms,
        "partitions": [{"topic": t, "partition": p} for t, p in sorted(state.partitions)],
        # A named producer's lease (wall-clock ms; 0: none held by the current epoch)
        "lease_until_ms": state.lease_until_ms if state.lease_epoch == state.producer_epoch else 0,
    }
