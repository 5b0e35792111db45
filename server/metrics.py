"""Prometheus metrics of one server process (``GET /metrics``).

Series labelled by tenant, topic or partition name who uses the service: with auth on they are served
only to the admin token unless ``metrics_labels = "public"``; anyone else gets each such metric summed over
those labels (``render(labelled=False)``).

A registry that modules push into: counters are bumped where things happen; the gauges that describe a
whole server's state (loaded partitions, tail cache, I/O pools, ring version) are set by collector callbacks
that their owner registers with :func:`add_collector` and that run just before each rendering. This module
imports no other module of the server (the import-direction test holds it to that)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = [
    "CONTENT_TYPE",
    "add_collector",
    "compacted",
    "io_pool",
    "loaded",
    "loop_longest_stall",
    "loop_stalled",
    "denied",
    "fetched",
    "forwarded",
    "group_committed",
    "kafka_request",
    "group_rebalanced",
    "groups_coordinated",
    "subscription_dead_lettered",
    "subscription_settled",
    "subscriptions_coordinated",
    "misdirected",
    "produced",
    "throttled",
    "read_from",
    "repeated_head",
    "render",
    "ring_version",
    "tail_cache",
    "took_over",
    "usage",
]

CONTENT_TYPE = CONTENT_TYPE_LATEST
REGISTRY = CollectorRegistry()


class _Series:
    """One labelled series of a :class:`_LoopCounter`."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class _LoopCounter(Collector):
    """A labelled counter for what every produce and fetch bumps, from the event loop only: a plain float per
    series, read at scrape time. ``prometheus_client``'s ``Counter.inc`` takes a lock per call; five of them per
    request were a measurable part of the produce path (docs/performance.md)."""

    def __init__(self, name: str, documentation: str, labelnames: list[str]) -> None:
        self._name, self._documentation, self._labelnames = name, documentation, labelnames
        self._series: dict[tuple[str, ...], _Series] = {}
        REGISTRY.register(self)

    def labels(self, *labels: str) -> _Series:
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = _Series()
        return series

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self._name, self._documentation, labels=self._labelnames)
        for labels, series in list(self._series.items()):
            family.add_metric(list(labels), series.value)
        yield family


_messages_in = _LoopCounter("talos_messages_in", "Messages produced", ["topic"])
_bytes_in = _LoopCounter("talos_bytes_in", "Request bytes produced", ["topic"])
_bytes_out = _LoopCounter("talos_bytes_out", "Batch bytes fetched", ["topic"])
_kafka_requests = _LoopCounter(
    "talos_kafka_requests", "Kafka protocol requests answered, by API and Kafka error code", ["api", "error"]
)
_repeated = _LoopCounter(
    "talos_http_repeated_heads",
    "Produce requests taken whole by their connection's repeated request head, without parsing it again",
    [],
).labels()
_reads = _LoopCounter("talos_fetch_reads", "Fetches answered, by where the data came from", ["source"])
_compaction_passes = Counter(
    "talos_compaction_passes", "Compaction passes, by outcome (done, fenced, failed)", ["outcome"], registry=REGISTRY
)
_compaction_bytes = Counter(
    "talos_compaction_bytes", "Bytes compaction read and wrote", ["direction"], registry=REGISTRY
)
_compaction_removed = Counter(
    "talos_compaction_records_removed", "Records compaction removed (superseded values and tombstones)",
    registry=REGISTRY,
)  # fmt: skip
_partitions = Gauge("talos_loaded_partitions", "Partitions this server has loaded", registry=REGISTRY)
_cache = Gauge("talos_tail_cache_bytes", "Bytes held by the tail cache", registry=REGISTRY)
_forwarded = Counter(
    "talos_forwarded_requests", "Requests forwarded to the owner of their partition", ["outcome"], registry=REGISTRY
)
_forwarded_bytes = Counter(
    "talos_forwarded_bytes", "Bytes sent to and received from owners by forwarding", registry=REGISTRY
)
_misdirected = Counter("talos_misdirected_requests", "Direct requests answered 421 (not the owner)", registry=REGISTRY)
_takeovers = Counter("talos_partition_takeovers", "Partitions taken over (loaded with a new epoch)", registry=REGISTRY)
_ring_version = Gauge("talos_ring_version", "Version of the ring this server acts on", registry=REGISTRY)
_flushes = Gauge("talos_flushes", "Flushes (syncs) of the loaded partitions since they were loaded", registry=REGISTRY)

