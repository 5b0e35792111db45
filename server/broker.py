"""The server's state: storage, topic metadata, loaded partitions, the I/O threads and the tail cache."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import ssl
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from fencing import (
    DirectoryEpochSource,
    EpochSource,
    FencedError,
    FileSystem,
    LogError,
    PartitionLog,
    StorageError,
    open_storage,
)
from fencing.local import LocalFileSystem
from hashring import Ring, partition_key
from server import metrics
from server.bounded import in_daemon_thread, until_deadline
from server.cluster import ClusterMember, Owner
from server.compaction import CompactionReport, Compactor
from server.compaction import log_config as compaction_log_config
from server.config import ServerConfig
from server.coordination import ZkEpochSource
from server.coordination import paths as zk_paths
from server.coordination.producer_ids import ZkProducerIds
from server.coordination.topics import ZkTopicStore, decode_topic
from server.errors import ApiError
from server.partition import txn_checkpoint
from server.partition.executor import AffinityExecutor
from server.partition.loaded import LoadedPartition, PartitionState, as_api_error, load_partition_state
from server.partition.producer_ids import ProducerIds, StorageProducerIds
from server.partition.tailcache import TailCache
from server.partition.transactions import Verifier
from server.peers import Forwarder
from server.security.guard import Security
from server.security.store import SecurityStore
from server.storage_health import StorageHealth
from server.storage_probe import StorageProbe
from server.topic_configs import compacted
from server.topics import TopicCatalog, TopicConfig, TopicStore, partition_dir, unknown_topic
from server.trace.recorder import TraceRecorder
from server.usage.history import UsageHistory
from server.usage.meter import UsageMeter
from talos._names import INTERNAL_NAME, TOPIC_NAME

__all__ = ["Broker", "NotOwnerError"]

log = logging.getLogger("talos.server")
T = TypeVar("T")


class NotOwnerError(Exception):
    """The partition is served by another server."""

    def __init__(self, owner: Owner) -> None:
        super().__init__(f"partition owned by {owner.server_id}")
        self.owner = owner


class SchemaCheck(Protocol):
    """Produce-time validation of a topic's records against the schema registry: raises the refusal."""

    async def check(self, config: TopicConfig, batches: Iterable[bytes | bytearray]) -> None: ...


