"""The transaction handlers' pure parts: which Kafka code a coordinator's refusal becomes for a request's version
(PRODUCER_FENCED only for the versions whose clients know it, KIP-588), what a transactional Produce's failure
is disguised as (KIP-890 part 1), and ListTransactions' filters."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any, cast

import pytest

from server.broker import NotOwnerError
from server.cluster import Owner
from server.errors import ApiError
from server.kafka.context import Context
from server.kafka.failures import error_code
from server.kafka.produce import _produce_error
from server.kafka.protocol.errors import ErrorCode
from server.kafka.txn import list_transactions, transaction_error
from server.transactions.state import TxnError, TxnErrorCode

INIT, ADD_PARTITIONS, ADD_OFFSETS, END, TXN_OFFSET_COMMIT = 22, 24, 25, 26, 28


def refusal(code: TxnErrorCode) -> ApiError:
    return TxnError(code, "refused").api_error()


@pytest.mark.parametrize(
    ("api_key", "version", "expected"),
    [
        (INIT, 3, ErrorCode.INVALID_PRODUCER_EPOCH),
        (INIT, 4, ErrorCode.PRODUCER_FENCED),
        (ADD_PARTITIONS, 1, ErrorCode.INVALID_PRODUCER_EPOCH),
        (ADD_PARTITIONS, 2, ErrorCode.PRODUCER_FENCED),
        (ADD_OFFSETS, 0, ErrorCode.INVALID_PRODUCER_EPOCH),
        (ADD_OFFSETS, 3, ErrorCode.PRODUCER_FENCED),
        (END, 1, ErrorCode.INVALID_PRODUCER_EPOCH),
        (END, 2, ErrorCode.PRODUCER_FENCED),
        (TXN_OFFSET_COMMIT, 3, ErrorCode.INVALID_PRODUCER_EPOCH),  # never PRODUCER_FENCED
    ],
)
def test_producer_fenced_is_gated_by_version(api_key: int, version: int, expected: ErrorCode) -> None:
    assert transaction_error(refusal(TxnErrorCode.PRODUCER_FENCED), api_key, version) == expected


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (TxnErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.CONCURRENT_TRANSACTIONS),
        (TxnErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_TXN_STATE),
        (TxnErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.INVALID_PRODUCER_ID_MAPPING),
        (TxnErrorCode.INVALID_TRANSACTION_TIMEOUT, ErrorCode.INVALID_TRANSACTION_TIMEOUT),
        (TxnErrorCode.TRANSACTIONAL_ID_NOT_FOUND, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND),
        # A connector task's lease on the id: Kafka clients retry CONCURRENT_TRANSACTIONS until it runs out
        (TxnErrorCode.PRODUCER_BUSY, ErrorCode.CONCURRENT_TRANSACTIONS),
    ],
)
def test_coordinator_refusals_keep_their_kafka_code(code: TxnErrorCode, expected: ErrorCode) -> None:
    assert transaction_error(refusal(code), END, 4) == expected
    assert error_code(refusal(code)) == expected


def test_a_moved_coordinator_is_not_coordinator() -> None:
    moved = NotOwnerError(Owner("elsewhere", "http://elsewhere:8080", False))
    assert transaction_error(moved, END, 1) == ErrorCode.NOT_COORDINATOR


def test_transactional_produce_failures() -> None:
    busy = refusal(TxnErrorCode.CONCURRENT_TRANSACTIONS)
    assert _produce_error(busy, "tx") == ErrorCode.NOT_ENOUGH_REPLICAS  # retried, as Kafka's leader asks
    assert _produce_error(ApiError(409, "INVALID_TXN_STATE", "not in it"), "tx") == ErrorCode.INVALID_TXN_STATE
    assert _produce_error(ApiError(409, "PRODUCER_FENCED", "old"), "tx") == ErrorCode.INVALID_PRODUCER_EPOCH
    assert _produce_error(busy, None) == ErrorCode.CONCURRENT_TRANSACTIONS


def test_list_transactions_filters() -> None:
    now = int(time.time() * 1000)
    states = [
        {"transactional_id": "a", "producer_id": 1, "state": "Ongoing", "start_ms": now - 60_000},
        {"transactional_id": "b", "producer_id": 2, "state": "Ongoing", "start_ms": now - 10},
        {"transactional_id": "c", "producer_id": 3, "state": "CompleteCommit", "start_ms": -1},
    ]
    ctx = cast(
        Context,
        SimpleNamespace(
            broker=SimpleNamespace(security=SimpleNamespace(enabled=False)),
            session=SimpleNamespace(principal=SimpleNamespace(tenant=None)),
            transactions=SimpleNamespace(coordinated=lambda tenant: states),
        ),
    )

    def listed(body: dict[str, Any]) -> tuple[list[str], list[str]]:
        answer = asyncio.run(list_transactions(ctx, body))
        return [t["transactional_id"] for t in answer["transaction_states"]], answer["unknown_state_filters"]

    assert listed({}) == (["a", "b", "c"], [])
    assert listed({"state_filters": ["Ongoing", "Nonsense"]}) == (["a", "b"], ["Nonsense"])
    assert listed({"producer_id_filters": [3, 99]}) == (["c"], [])
    assert listed({"duration_filter": 30_000}) == (["a"], [])  # only transactions open longer than that
