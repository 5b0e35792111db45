"""An idempotent producer's identity: its id, epoch and next sequence per partition (no I/O), the steps that
ask the cluster for them (:func:`register`, :func:`new_epoch`), and when a ``PRODUCER_FENCED`` answer ends
the instance (:func:`fenced_by_another`). Both twins; the sender (``talos._sender``) stamps batches with them.
"""

from __future__ import annotations

import contextlib
from typing import Any

import orjson

from talos._accumulator import PendingBatch
from talos._errors import ProducerFencedError
from talos._steps import Request, Steps, http
from talos._transport import check

__all__ = ["Idempotence", "fenced_by_another", "new_epoch", "register"]


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


def register(url: str, producer_id: int | None, epoch: int | None) -> Steps[Idempotence]:
    """Ask for a producer id (or a new epoch of ``producer_id``): the start of an idempotent producer. With
    an ``epoch`` (a named producer's, claimed through the admin API) there is nothing to ask."""
    if producer_id is not None and epoch is not None:
        return Idempotence(producer_id, epoch)
    answer = check((yield from http(Request("POST", **_init_request(url, producer_id))))).json()
    return Idempotence(answer["producer_id"], answer["producer_epoch"])  # type: ignore[index]


def fenced_by_another(error: ProducerFencedError, epoch: int) -> bool:
    """Whether the epoch that fenced a batch is newer than this producer's own: another instance took the id
    over. (A batch sent before this producer moved to a new epoch itself is fenced by that epoch: only that
    batch fails.)"""
    current = error.details.get("current_epoch")
    return not isinstance(current, int) or current > epoch


def new_epoch(idempotence: Idempotence, url: str, lock: contextlib.AbstractContextManager[Any]) -> Steps[None]:
    """Ask for a new epoch once a batch failed for good (``stale``: its sequences are a gap). ``lock``: the
    blocking producer's sender threads: one asks, the others see it done."""
    with lock:
        if idempotence.stale:
            request = Request("POST", **_init_request(url, idempotence.producer_id))
            idempotence.restart(check((yield from http(request))).json()["producer_epoch"])  # type: ignore[index]