class Broker:
    """Create with :meth:`start` (it may connect to ZooKeeper); stop with :meth:`close`."""

    def __init__(self, config: ServerConfig, *, peer_tls: ssl.SSLContext | None = None) -> None:
        self.config = config
        self._standalone_owner = Owner(config.member_id, config.url, True)  # member_id asks the OS: once
        self.fs: FileSystem
        self.root: str
        self.fs, self.root = open_storage(config.storage)
        self._lock_fd: int | None = None
        if isinstance(self.fs, LocalFileSystem) and not config.clustered:
            self._lock_directory()
        # Partition I/O: writes and reads on separate "min-heap with memory" pools (``server.partition.executor``);
        # everything else that blocks (metadata, ZooKeeper, the security document) on a plain pool.
        self.write_pool = AffinityExecutor(config.io_threads, "talos-write")
        self.read_pool = AffinityExecutor(config.read_threads, "talos-read")
        # More threads than it keeps busy: a load stuck in the storage (a call on a connection a cut left
        # half-open) holds its thread, and must not leave ZooKeeper and metadata calls waiting behind it.
        self.executor = ThreadPoolExecutor(max_workers=4 * config.io_threads, thread_name_prefix="talos-io")
        self.cache = TailCache(config.tail_cache_bytes)
        self.compactor = Compactor(config)
        self.cluster: ClusterMember | None = None
        self.topics: TopicCatalog
        self.producer_ids: ProducerIds
        self._topics: dict[str, TopicConfig] = {}
        self._partitions: dict[tuple[str, int], LoadedPartition] = {}
        self._loading: dict[tuple[str, int], asyncio.Future[LoadedPartition]] = {}
        self._round_robin: dict[str, int] = {}  # per topic: how many keyless messages went round
        self._loop: asyncio.AbstractEventLoop | None = None
        self._background: set[asyncio.Task[None]] = set()
        self.forwarder = Forwarder(
            max_hops=config.forward_hops, timeout_s=30.0, admin_token=config.admin_token, tls=peer_tls
        )
        self.usage = UsageMeter()
        self.history = UsageHistory()
        # Message trace: events of traced topics, buffered here, written by server.trace.writer.
        self.trace = TraceRecorder(self.trace_sample, max_buffered=config.trace_max_buffered)
        # How the storage does (every flush reports here); in a cluster the server steps down on it.
        self.health = StorageHealth()
        self._probe: StorageProbe | None = None
        self.security: Security
        # Called after the ring moved partitions away or the session was lost: whatever else this server
        # serves by the ring (group coordination) lets go of what it no longer owns.
        self.ownership_listeners: list[Callable[[], Coroutine[Any, Any, None]]] = []
        # Transactions' coordinator, as partitions ask it (KIP-890 part 1): plugged in by the app's assembly
        # (it sits above the broker). None: transactional batches are refused.
        self.transaction_verifier: Verifier | None = None
        # The schema registry's produce-time validation (server.schemas.validation), plugged in the same way.
        # None: a topic that validates schemas refuses every record.
        self.schema_validator: SchemaCheck | None = None
        self._remove_collector: Callable[[], None] = lambda: None

    @classmethod
    async def start(
        cls,
        config: ServerConfig,
        *,
        deadline: Callable[[], float | None] | None = None,
        peer_tls: ssl.SSLContext | None = None,
    ) -> Broker:
        """Open the storage, join the cluster (or read the topics), load the security document. Cancelled (a
        SIGTERM during start-up: server/app.py), it closes what it opened by ``deadline()`` (a
        ``time.monotonic()``, or None: ``shutdown_timeout_s`` from then). ``peer_tls``: the client context for
        calls to the other servers (``server.tls``), when they serve TLS."""
        broker = cls(config, peer_tls=peer_tls)
        broker._loop = asyncio.get_running_loop()
        try:
            if config.clustered:
                await broker._io(broker._join_cluster)
            else:
                broker.topics = TopicStore(broker.fs, broker.root)
                broker.producer_ids = await broker._io(StorageProducerIds, broker.fs, broker.root)
                broker._topics = {t.name: t for t in await broker._io(broker.topics.list)}
            store = await broker._io(SecurityStore, broker.fs, broker.root)
            broker.security = Security(config, store, broker.executor, broker)
            await broker.security.reload()
        except BaseException:
            await broker.close(deadline() if deadline is not None else None)
            raise
        broker._remove_collector = metrics.add_collector(broker._collect_metrics)
        return broker

    def _collect_metrics(self) -> None:
        """This server's state gauges on ``/metrics`` (``server.metrics`` calls it before each rendering)."""
        loaded = self.loaded_partitions()
        if self.cluster is not None:
            metrics.ring_version(self.cluster.ring.version)
        metrics.loaded(len(loaded), sum(p.flushes for p in loaded))
        metrics.tail_cache(self.cache.used)
        for name, pool in (("write", self.write_pool), ("read", self.read_pool)):
            stats = pool.stats
            metrics.io_pool(name, stats.tasks, stats.queued_s, stats.running_s, pool.queued(), stats.spares)

    def _join_cluster(self) -> None:
        cluster = ClusterMember(
            self.config, on_ring=self._ring_changed, on_session_lost=self._session_lost, health=self.health
        )
        self.cluster = cluster
        cluster.start()
        self._probe = StorageProbe(
            self.fs, self.root, cluster.server_id, self.health, interval_s=self.config.storage_probe_s
        )
        self._probe.start()
        self.producer_ids = ZkProducerIds(cluster.zk)
        store = ZkTopicStore(cluster.zk, self.fs, self.root)
        self.topics = store
        self._topics = {t.name: t for t in store.list()}
        store.watch(self._topic_changed)

    # ---------------------------------------------------------------- cluster events (from kazoo's thread)

    def _soon(self, callback: Callable[[], Coroutine[Any, Any, None]]) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return

        def spawn() -> None:
            task = loop.create_task(callback())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

        loop.call_soon_threadsafe(spawn)

    def _ring_changed(self, _ring: Ring) -> None:
        self._soon(self._release_unowned)

    def _session_lost(self) -> None:
        self._soon(self._release_all)

    def _topic_changed(self, name: str, config: TopicConfig | None) -> None:
        if config is None:
            self._topics.pop(name, None)
        else:
            self._topics[name] = config
        self._soon(lambda: self._apply_topic(name, config))

    async def _apply_topic(self, name: str, config: TopicConfig | None) -> None:
        for key, partition in list(self._partitions.items()):
            if key[0] != name:
                continue
            if config is None:
                await self._release(key, seal=False)
            else:
                partition.log.reconfigure(compaction_log_config(self.config, config))
                partition.keys_required = compacted(config.cleanup_policy)

    async def _release_unowned(self) -> None:
        assert self.cluster is not None
        moved = []
        for key in list(self._partitions):
            try:
                owner = self.cluster.owner(*key)
            except ApiError:
                continue  # an empty ring: keep serving until a ring says otherwise
            if not owner.local:
                log.info("releasing %s/%d: the ring gives it to %s", key[0], key[1], owner.server_id)
                moved.append(key)
        await asyncio.gather(*(self._release(key) for key in moved))  # each waits on its own HDFS close
        for listener in self.ownership_listeners:
            await listener()

    async def _release_all(self) -> None:
        await asyncio.gather(*(self._release(key) for key in list(self._partitions)))
        for listener in self.ownership_listeners:
            await listener()

    async def _release(self, key: tuple[str, int], *, seal: bool = True) -> None:
        """Flush and stop serving a partition; sealed, the next owner needs no lease recovery. With the storage
        failing (the server stepping down) nothing is waited for: the writes waiting are answered "moved" at
        once, and the next owner recovers the lease."""
        partition = self._partitions.pop(key, None)
        if partition is None:
            return
        failing = self.health.state()
        if failing.failing_s > 0:
            log.info("released %s/%d without a flush: storage failing (%s)", key[0], key[1], failing.problem)
            partition.abandon(FencedError("released while its storage is failing"))
            return
        try:
            await asyncio.wait_for(partition.close(seal=seal), self.config.flush_timeout_s)
        except TimeoutError:
            log.warning(
                "released %s/%d: its last flush did not end within %g s", key[0], key[1], self.config.flush_timeout_s
            )
            partition.abandon(FencedError("released: its last flush did not end"))
        except LogError as exc:
            log.info("released %s/%d: %s", key[0], key[1], exc)

    def _lock_directory(self) -> None:
        # Two standalone servers on one directory would fence each other in turn: refuse the second.
        self.fs.mkdirs(self.root)
        fd = os.open(os.path.join(self.root, ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RuntimeError(f"another Talos server is using {self.root}") from None
        self._lock_fd = fd

    # ---------------------------------------------------------------- topics

    # topic() reads a name it does not know from ZooKeeper on the event loop (its callers are not coroutines): it
    # waits at most _TOPIC_READ_S, and while a read that took longer is still unanswered, the next lookups answer
    # 503 at once instead of stalling the loop again (a blocking read had no bound: issue 35).
    _TOPIC_READ_S = 1.0
    _unanswered_read: Any = None  # kazoo's result of that read
    _REREAD_S = 10.0  # reread_topic's wait for the I/O threads (busy with a stuck storage, say)

    def topic(self, name: str, *, known_only: bool = False) -> TopicConfig:
        """The topic's configuration, else 404. A name this server does not know (created through another server a
        moment ago, before our watch fired) costs one ZooKeeper read: read-your-writes across servers. With
        ``known_only``, no read: what this server's watch of the catalog knows (for background work, which needs no
        read-your-writes and must not wait for ZooKeeper on the event loop)."""
        config = self._topics.get(name)
        if (
            config is None
            and not known_only
            and self.cluster is not None
            and (TOPIC_NAME.match(name) or INTERNAL_NAME.match(name))
        ):
            zk = self.cluster.zk
            unanswered = self._unanswered_read
            # Cannot tell: "unknown" would be a lie a client acts on.
            if not zk.connected or (unanswered is not None and not unanswered.ready()):
                why = "reconnects to ZooKeeper" if not zk.connected else "waits for ZooKeeper to answer"
                raise ApiError(
                    503,
                    "NOT_REGISTERED",
                    f"cannot look topic {name!r} up while this server {why}; retry",
                    retriable=True,
                    headers={"Retry-After": "1"},
                )
            reading = zk.get_async(zk_paths.topic(name))
            try:
                data, _stat = reading.get(timeout=self._TOPIC_READ_S)
            except NoNodeError:
                config = None
            except (KazooException, KazooTimeoutError) as exc:
                if not reading.ready():  # still unanswered: the next lookups answer 503 until it is
                    self._unanswered_read = reading
                    log.warning("topic %s: ZooKeeper did not answer a read within %g s", name, self._TOPIC_READ_S)
                raise ApiError(
                    503,
                    "NOT_REGISTERED",
                    f"cannot look topic {name!r} up: ZooKeeper did not answer ({type(exc).__name__}); retry",
                    retriable=True,
                    headers={"Retry-After": "1"},
                ) from None
            else:
                config = decode_topic(data)
                self._topics.setdefault(name, config)
        if config is None:
            raise unknown_topic(name)
        return config

    async def reread_topic(self, name: str) -> TopicConfig:
        """The topic as its catalog has it now (created by a racing request a moment ago, say); 503 if the catalog
        does not answer within ``_REREAD_S``."""
        try:
            config = await asyncio.wait_for(self._io(self.topics.get, name), self._REREAD_S)
        except TimeoutError:
            raise ApiError(
                503,
                "TOPIC_CATALOG_UNAVAILABLE",
                f"the topic catalog did not answer about {name!r} within {self._REREAD_S:g} s; retry",
                retriable=True,
                headers={"Retry-After": "1"},
            ) from None
        if config is None:
            raise unknown_topic(name)
        self._topics.setdefault(name, config)
        return config

    def validated(self, topic: str) -> TopicConfig | None:
        """The topic's configuration if it validates records' schema ids on produce (known here), else None: one
        dict look-up, for the hot path."""
        config = self._topics.get(topic)
        if config is None or not (config.value_schema_validation or config.key_schema_validation):
            return None
        return config

    def trace_sample(self, topic: str) -> int:
        """The topic's message trace setting (0 off, 1 all, N one in N); 0 for a topic unknown here."""
        config = self._topics.get(topic)
        return config.trace_sample if config is not None else 0

    def list_topics(self) -> list[TopicConfig]:
        return sorted(self._topics.values(), key=lambda t: t.name)

    async def create_topic(self, config: TopicConfig) -> TopicConfig:
        created = await self._io(self.topics.create, config)
        self._topics[created.name] = created
        return created

    async def update_topic(self, name: str, **changes: Any) -> TopicConfig:
        updated = await self._io(lambda: self.topics.update(name, **changes))
        self._topics[name] = updated
        await self._apply_topic(name, updated)
        return updated

    async def delete_topic(self, name: str) -> None:
        self.topic(name)
        self._topics.pop(name, None)
        await self._apply_topic(name, None)
        await self._io(self.topics.delete, name)

    def next_partition(self, topic: TopicConfig, *, take: bool = True) -> int:
        """The partition the next keyless message goes to (round robin); ``take=False`` only looks."""
        turn = self._round_robin.get(topic.name, 0)
        if take:
            self._round_robin[topic.name] = turn + 1
        return turn % topic.partitions

    # ---------------------------------------------------------------- partitions

    def check_partition(self, topic: str, index: int) -> TopicConfig:
        config = self.topic(topic)
        if not 0 <= index < config.partitions:
            raise ApiError(404, "UNKNOWN_PARTITION", f"topic {topic!r} has partitions 0..{config.partitions - 1}")
        return config

    def owner(self, topic: str, index: int) -> Owner:
        """Who serves the partition now (this server when standalone)."""
        return self.owner_of(partition_key(topic, index))

    def owns(self, topic: str, index: int) -> bool:
        if self.cluster is None:  # standalone: every partition is ours (no key to make per produce)
            return True
        return self.cluster.owner_of(partition_key(topic, index)).local

    def owner_of(self, key: str) -> Owner:
        """Who the ring gives ``key`` now (this server when standalone)."""
        if self.cluster is None:
            return self._standalone_owner
        return self.cluster.owner_of(key)

    async def io(self, function: Callable[..., T], *args: object) -> T:
        """Run blocking work (storage, ZooKeeper) on the I/O threads."""
        return await self._io(function, *args)

    def topic_now(self, name: str) -> TopicConfig | None:
        """The topic's configuration as this server knows it (the object is replaced, not changed, when the
        configuration changes), or None: :meth:`topic` with ``known_only``, without an error to raise."""
        return self._topics.get(name)

    def loaded_now(self, topic: str, index: int) -> LoadedPartition | None:
        """The partition if it is loaded here and working, without an await; else None (:meth:`partition` takes
        it over, or says who owns it)."""
        loaded = self._partitions.get((topic, index))
        return loaded if loaded is not None and not loaded.failed else None

    async def partition(self, topic: str, index: int) -> LoadedPartition:
        """The loaded partition, taken over first if need be; :class:`NotOwnerError` if another server owns it."""
        config = self.check_partition(topic, index)
        key = (topic, index)
        loaded = self._partitions.get(key)
        if loaded is not None and not loaded.failed:
            return loaded
        if self.cluster is not None:
            owner = self.cluster.owner(topic, index)
            if not owner.local:
                raise NotOwnerError(owner)
            if not self.cluster.registered:
                raise ApiError(
                    503,
                    "NOT_REGISTERED",
                    "this server lost its ZooKeeper session and is registering again; retry",
                    retriable=True,
                    headers={"Retry-After": "1"},
                )
        pending = self._loading.get(key)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._loading[key] = pending
            try:
                if loaded is not None:  # failed (storage error, fenced): take it over again
                    log.warning("reloading %s/%d after: %s", topic, index, loaded.abandoned or loaded.log.failed)
                    self._partitions.pop(key, None)
                ring_version = self.cluster.ring.version if self.cluster is not None else 0
                try:
                    plog, state = await self._io(self._open_log, config, index, ring_version)
                except (LogError, KazooException) as exc:  # fenced by a newer ring, storage or ZooKeeper down
                    log.info("cannot take over %s/%d: %r", topic, index, exc)
                    raise as_api_error(exc) from exc
                loaded = LoadedPartition(
                    topic,
                    index,
                    plog,
                    self.cache.partition(topic, index),
                    # Keyed by the load session too: a reload must not queue behind a flush the old load
                    # abandoned, still stuck on its thread.
                    self.write_pool.for_key((topic, index, plog.epoch)),
                    self.read_pool.for_key((topic, index, plog.epoch)),
                    group_commit=self.config.group_commit,
                    producers=state.producers,
                    transactions=state.transactions,
                    epochs=self.producer_ids,
                    flush_timeout_s=self.config.flush_timeout_s,
                    version=ring_version,
                    health=self.health,
                    keys_required=compacted(config.cleanup_policy),
                )
                metrics.took_over()
                if self.cluster is not None and not self.cluster.owner(topic, index).local:
                    await loaded.close()  # the ring moved it while we were taking it over
                    raise NotOwnerError(self.cluster.owner(topic, index))
                self._partitions[key] = loaded
                pending.set_result(loaded)
            except Exception as exc:
                pending.set_exception(exc)
                pending.exception()  # retrieved: no "never retrieved" warning when nobody else waits
                raise
            finally:
                del self._loading[key]
            return loaded
        return await asyncio.shield(pending)

    def _open_log(self, config: TopicConfig, index: int, ring_version: int) -> tuple[PartitionLog, PartitionState]:
        directory = partition_dir(self.root, config.name, index)
        log_config = compaction_log_config(self.config, config)
        epochs: EpochSource
        if self.cluster is not None:
            epochs = ZkEpochSource(
                self.cluster.zk, config.name, index, owner=self.cluster.server_id, ring_version=ring_version
            )
        else:
            epochs = DirectoryEpochSource(self.fs, directory)
        with self.health.operation(f"loading {config.name}/{index}", failures=(StorageError,)):
            plog = PartitionLog.open(self.fs, directory, epochs, config=log_config)
            try:
                checkpoint = txn_checkpoint.latest(self.fs, directory, plog.durable_offset)
                state = load_partition_state(plog, self.config.producer_state_window_bytes, checkpoint)
                return plog, state
            except BaseException:
                plog.close(seal=False)
                raise

    def loaded_partitions(self) -> list[LoadedPartition]:
        return list(self._partitions.values())

    async def maintain(self) -> None:
        """Retention and age-based rolls for every loaded partition (called periodically)."""
        await asyncio.gather(*(self._maintain(p) for p in self.loaded_partitions() if not p.failed))

    async def _maintain(self, partition: LoadedPartition) -> None:
        # The roll goes among the partition's flushes: onto its write thread, under the key ``partition()``
        # gave it. It seals the old segment in the background, so it holds the next flush only for a create.
        key = (partition.topic, partition.index, partition.log.epoch)
        roll = asyncio.wrap_future(self.write_pool.submit(key, partition.log.maybe_roll))
        # Behind a stuck flush it would wait as long: given up (cancelled if not started) after a flush's timeout.
        with contextlib.suppress(LogError, TimeoutError):
            await asyncio.wait_for(roll, self.config.flush_timeout_s)
        with contextlib.suppress(LogError):
            await self._io(partition.log.enforce_retention)
        with contextlib.suppress(LogError, OSError):
            await self._checkpoint_transactions(partition)
        config = self._topics.get(partition.topic)
        if config is not None:
            self._compact(partition, config, force=False)

    async def _checkpoint_transactions(self, partition: LoadedPartition) -> None:
        """A checkpoint of the partition's transactions (``server.partition.txn_checkpoint``) when they changed
        since the last one, or when that one left the tail a load reads (while there is state to keep)."""
        state = partition.transactions
        state.forget_below(partition.log.start_offset)
        held = bool(state.open or state.closing or state.aborted) or partition.transactions_checkpoint >= 0
        if not partition.transactions_changed and not held:
            return
        durable = partition.log.durable_offset
        if durable <= partition.transactions_checkpoint:
            return
        window = self.config.producer_state_window_bytes
        if not partition.transactions_changed and partition.transactions_checkpoint >= await self._io(
            partition.log.tail_offset, window
        ):
            return
        directory = partition_dir(self.root, partition.topic, partition.index)
        snapshot = txn_checkpoint.state_at(state, durable)  # taken now, on the event loop: nothing moves under it
        partition.transactions_changed = False
        try:
            await self._io(txn_checkpoint.write, self.fs, directory, snapshot, durable)
        except BaseException:
            partition.transactions_changed = True
            raise
        partition.transactions_checkpoint = durable

    def _compact(
        self, partition: LoadedPartition, config: TopicConfig, *, force: bool
    ) -> asyncio.Future[CompactionReport | None] | None:
        """A pass over the partition (queued; forced: whatever the dirty ratio); once it is done, the tail cache
        forgets the batches it compacted, so readers get the compacted copy."""
        future = self.compactor.offer(partition.log, config, force=force)
        if future is None:
            return None
        wrapped = asyncio.wrap_future(future)

        def done(finished: asyncio.Future[CompactionReport | None]) -> None:
            if not finished.cancelled() and finished.exception() is None:
                report = finished.result()
                if report is not None:
                    partition.tail.drop_below(report.cleaned_to)

        wrapped.add_done_callback(done)
        return wrapped

    async def compact_now(self, partition: LoadedPartition) -> CompactionReport | None:
        """A pass over the partition now, whatever its dirty ratio (an operator's request)."""
        pending = self._compact(partition, self.topic(partition.topic), force=True)
        return None if pending is None else await pending

    async def _io(self, function: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, function, *args)

    async def close(self, deadline: float | None = None) -> list[str]:
        """Graceful stop: flush and seal every partition, leave ZooKeeper (deregister), stop the I/O threads.

        Over by ``deadline`` (a ``time.monotonic()``; None: ``shutdown_timeout_s`` from now): a step still running
        then is given up, never waited for. A partition whose storage hangs stays unsealed (its next owner
        recovers the lease); with ZooKeeper unreachable the registration ends with the session; a thread stuck in
        a storage call is left behind (the pools are not joined past the deadline, and their threads never hold
        up the process's exit: server/__main__.py). Returns what was given up, [] when everything finished."""
        if deadline is None:
            deadline = time.monotonic() + self.config.shutdown_timeout_s
        end = deadline
        self.compactor.close()
        abandoned: list[str] = []

        def share(fraction: float) -> float:
            """When a step must be done: ``fraction`` of the time left (the later steps keep the rest)."""
            return time.monotonic() + max(0.0, end - time.monotonic()) * fraction

        async def within(what: str, step: Awaitable[object], until: float) -> None:
            await until_deadline(what, step, until, abandoned)

        async def in_thread(what: str, function: Callable[[], object], until: float) -> None:
            # A daemon thread of its own, not a pool's: one stuck in ZooKeeper or the storage is left behind.
            await until_deadline(what, in_daemon_thread(function, name=f"talos-close: {what}"), until, abandoned)

        self._remove_collector()
        if self._probe is not None:
            self._probe.stop()
        loaded = len(self._partitions)
        await within(f"flushing and sealing the partitions ({loaded} loaded)", self._release_all(), share(0.7))
        for task in list(self._background):
            task.cancel()
        cluster = self.cluster
        if cluster is not None:
            leave = self.config.leave_on_shutdown
            await in_thread("leaving ZooKeeper", lambda: cluster.stop(leave=leave), share(0.8))
        await within("closing the forwarding connections", self.forwarder.close(), share(0.5))

        def stop_pools() -> None:
            self.write_pool.shutdown(wait=True)
            self.read_pool.shutdown(wait=True)
            self.executor.shutdown(wait=True)

        # Queued work nobody waits for any more (a cancelled start-up's) is dropped; running work has until the end.
        self.executor.shutdown(wait=False, cancel_futures=True)
        await in_thread("the I/O threads (a storage or ZooKeeper call)", stop_pools, end)
        if not abandoned:  # else a thread may still be inside the storage client
            await in_thread("closing the storage client", self.fs.close, end)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        return abandoned
