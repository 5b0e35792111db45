"""The producer's sender (both twins): it sends a batch to its partition's owner until the batch is answered,
and answers its records.

One batch per partition in flight, in order; retriable errors are retried with backoff (at once to the owner
a 421 names) until ``delivery_timeout_s``; an idempotent producer's batches carry its id, epoch and sequence
(``talos._idempotence``). With ``acks="accepted"`` a batch is answered once the partition's durable
checkpoint passes it (``talos._window``): :func:`poll_checkpoint` asks how far that is, and a batch a reload
lost is sent again. Answers go to the records' futures (``talos._futures``) and ``send_many`` calls.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, Protocol
from urllib.parse import quote

from talos._accumulator import PendingBatch
from talos._codec import TRANSACTIONAL, build_batch
from talos._compression import Codec
from talos._errors import ApiError, ProducerFencedError, TalosError, TransportError
from talos._futures import BatchOutcome, RecordMetadata
from talos._idempotence import Idempotence, fenced_by_another, new_epoch
from talos._routing import RouteTable, refresh_steps
from talos._steps import Request, Steps, http, pause
from talos._transactions import TransactionState, add_partition
from talos._transport import Response, check
from talos._window import Accepted, PartitionWindow

log = logging.getLogger("talos.producer")

__all__ = ["deliver", "poll_checkpoint"]

_BATCH_HEADERS = {"content-type": "application/vnd.talos.batch"}


class _Sending(Protocol):
    """What the sender reads of a producer (``talos._producer``, which imports this module)."""

    @property
    def url(self) -> str: ...

    @property
    def _routes(self) -> RouteTable: ...

    @property
    def _idempotence(self) -> Idempotence | None: ...

    @property
    def _transaction(self) -> TransactionState | None: ...

    @property
    def _epoch_lock(self) -> contextlib.AbstractContextManager[Any]: ...  # held while a new epoch is asked for

    @property
    def _compression(self) -> Codec: ...

    @property
    def _params(self) -> dict[str, str]: ...

    @property
    def _windows(self) -> dict[tuple[str, int], PartitionWindow]: ...

    @property
    def _backoff_s(self) -> float: ...

    @property
    def _delivery_timeout_s(self) -> float: ...

    @property
    def _request_timeout_s(self) -> float: ...


def _path(topic: str, partition: int) -> str:
    return f"/v1/topics/{quote(topic, safe='')}/partitions/{partition}/messages"


def _retriable(error: BaseException) -> bool:
    return isinstance(error, TransportError) or (isinstance(error, ApiError) and error.retriable)


def _backoff(batch: PendingBatch[Any], base_s: float, error: BaseException) -> float:
    hinted = error.retry_after if isinstance(error, ApiError) and error.retry_after else 0.0
    # Capped at 1 s (Kafka's retry.backoff.max.ms): a partition that moved is back within a second or so.
    return float(max(min(base_s * 2 ** min(batch.attempts, 6), 1.0), hinted))


def _produce_request(producer: _Sending, batch: PendingBatch[Any]) -> dict[str, Any]:
    """Keyword arguments of the transport call that sends ``batch`` (both twins)."""
    base, route_headers = producer._routes.target(batch.topic, batch.partition)
    producer_fields = producer._idempotence.fields(batch) if producer._idempotence is not None else {}
    body, first, largest = batch.section()
    params = _params_for(producer, batch)
    attributes = 0
    if producer._transaction is not None:
        params = {**params, "transactional_id": producer._transaction.transactional_id}
        attributes = TRANSACTIONAL
    built = build_batch(
        body, batch.count, first, largest, compression=producer._compression, attributes=attributes, **producer_fields
    )
    return {
        "url": base + _path(batch.topic, batch.partition),
        "params": params,
        "body": built,
        "headers": {**_BATCH_HEADERS, **route_headers} if route_headers else _BATCH_HEADERS,
        "timeout": producer._request_timeout_s,
    }


def _params_for(producer: _Sending, batch: PendingBatch[Any]) -> dict[str, str]:
    window = producer._windows.get((batch.topic, batch.partition))
    if window is None or window.session is None:
        return producer._params
    return {**producer._params, "session": str(window.session)}


def _retry_delay(producer: _Sending, batch: PendingBatch[Any], error: BaseException | None) -> float | None:
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
            if producer._transaction is not None:
                producer._transaction.failed = error  # the transaction can only abort (which moves the epoch on)
            elif idempotence is not None and batch.epoch in (None, idempotence.epoch):
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


def deliver(
    producer: _Sending, window: PartitionWindow | None, queue: list[PendingBatch[Any]]
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
                    yield from new_epoch(producer._idempotence, producer.url, producer._epoch_lock)
                if producer._transaction is not None:
                    yield from add_partition(
                        producer.url, producer._transaction, producer._idempotence, batch.topic, batch.partition
                    )
            result = _result((yield from http(Request("POST", **_produce_request(producer, batch)))))
        except ProducerFencedError as exc:
            error = exc
            idempotence = producer._idempotence
            if idempotence is not None and fenced_by_another(exc, idempotence.epoch):
                idempotence.fenced = exc
        except Exception as exc:
            error = exc
        delay = _after_attempt(producer, window, queue, result, error)
        if delay:
            yield from pause(delay)  # the partition stays busy meanwhile: order holds
    return error


def poll_checkpoint(producer: _Sending, topic: str, partition: int, window: PartitionWindow) -> Steps[None]:
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
    if resend and (error := (yield from deliver(producer, window, resend))) is not None:
        log.warning("resending to %s/%d after a reload failed: %r", topic, partition, error)


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
    producer: _Sending,
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
