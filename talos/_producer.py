"""``Producer`` (a background sender thread) and ``AsyncProducer`` (a background task).

Records are batched per partition by size and linger (``talos._accumulator``; what ``send`` and ``send_many``
queue: ``talos._send_planning``), sent as binary record batches to
``POST /v1/topics/{t}/partitions/{p}/messages``, one request in flight per partition (so order holds),
retried with backoff on retriable errors, and answered through futures (the sender: ``talos._sender``;
idempotence: ``talos._idempotence``). This module holds what the twins are: settings, and how each waits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from abc import abstractmethod
from collections.abc import Coroutine, Mapping
from typing import Any, Generic, TypeVar

from talos._accumulator import Accumulator, PendingBatch, choose_partition
from talos._admin import DEFAULT_URL
from talos._clients import Asynchronous, Blocking, ClientBase, operation
from talos._codec import RecordData
from talos._compression import codec_named
from talos._errors import NotFoundError, TalosError, TransactionStateError
from talos._futures import BatchOutcome, ManyOutcome, RecordFuture, RecordMetadata, RecordsFuture
from talos._idempotence import Idempotence, register
from talos._routing import RouteTable, refresh_steps
from talos._send_planning import Headers, ManyRecords, build_record, plan_many, queue_many, with_header
from talos._sender import deliver, poll_checkpoint
from talos._steps import Steps
from talos._tls import TLSOption
from talos._tracecontext import TRACEPARENT_HEADER, current_traceparent
from talos._transactions import TransactionState, end_transaction, init_transactions, send_offsets
from talos._transport import AnyTransport, AsyncTransport, Transport
from talos._window import PartitionWindow

__all__ = ["AsyncProducer", "Producer", "ProducerClosedError"]

Queued = TypeVar("Queued")  # what ``send`` returns: a future, or a coroutine giving one


class ProducerClosedError(TalosError):
    """send() after close()."""


def _partition_count(producer: _Producer[Any, Any], topic: str) -> Steps[int]:
    count = producer._partitions.get(topic)
    if count is None:
        yield from refresh_steps(producer._routes, topic, strict=True)
        count = producer._routes.partitions[topic]
        producer._partitions[topic] = count
    return count


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
        tls: TLSOption = None,
        compression: str = "none",
        trace_context: bool = False,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
    ) -> None:
        if acks not in ("durable", "accepted"):
            raise ValueError("acks must be 'durable' or 'accepted'")
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self._compression = codec_named(compression)  # of every batch's records, once built
        self.url = url.rstrip("/")
        self._transport = self._connect(transport, token, request_timeout_s, max_in_flight * 2, tls)
        self._routes = RouteTable(self.url, direct=route_to_owner)
        self._transaction = (
            None if transactional_id is None else TransactionState(transactional_id, transaction_timeout_ms)
        )
        if self._transaction is not None and producer_id is not None:
            raise ValueError("a transactional producer gets its producer id from its transactional id")
        self._idempotent = idempotent or producer_id is not None or self._transaction is not None
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

    def _identity(self) -> Steps[Idempotence]:
        """The producer id and epoch: the transactional id's (which fences its older instances), or a new or
        given idempotent one."""
        if self._transaction is not None:
            return init_transactions(self.url, self._transaction)
        return register(self.url, self._producer_id, self._producer_epoch)

    # ---------------------------------------------------------------- transactions

    def _transactional(self) -> TransactionState:
        if self._transaction is None:
            raise TransactionStateError("not a transactional producer: give it a transactional_id")
        return self._transaction

    def begin_transaction(self) -> None:
        """Open a transaction: what is sent until :meth:`commit_transaction` is stored all or nothing, for
        read-committed consumers, with the offsets given to :meth:`send_offsets_to_transaction`."""
        self._transactional().begin()

    @operation
    def send_offsets_to_transaction(
        self, offsets: Mapping[tuple[str, int], int], group: str, *, member_id: str | None = None
    ) -> Steps[None]:
        """Commit ``group``'s ``offsets`` (partition → next offset to read) in the open transaction: they take
        effect if it commits (consume-transform-produce, exactly once). ``member_id``: the group member that
        holds the partitions (its commit is refused once it does not)."""
        state = self._transactional()
        if self._idempotence is None:
            self._idempotence = yield from self._identity()
        yield from send_offsets(self.url, state, self._idempotence, offsets, group, member_id)

    def _end(self, *, commit: bool) -> Steps[None]:
        state = self._transactional()
        if self._idempotence is None:
            state.require_open()
            state.open = False  # nothing was sent: nothing to end
            return
        yield from end_transaction(self.url, state, self._idempotence, commit=commit)

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
        if self._transaction is not None:
            self._transaction.require_open()
        if isinstance(value, str):
            value = value.encode()
        if isinstance(key, str):
            key = key.encode()
        if self._trace_context and (traceparent := current_traceparent()) is not None:
            headers = with_header(headers, TRACEPARENT_HEADER, traceparent)
        if (
            headers
            or timestamp is not None
            or (value is not None and type(value) is not bytes)
            or (key is not None and type(key) is not bytes)
        ):  # (other types than bytes are left to the encoder, in the sender, as they always were)
            return self._queue(topic, partition, key, None, build_record(value, key, headers, timestamp))
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
    :class:`ProducerFencedError`. ``transactional_id=`` makes a transactional producer (idempotent too): its
    sends go between :meth:`begin_transaction` and :meth:`commit_transaction` (or
    :meth:`abort_transaction`), all stored or none for read-committed consumers; a new instance with the
    same id fences this one and aborts its open transaction; one open past ``transaction_timeout_ms`` is
    aborted by the server. ``route_to_owner=False`` sends everything
    to ``url`` (which forwards) instead of straight to each partition's owner. ``token=`` is the bearer
    token for servers with auth on (default: ``TALOS_TOKEN``); over a quota, batches wait what the 429
    says and go again. ``compression=`` ("gzip", "snappy", "lz4" or "zstd"; default "none") compresses each
    batch's records as Kafka does; consumers decompress them.
    """

    def _begin(self) -> None:
        if self._idempotent:
            self._idempotence = self._run(self._identity())
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
        return self._run(deliver(self, window, queue))

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
                    self._run(poll_checkpoint(self, topic, partition, window))
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

    def commit_transaction(self) -> None:
        """Send everything of the open transaction, then commit it: when this returns it is decided, and its
        records and offsets are visible to read-committed readers. Raises :class:`TransactionStateError` if
        one of its records was not stored (then :meth:`abort_transaction`)."""
        self.flush()
        self._run(self._end(commit=True))

    def abort_transaction(self) -> None:
        """Abort the open transaction: read-committed readers never see its records, its offsets are
        dropped."""
        self.flush()
        self._run(self._end(commit=False))

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
        if self._transaction is not None:
            self._transaction.require_open()
        items = records if isinstance(records, list) else list(records)
        count = self._partitions.get(topic) or self.partitions_for(topic)
        groups = plan_many(items, partition, count, topic)
        future = RecordsFuture(topic, len(items))
        with self._mutex:
            if self._closed:
                raise ProducerClosedError("the producer is closed")
            for _ in queue_many(self, topic, count, groups, future.outcome):  # the buffer is full: wait for room
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
            self._idempotence = await self._run(self._identity())
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
        if self._transaction is not None:
            self._transaction.require_open()
        items = records if isinstance(records, list) else list(records)
        count = await self.partitions_for(topic)
        if self._idempotent and self._idempotence is None:
            self._idempotence = await self._run(self._identity())
        groups = plan_many(items, partition, count, topic)
        future: asyncio.Future[list[RecordMetadata]] = asyncio.get_running_loop().create_future()

        def finish(outcome: ManyOutcome) -> None:
            if future.done():
                return
            if outcome.error is not None:
                future.set_exception(outcome.error)
            else:
                future.set_result(outcome.metadata())

        outcome = ManyOutcome(topic, len(items), finish)
        for _ in queue_many(self, topic, count, groups, outcome):  # the buffer is full: wait for room
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

    async def init_transactions(self) -> None:
        """Start the transactional id now (else at the first send): its new epoch fences older instances and
        aborts their open transaction."""
        if self._idempotence is None:
            self._transactional()
            self._idempotence = await self._run(self._identity())

    async def commit_transaction(self) -> None:
        """The asyncio twin of :meth:`Producer.commit_transaction`."""
        await self.flush()
        await self._run(self._end(commit=True))

    async def abort_transaction(self) -> None:
        """The asyncio twin of :meth:`Producer.abort_transaction`."""
        await self.flush()
        await self._run(self._end(commit=False))

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
            return await self._run(deliver(self, window, queue))

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
                    await self._run(poll_checkpoint(self, topic, partition, window))
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
