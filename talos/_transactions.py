"""A transactional producer's transactions: the state of the open one (no I/O) and the steps that ask its
coordinator (``/v1/transactions/{id}/...``) to start the id, add partitions and a group's offsets, and
commit or abort. Both twins; the sender (``talos._sender``) adds a partition before its first batch in a
transaction and marks batches transactional.

Each commit or abort moves the producer to a new epoch (KIP-890 part 2): a message of this transaction that
arrives late, or a retried commit, can never touch the next one.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import orjson

from talos._errors import ApiError, TransactionStateError, TransportError
from talos._idempotence import Idempotence
from talos._steps import Request, Steps, http, pause
from talos._transport import check

__all__ = ["TransactionState", "add_partition", "end_transaction", "init_transactions", "send_offsets"]

_JSON = {"content-type": "application/json"}
_RETRY_FOR_S = 120.0  # a coordinator that moves is back within seconds; the markers of the last end too
_CONCURRENT_PAUSE_S = 0.05  # CONCURRENT_TRANSACTIONS: the previous transaction's markers are being written


class TransactionState:
    """The transactional id and what the open transaction has added (shared by the twins; no I/O)."""

    def __init__(self, transactional_id: str, timeout_ms: int) -> None:
        if not transactional_id or len(transactional_id) > 249:
            raise ValueError("transactional_id is 1-249 characters")
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.open = False
        self.partitions: set[tuple[str, int]] = set()
        self.groups: set[str] = set()
        # A batch of the open transaction failed for good: it cannot commit, only abort.
        self.failed: BaseException | None = None

    def begin(self) -> None:
        if self.open:
            raise TransactionStateError("a transaction is already open: commit or abort it first")
        self.open = True
        self.partitions.clear()
        self.groups.clear()
        self.failed = None

    def require_open(self) -> None:
        if not self.open:
            raise TransactionStateError("no transaction is open: call begin_transaction() first")

    def path(self, leaf: str) -> str:
        return f"/v1/transactions/{quote(self.transactional_id, safe='')}/{leaf}"


def _post(url: str, body: dict[str, Any]) -> Steps[dict[str, Any]]:
    """POST ``body``, asked again while the answer is retriable: CONCURRENT_TRANSACTIONS (the previous
    transaction still completing), a coordinator moving or unreachable, no answer. Every call here may be
    repeated: a repeated end is answered as the retry it is (the epoch it names is the one before its bump)."""
    deadline = time.monotonic() + _RETRY_FOR_S
    attempt = 0
    while True:
        request = Request("POST", url, body=orjson.dumps(body), headers=_JSON)
        try:
            answer = check((yield from http(request))).json()
        except (ApiError, TransportError) as exc:
            if isinstance(exc, ApiError) and not exc.retriable:
                raise
            if time.monotonic() > deadline:
                raise
            concurrent = isinstance(exc, ApiError) and exc.code == "CONCURRENT_TRANSACTIONS"
            yield from pause(_CONCURRENT_PAUSE_S if concurrent else min(0.1 * 2**attempt, 1.0))
            attempt += 1
            continue
        assert isinstance(answer, dict)
        return answer


def init_transactions(url: str, state: TransactionState) -> Steps[Idempotence]:
    """Start the id (or take it over): its producer id and a new epoch, which fences every older instance;
    an older instance's open transaction is aborted."""
    answer = yield from _post(url + state.path("init"), {"timeout_ms": state.timeout_ms})
    return Idempotence(int(answer["producer_id"]), int(answer["producer_epoch"]))


def _ids(idempotence: Idempotence) -> dict[str, int]:
    return {"producer_id": idempotence.producer_id, "producer_epoch": idempotence.epoch}


def add_partition(
    url: str, state: TransactionState, idempotence: Idempotence, topic: str, partition: int
) -> Steps[None]:
    """Add the partition to the open transaction before its first batch there (once per transaction)."""
    if (topic, partition) in state.partitions:
        return
    state.require_open()
    body = {"partitions": [{"topic": topic, "partition": partition}], **_ids(idempotence)}
    yield from _post(url + state.path("partitions"), body)
    state.partitions.add((topic, partition))


def send_offsets(
    url: str,
    state: TransactionState,
    idempotence: Idempotence,
    offsets: Mapping[tuple[str, int], int],
    group: str,
    member_id: str | None,
) -> Steps[None]:
    """Commit ``offsets`` (partition → next offset to read) for ``group`` in the open transaction: they take
    effect if it commits."""
    state.require_open()
    if group not in state.groups:
        yield from _post(url + state.path("groups"), {"group": group, **_ids(idempotence)})
        state.groups.add(group)
    body: dict[str, Any] = {
        "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in offsets.items()],
        "transaction": {"transactional_id": state.transactional_id, **_ids(idempotence)},
    }
    if member_id is not None:
        body["member_id"] = member_id
    yield from _post(f"{url}/v1/groups/{quote(group, safe='')}/offsets", body)


def end_transaction(url: str, state: TransactionState, idempotence: Idempotence, *, commit: bool) -> Steps[None]:
    """Commit or abort the open transaction (everything sent in it answered first: the twin flushed). The
    producer goes on with the epoch (or producer id) the coordinator answers. A transaction that added
    nothing ends here, without a request."""
    state.require_open()
    if commit and state.failed is not None:
        raise TransactionStateError(
            f"a message of this transaction was not stored ({state.failed!r}): abort_transaction() and retry"
        ) from state.failed
    if state.partitions or state.groups:
        answer = yield from _post(url + state.path("end"), {"commit": commit, **_ids(idempotence)})
        idempotence.producer_id = int(answer["producer_id"])
        idempotence.restart(int(answer["producer_epoch"]))
    state.open = False
    state.partitions.clear()
    state.groups.clear()
    state.failed = None
