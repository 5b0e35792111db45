"""The records of ``__transaction_state`` (``server.transactions.records``): every state survives its record,
the fold of a partition keeps each id's newest state and forgets tombstoned ones, and a record this version
cannot read is skipped with a warning instead of stopping a coordinator's load."""

from __future__ import annotations

import dataclasses
import logging

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from server.partition.producer_ids import name_key
from server.transactions.records import (
    PARTITIONS,
    TRANSACTION_STATE_TOPIC,
    decode,
    fold,
    key_of,
    partition_of,
    state_record,
    tombstone,
    topic_config,
)
from server.transactions.state import TxnMetadata, TxnStatus
from talos import partition_for_key


def meta(transactional_id: str = "tx", tenant: str | None = "acme", **changes: object) -> TxnMetadata:
    base = TxnMetadata(
        transactional_id=transactional_id,
        tenant=tenant,
        producer_id=42,
        producer_epoch=3,
        timeout_ms=60_000,
        status=TxnStatus.ONGOING,
        partitions=frozenset({("orders", 0), ("__consumer_offsets", 5)}),
        start_ms=1_000,
        updated_ms=1_500,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


metadata = st.builds(
    TxnMetadata,
    transactional_id=st.text(min_size=1, max_size=20),
    tenant=st.none() | st.text(max_size=10),
    producer_id=st.integers(0, 2**63 - 1),
    producer_epoch=st.integers(0, 32767),
    last_producer_epoch=st.just(-1),
    previous_producer_id=st.integers(-1, 2**63 - 1),
    next_producer_id=st.integers(-1, 2**63 - 1),
    timeout_ms=st.integers(1, 900_000),
    status=st.sampled_from([s for s in TxnStatus if s is not TxnStatus.DEAD]),
    partitions=st.frozensets(st.tuples(st.text(min_size=1, max_size=12), st.integers(0, 4095)), max_size=6),
    start_ms=st.integers(-1, 2**50),
    updated_ms=st.integers(0, 2**50),
    bumped=st.booleans(),
)


@given(metadata)
def test_round_trip(state: TxnMetadata) -> None:
    key, value = state_record(state)
    assert key == name_key(state.tenant, state.transactional_id).encode()
    assert orjson.loads(value)["v"] == 1
    assert decode(key, value) == (key.decode(), state)


def test_the_last_epoch_is_not_stored() -> None:
    """As in Kafka: after a reload a KIP-360 retry of a resume that succeeded is fenced."""
    key, value = state_record(meta(last_producer_epoch=2))
    _text, back = decode(key, value)
    assert back == meta(last_producer_epoch=-1)


def test_fold_keeps_the_newest_state_of_each_id() -> None:
    first = meta(producer_epoch=1)
    other = meta("other", producer_epoch=9)
    newer = meta(producer_epoch=2, status=TxnStatus.PREPARE_COMMIT)
    newest = meta(producer_epoch=2, status=TxnStatus.COMPLETE_COMMIT, partitions=frozenset(), start_ms=-1)
    states = fold([state_record(first), state_record(other), state_record(newer), state_record(newest)])
    assert states == {key_of("acme", "tx").decode(): newest, key_of("acme", "other").decode(): other}


def test_a_tombstone_forgets_the_id_until_it_is_made_again() -> None:
    again = meta(producer_id=77, producer_epoch=0, status=TxnStatus.EMPTY, partitions=frozenset(), start_ms=-1)
    key = key_of("acme", "tx").decode()
    assert fold([state_record(meta()), tombstone("acme", "tx")]) == {}
    assert fold([state_record(meta()), tombstone("acme", "tx"), state_record(again)]) == {key: again}
    assert fold([tombstone("acme", "tx")]) == {}  # compaction left the tombstone only
    assert decode(*tombstone("acme", "tx")) == (key, None)


def test_a_dead_state_is_forgotten_like_a_tombstone() -> None:
    dead = meta(status=TxnStatus.DEAD, partitions=frozenset(), start_ms=-1)
    assert fold([state_record(meta()), state_record(dead)]) == {}


def test_tenants_keep_their_ids_apart() -> None:
    mine, theirs, admin = meta(tenant="acme"), meta(tenant="globex", producer_id=5), meta(tenant=None, producer_id=6)
    states = fold([state_record(mine), state_record(theirs), state_record(admin), tombstone("globex", "tx")])
    assert states == {key_of("acme", "tx").decode(): mine, key_of(None, "tx").decode(): admin}


@pytest.mark.parametrize(
    "value",
    [
        b"not json",
        b"[1, 2]",
        orjson.dumps({"v": 2, "transactional_id": "tx"}),  # a newer version
        orjson.dumps({k: v for k, v in orjson.loads(state_record(meta())[1]).items() if k != "producer_epoch"}),
        orjson.dumps({**orjson.loads(state_record(meta())[1]), "status": "Bogus"}),
        orjson.dumps({**orjson.loads(state_record(meta())[1]), "producer_id": "42"}),
        orjson.dumps({**orjson.loads(state_record(meta())[1]), "partitions": [["orders"]]}),
        orjson.dumps({**orjson.loads(state_record(meta())[1]), "transactional_id": "someone-else"}),  # not its key
    ],
)
def test_an_unreadable_record_is_skipped_with_a_warning(value: bytes, caplog: pytest.LogCaptureFixture) -> None:
    good = meta(producer_epoch=1)
    key = key_of("acme", "tx")
    with pytest.raises(ValueError):  # noqa: PT011 - every reason is a ValueError
        decode(key, value)
    with caplog.at_level(logging.WARNING, logger="talos.transactions"):
        states = fold([state_record(good), (key, value)])
    assert states == {key.decode(): good}  # the earlier state stands
    assert TRANSACTION_STATE_TOPIC in caplog.text


def test_a_record_without_a_key_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="talos.transactions"):
        assert fold([(None, state_record(meta())[1])]) == {}
    assert "without a key" in caplog.text


def test_partition_of_is_the_groups_function_over_the_key() -> None:
    for tenant in ("acme", None):
        for partitions in (1, 8, 50):
            expected = partition_for_key(name_key(tenant, "orders-tx").encode(), partitions)
            assert partition_of(tenant, "orders-tx", partitions) == expected
    # Fixed values: the same in every process and release (a change would move every id's coordinator).
    assert (
        partition_of("acme", "orders-tx"),
        partition_of(None, "orders-tx"),
        partition_of("acme", "orders-tx", 50),
    ) == (
        0,
        7,
        4,
    )


def test_topic_config() -> None:
    config = topic_config(created_ms=123)
    assert (config.name, config.partitions, config.cleanup_policy, config.created_ms) == (
        TRANSACTION_STATE_TOPIC,
        PARTITIONS,
        "compact",
        123,
    )
    assert config.retention_ms is None  # compaction keeps every live id's newest state for ever
    assert topic_config(16, created_ms=1).partitions == 16
