"""``Producer`` (a background sender thread) and ``AsyncProducer`` (a background task).

Records are batched per partition by size and linger, sent as binary record batches to
``POST /v1/topics/{t}/partitions/{p}/messages``, one request in flight per partition (so order holds),
retried with backoff on retriable errors, and answered through futures.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from abc import abstractmethod
from collections.abc import Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import orjson

from talos._accumulator import (
    Accumulator,
    PendingBatch,
    RecordMetadata,
    any_partition,
    choose_partition,
    record_sizes,
)
from talos._admin import DEFAULT_URL
from talos._clients import Asynchronous, Blocking, ClientBase, operation
from talos._codec import RecordData, build_batch
from talos._compression import codec_named
from talos._errors import ApiError, NotFoundError, ProducerFencedError, TalosError, TransportError
from talos._futures import BatchOutcome, ManyOutcome, RecordFuture, RecordsFuture
from talos._partitioning import partition_for_key
from talos._routing import RouteTable, refresh_steps
from talos._steps import Request, Steps, http, pause
from talos._tracecontext import TRACEPARENT_HEADER, current_traceparent
from talos._transport import AnyTransport, AsyncTransport, Response, Transport, check
from talos._window import Accepted, PartitionWindow

log = logging.getLogger("talos.producer")

__all__ = ["AsyncProducer", "Producer", "ProducerClosedError"]

_BATCH_HEADERS = {"content-type": "application/vnd.talos.batch"}
Headers = Mapping[str, bytes | str | None] | Sequence[tuple[str, bytes | None]] | None
Queued = TypeVar("Queued")  # what ``send`` returns: a future, or a coroutine giving one


class ProducerClosedError(TalosError):
    """send() after close()."""


def _record(value: bytes | str | None, key: bytes | str | None, headers: Headers, timestamp: int | None) -> RecordData:
    def as_bytes(data: bytes | str | None) -> bytes | None:
        return data.encode() if isinstance(data, str) else data

    if headers is None:
        pairs: list[tuple[str, bytes | None]] = []
    elif isinstance(headers, Mapping):
        pairs = [(k, as_bytes(v)) for k, v in headers.items()]
    else:
        pairs = [(k, as_bytes(v)) for k, v in headers]
    return RecordData(as_bytes(value), as_bytes(key), pairs, timestamp)


def _with_header(headers: Headers, name: str, value: str) -> Headers:
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


def _plan_many(items: list[Any], partition: int | None, partitions: int, topic: str) -> list[_Group]:
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


def _queue_many(
    producer: _Producer[Any, Any], topic: str, partitions: int, groups: list[_Group], outcome: ManyOutcome
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
    producer: _Producer[Any, Any], topic: str, partitions: int, group: _Group, outcome: ManyOutcome
) -> Iterator[None]:
    """:func:`_queue_many` for records with headers or timestamps: one by one, as ``send`` queues them."""
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


def _path(topic: str, partition: int) -> str:
    return f"/v1/topics/{quote(topic, safe='')}/partitions/{partition}/messages"


def _retriable(error: BaseException) -> bool:
    return isinstance(error, TransportError) or (isinstance(error, ApiError) and error.retriable)


def _backoff(batch: PendingBatch[Any], base_s: float, error: BaseException) -> float:
    hinted = error.retry_after if isinstance(error, ApiError) and error.retry_after else 0.0
    # Capped at 1 s (Kafka's retry.backoff.max.ms): a partition that moved is back within a second or so.
    return float(max(min(base_s * 2 ** min(batch.attempts, 6), 1.0), hinted))


class Idempotence:
    """An idempotent producer's id, epoch and next sequence per partition (shared by the twins; no I/O).

    A batch gets its sequence when it is first sent and keeps it through retries, with the epoch it was
    given in, so the partition's owner recognises a resend and answers it with the original offsets instead
    of storing it twice. (Sent again under a newer epoch, the old sequence would name another batch of
    that epoch, and the owner would answer with that batch's offsets.)
    """

    def __init__(self, producer_id: int, epoch: int) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.next: dict[tuple[str, int], int] = {}
        self.stale = False  # a batch failed for good: its sequences are a gap; start a new epoch
        # A newer instance took the id over: this one must write nothing more. Never answered with a new epoch
        # of its own, which would fence the newer instance in turn.
        self.fenced: ProducerFencedError | None = None

    def fields(self, batch: PendingBatch[Any]) -> dict[str, int]:
        if batch.sequence is None or batch.epoch is None:
            key = (batch.topic, batch.partition)
            batch.sequence = self.next.get(key, 0)
            batch.epoch = self.epoch
            self.next[key] = (batch.sequence + batch.count) % (2**31)
        return {"producer_id": self.producer_id, "producer_epoch": batch.epoch, "base_sequence": batch.sequence}

    def restart(self, epoch: int) -> None:
        self.epoch = epoch
        self.next.clear()
        self.stale = False


def _init_request(url: str, producer_id: int | None) -> dict[str, Any]:
    body = {} if producer_id is None else {"producer_id": producer_id}
    return {"url": f"{url}/v1/producers", "body": orjson.dumps(body), "headers": {"content-type": "application/json"}}


def _produce_request(producer: _Producer[Any, Any], batch: PendingBatch[Any]) -> dict[str, Any]:
    """Keyword arguments of the transport call that sends ``batch`` (both twins)."""
    base, route_headers = producer._routes.target(batch.topic, batch.partition)
    producer_fields = producer._idempotence.fields(batch) if producer._idempotence is not None else {}
    body, first, largest = batch.section()
    return {
        "url": base + _path(batch.topic, batch.partition),
        "params": _params_for(producer, batch),
        "body": build_batch(body, batch.count, first, largest, compression=producer._compression, **producer_fields),
        "headers": {**_BATCH_HEADERS, **route_headers} if route_headers else _BATCH_HEADERS,
        "timeout": producer._request_timeout_s,
    }


def _params_for(producer: _Producer[Any, Any], batch: PendingBatch[Any]) -> dict[str, str]:
    window = producer._windows.get((batch.topic, batch.partition))
    if window is None or window.session is None:
        return producer._params
    return {**producer._params, "session": str(window.session)}


def _retry_delay(producer: _Producer[Any, Any], batch: PendingBatch[Any], error: BaseException | None) -> float | None:
    """Seconds to wait before sending ``batch`` again, or None when it is answered (stored or failed)."""
    if error is None or not _retriable(error) or time.monotonic() - batch.created >= producer._delivery_timeout_s:
        if error is not None:
            log.warning(
                "giving up on %d record(s) for %s/%d after %d attempt(s) in %.1fs: %r",
                batch.count,
                batch.topic,
                batch.partition,
                batch.attempts + 1,
                time.monotonic() - batch.created,
                error,
            )
            idempotence = producer._idempotence
            if idempotence is not None and batch.epoch in (None, idempotence.epoch):
                # Its sequences will never be stored: a gap for the next batch of this epoch. (A batch of an
                # epoch the producer has left leaves no gap in the new one.)
                idempotence.stale = True
        return None
    if producer._routes.learn(batch.topic, batch.partition, error) and batch.attempts < 3:
        batch.attempts += 1
        return 0.0  # a 421 named the owner: go there now
    batch.attempts += 1
    return _backoff(batch, producer._backoff_s, error)


def _result(response: Response) -> tuple[int, int, int, int]:
    """(base offset, next offset, durable checkpoint, load session) of a one-batch produce answer."""
    result = check(response).json()["results"][0]  # type: ignore[index]
    base = int(result["offset"])
    count = int(result.get("count", 1))
    return base, base + count, int(result.get("durable_offset", 0)), int(result.get("session", 0))


def _register(url: str, producer_id: int | None, epoch: int | None) -> Steps[Idempotence]:
    """Ask for a producer id (or a new epoch of ``producer_id``): the start of an idempotent producer. With
    an ``epoch`` (a named producer's, claimed through the admin API) there is nothing to ask."""
    if producer_id is not None and epoch is not None:
        return Idempotence(producer_id, epoch)
    answer = check((yield from http(Request("POST", **_init_request(url, producer_id))))).json()
    return Idempotence(answer["producer_id"], answer["producer_epoch"])  # type: ignore[index]


def _fenced_by_another(error: ProducerFencedError, epoch: int) -> bool:
    """Whether the epoch that fenced a batch is newer than this producer's own: another instance took the id
    over. (A batch sent before this producer moved to a new epoch itself is fenced by that epoch: only that
    batch fails.)"""
    current = error.details.get("current_epoch")
    return not isinstance(current, int) or current > epoch


def _new_epoch(producer: _Producer[Any, Any]) -> Steps[None]:
    idempotence = producer._idempotence
    assert idempotence is not None
    with producer._epoch_lock:  # the blocking producer's sender threads: one asks, the others see it done
        if idempotence.stale:
            request = Request("POST", **_init_request(producer.url, idempotence.producer_id))
            idempotence.restart(check((yield from http(request))).json()["producer_epoch"])  # type: ignore[index]


def _partition_count(producer: _Producer[Any, Any], topic: str) -> Steps[int]:
    count = producer._partitions.get(topic)
    if count is None:
        yield from refresh_steps(producer._routes, topic, strict=True)
        count = producer._routes.partitions[topic]
        producer._partitions[topic] = count
    return count


def _deliver(
    producer: _Producer[Any, Any], window: PartitionWindow | None, queue: list[PendingBatch[Any]]
) -> Steps[BaseException | None]:
    """Send the batches in order, each retried until answered. With a window (acks="accepted") a batch
    is answered once durable; a changed session puts what was lost back at the front of the queue.
    Returns the last batch's error (None: stored)."""
    error: BaseException | None = None
    while queue:
        batch = queue[0]
        error = None
        result = (0, 0, 0, 0)
        try:
            yield from refresh_steps(producer._routes, batch.topic)
            if producer._idempotence is not None:
                if producer._idempotence.fenced is not None:
                    raise producer._idempotence.fenced
                if producer._idempotence.stale:
                    yield from _new_epoch(producer)
            result = _result((yield from http(Request("POST", **_produce_request(producer, batch)))))
        except ProducerFencedError as exc:
            error = exc
            idempotence = producer._idempotence
            if idempotence is not None and _fenced_by_another(exc, idempotence.epoch):
                idempotence.fenced = exc
        except Exception as exc:
            error = exc
        delay = _after_attempt(producer, window, queue, result, error)
        if delay:
            yield from pause(delay)  # the partition stays busy meanwhile: order holds
    return error


def _poll_checkpoint(producer: _Producer[Any, Any], topic: str, partition: int, window: PartitionWindow) -> Steps[None]:
    """Ask the owner how far the window's partition is durable: confirm what is, resend what a reload lost."""
    if window.empty or window.session is None:
        return
    base, route_headers = producer._routes.target(topic, partition)
    params: dict[str, str | int] = {"session": window.session}
    request = Request("GET", _offsets_url(base, topic, partition), params=params, headers=route_headers)
    try:
        answer = check((yield from http(request)))
    except TalosError as exc:
        producer._routes.learn(topic, partition, exc)
        yield from pause(0.2)
        return
    state = answer.json()
    assert isinstance(state, dict)
    if int(state["session"]) == window.session:
        _confirm(window.advance(int(state["latest"])))
        return
    confirmed, resend = window.moved(int(state["session"]), int(state["session_end"]))
    _confirm(confirmed)
    if resend and (error := (yield from _deliver(producer, window, resend))) is not None:
        log.warning("resending to %s/%d after a reload failed: %r", topic, partition, error)


class _Producer(ClientBase[AnyTransport], Generic[AnyTransport, Queued]):
    """What both producers are: settings, routes, idempotence and the accumulator; the twins add how they
    wait and send."""

    _transport: AnyTransport
    _epoch_lock: contextlib.AbstractContextManager[Any]  # held while a new epoch is asked for
    _acc: Accumulator[Any]  # the twin's, made by _begin

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        linger_ms: float = 5.0,
        batch_bytes: int = 1024 * 1024,
        buffer_bytes: int = 64 * 1024 * 1024,
        acks: str = "durable",
        max_in_flight: int = 8,
        retry_backoff_ms: float = 100.0,
        delivery_timeout_s: float = 120.0,
        request_timeout_s: float = 30.0,
        route_to_owner: bool = True,
        idempotent: bool = False,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
        transport: AnyTransport | None = None,
        token: str | None = None,
        compression: str = "none",
        trace_context: bool = False,
    ) -> None:
        if acks not in ("durable", "accepted"):
            raise ValueError("acks must be 'durable' or 'accepted'")
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self._compression = codec_named(compression)  # of every batch's records, once built
        self.url = url.rstrip("/")
        self._transport = self._connect(transport, token, request_timeout_s, max_in_flight * 2)
        self._routes = RouteTable(self.url, direct=route_to_owner)
        self._idempotent = idempotent or producer_id is not None
        self._producer_id = producer_id
        if producer_epoch is not None and producer_id is None:
            raise ValueError("producer_epoch goes with producer_id")
        self._producer_epoch = producer_epoch
        self._idempotence: Idempotence | None = None
        self._params = {"acks": acks}
        # acks="accepted": Swift's window per partition (what was accepted, until it is durable)
        self._accepted = acks == "accepted"
        self._windows: dict[tuple[str, int], PartitionWindow] = {}
        self._batch_bytes = batch_bytes
        self._linger_s = linger_ms / 1000
        self._buffer_bytes = buffer_bytes
        self._max_in_flight = max_in_flight
        self._backoff_s = retry_backoff_ms / 1000
        self._delivery_timeout_s = delivery_timeout_s
        self._request_timeout_s = request_timeout_s
        self._partitions: dict[str, int] = {}
        self._sticky: dict[str, int] = {}
        self._flushing = 0
        self._closed = False
        # The caller's OpenTelemetry span as each record's traceparent header (the message trace keeps it).
        self._trace_context = trace_context
        self._begin()

    @abstractmethod
    def _begin(self) -> None:
        """The twin's accumulator, locks and sender."""

    @operation
    def partitions_for(self, topic: str) -> Steps[int]:
        return _partition_count(self, topic)

    def send(
        self,
        topic: str,
        value: bytes | str | None,
        *,
        key: bytes | str | None = None,
        headers: Headers = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> Queued:
        """Queue one record. The blocking producer returns a :class:`RecordFuture` at once (it has the calls
        of ``concurrent.futures.Future``: ``result()``, ``exception()``, ``done()``, ``add_done_callback()``);
        ``await`` the asyncio one's ``send`` for an ``asyncio.Future``. Either gives the record's
        :class:`RecordMetadata` once stored (or the error). ``timestamp``: ms since the epoch (default: the
        time its batch was opened)."""
        if isinstance(value, str):
            value = value.encode()
        if isinstance(key, str):
            key = key.encode()
        if self._trace_context and (traceparent := current_traceparent()) is not None:
            headers = _with_header(headers, TRACEPARENT_HEADER, traceparent)
        if (
            headers
            or timestamp is not None
            or (value is not None and type(value) is not bytes)
            or (key is not None and type(key) is not bytes)
        ):  # (other types than bytes are left to the encoder, in the sender, as they always were)
            return self._queue(topic, partition, key, None, _record(value, key, headers, timestamp))
        return self._queue(topic, partition, key, value, None)  # the hot path: no object for the record

    @abstractmethod
    def _queue(
        self, topic: str, partition: int | None, key: bytes | None, value: bytes | None, record: RecordData | None
    ) -> Queued:
        """Put a record into the twin's accumulator: ``record`` when it has headers or a timestamp, else ``key``
        and ``value``."""


class Producer(Blocking, _Producer[Transport, RecordFuture]):
    """Send records to topics; everything is batched and sent in the background.

    >>> with Producer("http://127.0.0.1:8080") as producer:
    ...     future = producer.send("orders", value=b"...", key=b"customer-42")
    ...     producer.flush()
    ...     future.result().offset

    ``idempotent=True`` asks the cluster for a producer id; every batch carries it with an epoch and a
    per-partition sequence, so a resend after a lost acknowledgement (timeouts, failover) is stored once
    and answered with the original offsets. ``producer_id=`` continues as an earlier producer id with a
    new epoch, fencing any older instance that still uses it; with ``producer_epoch=`` too it continues at
    that epoch (a named producer's, from :meth:`Admin.claim_producer`). Once a partition answers
    ``PRODUCER_FENCED`` (a newer instance took the id over) every send fails with
    :class:`ProducerFencedError`. ``route_to_owner=False`` sends everything
    to ``url`` (which forwards) instead of straight to each partition's owner. ``token=`` is the bearer
    token for servers with auth on (default: ``TALOS_TOKEN``); over a quota, batches wait what the 429
    says and go again. ``compression=`` ("gzip", "snappy", "lz4" or "zstd"; default "none") compresses each
    batch's records as Kafka does; consumers decompress them.
    """

    def _begin(self) -> None:
        if self._idempotent:
            self._idempotence = self._run(_register(self.url, self._producer_id, self._producer_epoch))
        self._acc: Accumulator[None] = Accumulator(batch_bytes=self._batch_bytes, linger_s=self._linger_s)
        self._mutex = threading.RLock()  # what `with self._cond` takes, without Condition's Python-level calls
        self._cond = threading.Condition(self._mutex)
        self._epoch_lock = self._cond
        self._pool = concurrent.futures.ThreadPoolExecutor(self._max_in_flight, thread_name_prefix="talos-send")
        self._sender = threading.Thread(target=self._run_sender, name="talos-producer", daemon=True)
        self._sender.start()

    def _window(self, topic: str, partition: int) -> PartitionWindow:
        with self._cond:
            return self._windows.setdefault((topic, partition), PartitionWindow())

    def _deliver(self, window: PartitionWindow | None, queue: list[PendingBatch[None]]) -> BaseException | None:
        return self._run(_deliver(self, window, queue))

    def wait_durable(self, timeout: float | None = None) -> None:
        """Block until every record sent so far is durable (Swift's ``waitFinish``): after :meth:`flush`,
        with ``acks="accepted"``, until the partitions' checkpoints pass everything they accepted; what a
        reload lost meanwhile is sent again. (With ``acks="durable"`` this is :meth:`flush`.)"""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.flush(timeout)
        while True:
            with self._cond:
                pending = [(key, w) for key, w in self._windows.items() if not w.empty]
            if not pending:
                return
            for (topic, partition), window in pending:
                with window.lock:
                    self._run(_poll_checkpoint(self, topic, partition, window))
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError("wait_durable timed out")
            time.sleep(0.01)

    def _queue(
        self, topic: str, partition: int | None, key: bytes | None, value: bytes | None, record: RecordData | None
    ) -> RecordFuture:
        count = self._partitions.get(topic) or self.partitions_for(topic)
        with self._mutex:
            if self._closed:
                raise ProducerClosedError("the producer is closed")
            while self._acc.buffered_bytes >= self._buffer_bytes:  # back-pressure: wait for room
                self._cond.wait(0.1)
            chosen = choose_partition(key, partition, count, self._sticky, topic)
            if record is None:
                batch = self._acc.add_value(topic, chosen, key, value, time.monotonic())
            else:
                batch = self._acc.add(topic, chosen, record, time.monotonic())
            if batch.outcome is None:
                batch.outcome = BatchOutcome(topic, chosen)
                self._cond.notify()  # a new batch: the sender starts its linger clock
            elif batch.size >= self._acc.batch_bytes:
                self._cond.notify()  # full: send now
            assert isinstance(batch.outcome, BatchOutcome)
            return RecordFuture(batch.outcome, batch.count - 1)

    def send_many(self, topic: str, records: ManyRecords, *, partition: int | None = None) -> RecordsFuture:
        """Queue many records at once; returns one :class:`RecordsFuture` for them all, whose ``result()`` is
        the list of their :class:`RecordMetadata` in the order given once every record is stored, or raises
        the error of the first record (in that order) that was not (the others may have been stored).

        ``records`` is an iterable of values (``bytes``, ``str`` or None), of ``(key, value)`` pairs, or of
        :class:`RecordData` (for headers or a timestamp), mixed as you like. They go to ``partition``; else
        keyed records to their key's partition, as ``send`` puts them; records without a key to the topic's
        sticky partition, which moves on whenever a batch fills (or, in a call that also has keyed records,
        all to one partition). Each partition gets its records in the order given. Records without headers or
        a timestamp (the common case) are encoded straight into their batch, without an object per record:
        several times the records per second of a ``send`` loop. Waits while ``buffer_bytes`` are queued, as
        ``send`` does."""
        items = records if isinstance(records, list) else list(records)
        count = self._partitions.get(topic) or self.partitions_for(topic)
        groups = _plan_many(items, partition, count, topic)
        future = RecordsFuture(topic, len(items))
        with self._mutex:
            if self._closed:
                raise ProducerClosedError("the producer is closed")
            for _ in _queue_many(self, topic, count, groups, future.outcome):  # the buffer is full: wait for room
                self._cond.notify_all()
                self._cond.wait(0.1)
                if self._closed:
                    raise ProducerClosedError("the producer was closed while send_many waited for room")
            self._cond.notify_all()  # the sender: new or full batches
        future.outcome.release()
        return future

    def flush(self, timeout: float | None = None) -> None:
        """Block until every record sent so far is acknowledged or failed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                while not self._acc.empty:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError("flush timed out")
                    self._cond.wait(remaining if remaining is not None else 0.5)
            finally:
                self._flushing -= 1

    def close(self) -> None:
        """Flush (with ``acks="accepted"``: until durable), then stop the background sender."""
        if self._closed:
            return
        self.wait_durable()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._sender.join()
        self._pool.shutdown(wait=True)
        self._transport.close()

    # ---------------------------------------------------------------- sender

    def _run_sender(self) -> None:
        with self._cond:
            while not (self._closed and self._acc.empty):
                for batch in self._acc.ready(time.monotonic(), flushing=self._flushing > 0 or self._closed):
                    if self._sticky.get(batch.topic) == batch.partition:
                        del self._sticky[batch.topic]  # the next unkeyed records go elsewhere
                    self._pool.submit(self._send, batch)
                wait = self._acc.next_deadline(time.monotonic())
                self._cond.wait(wait if wait is not None else 0.5)

    def _send(self, batch: PendingBatch[None]) -> None:
        if self._accepted:
            window = self._window(batch.topic, batch.partition)
            with window.lock:
                error = self._deliver(window, [batch])
        else:
            error = self._deliver(None, [batch])
        with self._cond:
            if isinstance(error, NotFoundError):
                self._partitions.pop(batch.topic, None)
            self._acc.done(batch)
            self._cond.notify_all()


def _settle(batch: PendingBatch[Any], base: int, error: BaseException | None) -> None:
    """Answer every record of the batch: send_many's calls, then the sync producer's shared outcome, or the
    async one's futures."""
    waiters, batch.waiters = batch.waiters, []
    for outcome, first, positions in waiters:
        outcome.settle(batch.partition, base + first if base >= 0 else -1, positions, error)
    if isinstance(batch.outcome, BatchOutcome):
        batch.outcome.resolve(base, error)
        return
    for index, future in batch.futures:
        if future.done():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(RecordMetadata(batch.topic, batch.partition, base + index if base >= 0 else -1))


def _confirm(entries: list[Accepted]) -> None:
    for entry in entries:
        _settle(entry.batch, entry.base_offset, None)


def _after_attempt(
    producer: _Producer[Any, Any],
    window: PartitionWindow | None,
    queue: list[PendingBatch[Any]],
    result: tuple[int, int, int, int],
    error: BaseException | None,
) -> float | None:
    """After one attempt to send ``queue[0]`` (both twins): seconds to wait before trying it again (0: at
    once), or None when it is answered and off the queue. A changed session puts what it lost in front."""
    batch = queue[0]
    moved = _session_moved(error) if window is not None else None
    if window is not None and moved is not None:
        confirmed, resend = window.moved(*moved)
        _confirm(confirmed)
        queue[:0] = [b for b in resend if b is not batch]
        return 0.0
    delay = _retry_delay(producer, batch, error)
    if delay is not None:
        return delay
    queue.pop(0)
    if window is None or error is not None:
        _settle(batch, result[0], error)
    else:
        _confirm(window.accepted(batch, *result))
    return None


def _session_moved(error: BaseException | None) -> tuple[int, int] | None:
    """(new session, where the old one ended) if the owner refused a write for naming an old session."""
    if isinstance(error, ApiError) and error.code == "SESSION_CHANGED":
        return int(str(error.details["session"])), int(str(error.details["session_end"]))
    return None


def _offsets_url(base: str, topic: str, partition: int) -> str:
    return f"{base}/v1/topics/{quote(topic, safe='')}/partitions/{partition}/offsets"


class AsyncProducer(Asynchronous, _Producer[AsyncTransport, Coroutine[Any, Any, "asyncio.Future[RecordMetadata]"]]):
    """The asyncio twin of :class:`Producer`: ``await producer.send(...)`` queues and returns a future.

    The same options: ``buffer_bytes`` makes ``send`` wait while that much is queued, ``max_in_flight`` caps
    the batches being sent at once."""

    def _begin(self) -> None:
        self._epoch_lock = contextlib.nullcontext()  # one task runs the steps at a time: nothing to guard
        self._acc: Accumulator[asyncio.Future[RecordMetadata]] = Accumulator(
            batch_bytes=self._batch_bytes, linger_s=self._linger_s
        )
        self._window_locks: dict[tuple[str, int], asyncio.Lock] = {}
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._room = asyncio.Event()  # set when a batch is answered: a sender over buffer_bytes looks again
        self._sending: asyncio.Semaphore | None = None  # max_in_flight; made in the loop that sends
        self._tasks: set[asyncio.Task[None]] = set()
        self._runner: asyncio.Task[None] | None = None

    async def _queue(
        self, topic: str, partition: int | None, key: bytes | None, value: bytes | None, record: RecordData | None
    ) -> asyncio.Future[RecordMetadata]:
        if self._closed:
            raise ProducerClosedError("the producer is closed")
        count = await self.partitions_for(topic)
        if self._idempotent and self._idempotence is None:
            self._idempotence = await self._run(_register(self.url, self._producer_id, self._producer_epoch))
        while self._acc.buffered_bytes >= self._buffer_bytes:  # back-pressure: wait for room
            self._room.clear()
            await self._room.wait()
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        chosen = choose_partition(key, partition, count, self._sticky, topic)
        if record is None:
            batch = self._acc.add_value(topic, chosen, key, value, time.monotonic())
        else:
            batch = self._acc.add(topic, chosen, record, time.monotonic())
        batch.futures.append((batch.count - 1, future))
        self._wake_sender()
        return future

    async def send_many(
        self, topic: str, records: ManyRecords, *, partition: int | None = None
    ) -> asyncio.Future[list[RecordMetadata]]:
        """The asyncio twin of :meth:`Producer.send_many`: ``await`` it for an ``asyncio.Future`` of the list of
        the records' :class:`RecordMetadata` (or the first record's error)."""
        if self._closed:
            raise ProducerClosedError("the producer is closed")
        items = records if isinstance(records, list) else list(records)
        count = await self.partitions_for(topic)
        if self._idempotent and self._idempotence is None:
            self._idempotence = await self._run(_register(self.url, self._producer_id, self._producer_epoch))
        groups = _plan_many(items, partition, count, topic)
        future: asyncio.Future[list[RecordMetadata]] = asyncio.get_running_loop().create_future()

        def finish(outcome: ManyOutcome) -> None:
            if future.done():
                return
            if outcome.error is not None:
                future.set_exception(outcome.error)
            else:
                future.set_result(outcome.metadata())

        outcome = ManyOutcome(topic, len(items), finish)
        for _ in _queue_many(self, topic, count, groups, outcome):  # the buffer is full: wait for room
            self._wake_sender()
            self._room.clear()
            await self._room.wait()
            if self._closed:
                raise ProducerClosedError("the producer was closed while send_many waited for room")
        self._wake_sender()
        outcome.release()
        return future

    def _wake_sender(self) -> None:
        if self._runner is None:
            self._runner = asyncio.get_running_loop().create_task(self._run_sender())
        self._idle.clear()
        self._wake.set()

    async def flush(self) -> None:
        self._flushing += 1
        self._wake.set()
        try:
            while not self._acc.empty:
                self._idle.clear()
                await self._idle.wait()
        finally:
            self._flushing -= 1

    async def close(self) -> None:
        if self._closed:
            return
        await self.wait_durable()
        self._closed = True
        self._wake.set()
        if self._runner is not None:
            await self._runner
        await self._transport.close()

    async def _deliver(
        self, window: PartitionWindow | None, queue: list[PendingBatch[asyncio.Future[RecordMetadata]]]
    ) -> BaseException | None:
        if self._sending is None:
            self._sending = asyncio.Semaphore(self._max_in_flight)
        async with self._sending:
            return await self._run(_deliver(self, window, queue))

    async def wait_durable(self, timeout: float | None = None) -> None:
        """The asyncio twin of :meth:`Producer.wait_durable`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        await self.flush()
        while True:
            pending = [(key, w) for key, w in self._windows.items() if not w.empty]
            if not pending:
                return
            for (topic, partition), window in pending:
                async with self._window_locks.setdefault((topic, partition), asyncio.Lock()):
                    await self._run(_poll_checkpoint(self, topic, partition, window))
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError("wait_durable timed out")
            await asyncio.sleep(0.01)

    async def _run_sender(self) -> None:
        while not (self._closed and self._acc.empty):
            for batch in self._acc.ready(time.monotonic(), flushing=self._flushing > 0 or self._closed):
                if self._sticky.get(batch.topic) == batch.partition:
                    del self._sticky[batch.topic]
                task = asyncio.get_running_loop().create_task(self._send(batch))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            wait = self._acc.next_deadline(time.monotonic())
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait if wait is not None else 0.5)

    async def _send(self, batch: PendingBatch[asyncio.Future[RecordMetadata]]) -> None:
        key = (batch.topic, batch.partition)
        if self._accepted:
            window = self._windows.setdefault(key, PartitionWindow())
            async with self._window_locks.setdefault(key, asyncio.Lock()):
                error = await self._deliver(window, [batch])
        else:
            error = await self._deliver(None, [batch])
        if isinstance(error, NotFoundError):
            self._partitions.pop(batch.topic, None)
        self._acc.done(batch)
        self._room.set()
        if self._acc.empty:
            self._idle.set()
        self._wake.set()
