"""Transactions through the Python SDK against a real standalone server: the consume-transform-produce loop
(a group consumer, a transactional producer, ``send_offsets_to_transaction``) moves every input record to the
output exactly once across an abort and a restart of the processor; read-committed consumers see only
committed transactions; the asyncio twin does the same; a second instance fences the first."""

from __future__ import annotations

import asyncio
import time

import pytest

from server.devservices import StandaloneServer
from talos import (
    Admin,
    AsyncConsumer,
    AsyncProducer,
    Consumer,
    Producer,
    ProducerFencedError,
    TransactionStateError,
)


def drain(consumer: Consumer, count: int, timeout: float = 20.0) -> list[bytes | None]:
    out: list[bytes | None] = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        out += [m.value for m in consumer.poll(0.5)]
    return out


def test_consume_transform_produce_moves_each_record_exactly_once(server: StandaloneServer) -> None:
    with Admin(server.url) as admin:
        admin.create_topic("ctp-in", partitions=1)
        admin.create_topic("ctp-out", partitions=2)
    with Producer(server.url) as feeder:
        for i in range(30):
            feeder.send("ctp-in", f"{i}".encode(), partition=0)

    def process(limit: int, *, abort_first: bool) -> None:
        """One processor instance: read from the group's committed offsets, write doubled values and the
        offsets in one transaction per poll; optionally abort its first transaction (nothing of it counts)."""
        with (
            Consumer(server.url, topics=["ctp-in"], group="ctp", auto_commit=False, isolation="read_committed") as c,
            Producer(server.url, transactional_id="ctp-processor") as p,
        ):
            done, aborted = 0, False
            deadline = time.monotonic() + 30
            while done < limit and time.monotonic() < deadline:
                messages = c.poll(0.5, max_messages=7)
                if not messages:
                    continue
                p.begin_transaction()
                for m in messages:
                    p.send("ctp-out", str(2 * int(m.value or b"0")).encode(), key=m.value)
                p.send_offsets_to_transaction({("ctp-in", 0): messages[-1].offset + 1}, "ctp", member_id=c.member_id)
                if abort_first and not aborted:
                    p.abort_transaction()
                    aborted = True
                    c.seek("ctp-in", 0, messages[0].offset)  # read them again: the abort dropped their output
                    continue
                p.commit_transaction()
                done += len(messages)

    process(14, abort_first=True)  # stops part way (as a crash between transactions would)
    process(16, abort_first=False)  # a new instance goes on from the committed offsets
    with Consumer(server.url, topics=["ctp-out"], isolation="read_committed") as reader:
        got = sorted(int(v or b"-1") for v in drain(reader, 30))
    assert got == sorted(2 * i for i in range(30))
    with Consumer(server.url, topics=["ctp-out"]) as everything:
        assert len(drain(everything, 37)) == 37  # read-uncommitted: the aborted transaction's 7 too


def test_the_asyncio_producer_and_consumer(server: StandaloneServer) -> None:
    async def scenario() -> list[bytes | None]:
        async with AsyncProducer(server.url, transactional_id="async-writer") as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            await producer.send("async-txn", b"kept", partition=0)
            await producer.commit_transaction()
            producer.begin_transaction()
            await producer.send("async-txn", b"dropped", partition=0)
            await producer.abort_transaction()
        async with AsyncConsumer(server.url, topics=["async-txn"], isolation="read_committed") as consumer:
            out: list[bytes | None] = []
            deadline = time.monotonic() + 10
            while not out and time.monotonic() < deadline:
                out += [m.value for m in await consumer.poll(0.5)]
            await asyncio.sleep(0.5)
            out += [m.value for m in await consumer.poll(0.5)]
            return out

    with Admin(server.url) as admin:
        admin.create_topic("async-txn", partitions=1)
    assert asyncio.run(scenario()) == [b"kept"]


def test_a_new_instance_fences_the_old_and_sends_outside_a_transaction_are_refused(server: StandaloneServer) -> None:
    with Admin(server.url) as admin:
        admin.create_topic("fenced-txn", partitions=1)
    old = Producer(server.url, transactional_id="fenced-writer")
    try:
        with pytest.raises(TransactionStateError):
            old.send("fenced-txn", b"outside")
        old.begin_transaction()
        old.send("fenced-txn", b"zombie")
        old.flush()
        with Producer(server.url, transactional_id="fenced-writer") as new:
            new.begin_transaction()
            new.send("fenced-txn", b"fresh")
            new.commit_transaction()
        with pytest.raises(ProducerFencedError):
            old.commit_transaction()
    finally:
        old._transaction = None  # closing flushes nothing more
        old.close()
    with Consumer(server.url, topics=["fenced-txn"], isolation="read_committed") as reader:
        assert drain(reader, 1) == [b"fresh"]