_group_commits = Counter("talos_group_commits", "Offset commits this server coordinated", registry=REGISTRY)
_group_rebalances = Counter(
    "talos_group_rebalances", "Group generations started here (joins, leaves, expiries)", registry=REGISTRY
)
_groups = Gauge("talos_groups_coordinated", "Consumer groups this server coordinates", registry=REGISTRY)
_transactions_ended = Counter(
    "talos_transactions_ended",
    "Transactions this server decided, by result (commit, abort) and by whom (client, timeout, fence)",
    ["result", "by"],
    registry=REGISTRY,
)
_transaction_ids = Gauge(
    "talos_transactional_ids_coordinated", "Transactional ids this server coordinates", registry=REGISTRY
)
_transaction_markers = Counter(
    "talos_transaction_markers",
    "Transaction markers this server's coordinator wrote, by outcome",
    ["outcome"],
    registry=REGISTRY,
)
_subscriptions = Gauge(
    "talos_subscriptions_coordinated", "Push subscriptions this server coordinates", registry=REGISTRY
)
_subscription_settled = Counter(
    "talos_subscription_settled", "Pushed messages settled, by how (ack, nack, extend)", ["op"], registry=REGISTRY
)
_subscription_dead = Counter(
    "talos_subscription_dead_lettered", "Pushed messages sent to a dead-letter topic", registry=REGISTRY
)
_trace_events = Counter(
    "talos_trace_events", "Message trace events, by outcome (written, dropped)", ["outcome"], registry=REGISTRY
)

_pool_tasks = Gauge("talos_io_tasks", "Storage tasks run, by pool (write, read)", ["pool"], registry=REGISTRY)
_pool_queued_s = Gauge(
    "talos_io_queue_seconds",
    "Seconds storage tasks waited in a queue before running, summed",
    ["pool"],
    registry=REGISTRY,
)
_pool_running_s = Gauge("talos_io_run_seconds", "Seconds storage tasks ran, summed", ["pool"], registry=REGISTRY)
_pool_queued = Gauge("talos_io_queued", "Storage tasks queued or running now", ["pool"], registry=REGISTRY)
_pool_spares = Gauge(
    "talos_io_spare_threads_started",
    "Spare threads started because every thread of the pool was stuck in a storage call",
    ["pool"],
    registry=REGISTRY,
)
# Set from the loop watchdog's thread (server.loop_watchdog): prometheus_client's own metrics, which take a lock.
_loop_stalls = Counter(
    "talos_event_loop_stalls",
    "Times the event loop did not run for the watchdog's stall_s or longer (each logged with the loop's stack)",
    registry=REGISTRY,
)
_loop_longest_stall = Gauge(
    "talos_event_loop_longest_stall_seconds", "The longest event loop stall that ended", registry=REGISTRY
)
_denied = Counter(
    "talos_auth_denied",
    "Requests refused: unauthenticated (401), forbidden (403) or not visible to the caller (404)",
    ["status"],
    registry=REGISTRY,
)
_throttled = Counter(
    "talos_quota_throttled",
    "Requests refused over a rate quota (429), by what limited them",
    ["scope", "resource"],
    registry=REGISTRY,
)

_usage_bytes = _LoopCounter(
    "talos_usage_bytes",
    "Bytes in and out, by tenant/topic/partition (at the owner)",
    ["tenant", "topic", "partition"],
)
_usage_messages = _LoopCounter(
    "talos_usage_messages",
    "Messages in and out, by tenant/topic/partition",
    ["tenant", "topic", "partition"],
)
_usage_errors = _LoopCounter(
    "talos_usage_errors",
    "Failed requests, by tenant/topic/partition",
    ["tenant", "topic", "partition"],
)


# Every produce and fetch lands here: the series of a (tenant, topic, partition) are looked up once.
_usage_series: dict[tuple[str, str, int], tuple[_Series, _Series, tuple[str, str, str]]] = {}


def usage(key: tuple[str, str, int], size: int, messages: int, error: bool) -> None:
    series = _usage_series.get(key)
    if series is None:
        labels = (key[0], key[1], str(key[2]))
        series = _usage_series[key] = (_usage_bytes.labels(*labels), _usage_messages.labels(*labels), labels)
    series[0].value += size
    series[1].value += messages
    if error:
        _usage_errors.labels(*series[2]).inc()


def denied(status: int) -> None:
    _denied.labels(str(status)).inc()


def throttled(scope: str, resource: str) -> None:
    _throttled.labels(scope, resource).inc()


def group_committed() -> None:
    _group_commits.inc()


def transaction_ended(result: str, by: str) -> None:
    _transactions_ended.labels(result, by).inc()


def transactional_ids(count: int) -> None:
    _transaction_ids.set(count)


def transaction_marker(outcome: str) -> None:
    _transaction_markers.labels(outcome).inc()


def group_rebalanced() -> None:
    _group_rebalances.inc()


def groups_coordinated(count: int) -> None:
    _groups.set(count)


def subscriptions_coordinated(count: int) -> None:
    _subscriptions.set(count)


def subscription_settled(op: str, count: int) -> None:
    if count:
        _subscription_settled.labels(op).inc(count)


def subscription_dead_lettered(count: int) -> None:
    _subscription_dead.inc(count)


def trace_events(outcome: str, count: int) -> None:
    """Trace events ``written`` to ``__talos_trace`` or ``dropped`` (the buffer was full)."""
    if count:
        _trace_events.labels(outcome).inc(count)


_produced: dict[str, tuple[_Series, _Series]] = {}  # a topic's two series: one lookup per produce, not two


def produced(topic: str, messages: int, size: int) -> None:
    series = _produced.get(topic)
    if series is None:
        series = _produced[topic] = (_messages_in.labels(topic), _bytes_in.labels(topic))
    series[0].value += messages
    series[1].value += size


def repeated_head() -> None:
    _repeated.value += 1


def fetched(topic: str, size: int) -> None:
    if size:
        _bytes_out.labels(topic).inc(size)


def kafka_request(api: str, error: int) -> None:
    """A Kafka listener request was answered (``error``: its first non-zero Kafka error code, or 0)."""
    _kafka_requests.labels(api, str(error)).inc()


def read_from(source: str) -> None:
    """A fetch was served from ``cache`` (memory) or ``storage`` (the segment files)."""
    _reads.labels(source).inc()


def forwarded(outcome: str, size: int) -> None:
    """A forward ended (``ok``, ``error``: the owner answered an error, ``unreachable``); ``size``: bytes moved."""
    _forwarded.labels(outcome).inc()
    _forwarded_bytes.inc(size)


def misdirected() -> None:
    _misdirected.inc()


def compacted(outcome: str, bytes_read: int = 0, bytes_written: int = 0, removed: int = 0) -> None:
    """A compaction pass ended (``done``, ``fenced``: the partition moved, ``failed``)."""
    _compaction_passes.labels(outcome).inc()
    _compaction_bytes.labels("read").inc(bytes_read)
    _compaction_bytes.labels("written").inc(bytes_written)
    _compaction_removed.inc(removed)


def took_over() -> None:
    _takeovers.inc()


def loop_stalled() -> None:
    """The event loop has not run for the watchdog's ``stall_s`` (called from the watchdog's thread)."""
    _loop_stalls.inc()


def loop_longest_stall(seconds: float) -> None:
    """The longest event loop stall that ended (called from the watchdog's thread)."""
    _loop_longest_stall.set(seconds)


_PRIVATE_LABELS = frozenset({"tenant", "topic", "partition", "group"})


class _Totals(Collector):
    """The registry's metrics with the series of each tenant, topic and partition summed."""

    def collect(self) -> Iterator[Metric]:
        for family in REGISTRY.collect():
            if not any(_PRIVATE_LABELS & sample.labels.keys() for sample in family.samples):
                yield family
                continue
            summed: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue  # when one series began: meaningless for a sum
                labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k not in _PRIVATE_LABELS))
                summed[(sample.name, labels)] = summed.get((sample.name, labels), 0.0) + sample.value
            total = Metric(family.name, family.documentation, family.type, family.unit)
            for (name, labels), value in summed.items():
                total.add_sample(name, dict(labels), value)
            yield total


_TOTALS = _Totals()


# Called before each rendering to set the state gauges (see the module doc), in the order registered.
_collectors: list[Callable[[], None]] = []


def add_collector(collect: Callable[[], None]) -> Callable[[], None]:
    """Run ``collect`` before each rendering; returns the function that removes it again."""
    _collectors.append(collect)

    def remove() -> None:
        if collect in _collectors:
            _collectors.remove(collect)

    return remove


def loaded(partitions: int, flushes: int) -> None:
    """The partitions this server has loaded, and their flushes (syncs) since they were loaded."""
    _partitions.set(partitions)
    _flushes.set(flushes)


def tail_cache(used: int) -> None:
    _cache.set(used)


def ring_version(version: int) -> None:
    _ring_version.set(version)


def io_pool(name: str, tasks: int, queued_s: float, running_s: float, queued: int, spares: int) -> None:
    """One storage task pool's counts (``write``, ``read``)."""
    _pool_spares.labels(name).set(spares)
    _pool_tasks.labels(name).set(tasks)
    _pool_queued_s.labels(name).set(queued_s)
    _pool_running_s.labels(name).set(running_s)
    _pool_queued.labels(name).set(queued)


def render(*, labelled: bool = True) -> bytes:
    """The exposition; ``labelled`` False: without tenant, topic and partition names (see the module doc)."""
    for collect in list(_collectors):
        collect()
    return bytes(generate_latest(REGISTRY if labelled else _TOTALS))
