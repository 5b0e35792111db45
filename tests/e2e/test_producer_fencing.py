"""Named producers and fencing against a real ``talos standalone`` (issue 22, part 1's server side).

A named producer is one id per (tenant, name); each claim bumps its epoch. A fence makes every partition of a
topic refuse the older epochs, also partitions the new instance never writes to, and also after the server
restarts (a load forgets fences, so the partition asks the allocator the first time it sees the producer).
Before this work a zombie could keep writing to any partition the new instance had not written to yet.
"""

from __future__ import annotations

import httpx
import pytest

from talos import (
    Admin,
    ConflictError,
    Consumer,
    InvalidRequestError,
    NotFoundError,
    Producer,
    ProducerFencedError,
    ProducerIdentity,
    TalosError,
)
from tests.e2e.conftest import StandaloneServer
from tests.helpers import partition_values


@pytest.mark.slow
def test_a_named_producer_keeps_its_id_and_each_claim_bumps_the_epoch(server: StandaloneServer) -> None:
    with Admin(server.url) as admin:
        first = admin.claim_producer("bumps")
        second = admin.claim_producer("bumps")
        other = admin.claim_producer("another")
    assert second.producer_id == first.producer_id
    assert second.producer_epoch == first.producer_epoch + 1
    assert other.producer_id != first.producer_id


@pytest.mark.slow
def test_a_fence_refuses_the_old_epoch_on_partitions_the_new_instance_never_wrote(server: StandaloneServer) -> None:
    topic = "fenced-zombie"
    with Admin(server.url) as admin:
        admin.create_topic(topic, partitions=3)
        old = admin.claim_producer("zombie-task")
        with Producer(server.url, producer_id=old.producer_id, producer_epoch=old.producer_epoch) as zombie:
            zombie.send(topic, b"before", partition=2).result(10)
            new = admin.claim_producer("zombie-task")
            admin.fence_topic(topic, new)
            # The new instance writes only to partition 0; partition 2 still refuses the zombie.
            with Producer(server.url, producer_id=new.producer_id, producer_epoch=new.producer_epoch) as fresh:
                fresh.send(topic, b"new", partition=0).result(10)
            with pytest.raises(ProducerFencedError):
                zombie.send(topic, b"late", partition=2).result(10)
            # Once fenced, the zombie never takes a new epoch of its own (which would fence the new one).
            with pytest.raises(ProducerFencedError):
                zombie.send(topic, b"later", partition=1).result(10)
    assert partition_values(server.url, topic, 2) == [b"before"]
    assert partition_values(server.url, topic, 1) == []
    assert partition_values(server.url, topic, 0) == [b"new"]


@pytest.mark.slow
@pytest.mark.parametrize("fence", [True, False], ids=["fenced", "claimed only"])
def test_the_old_epoch_stays_refused_after_a_restart(server: StandaloneServer, fence: bool) -> None:
    """A partition that loads after the restart refuses the old instance, fenced or only claimed again: a load
    forgets fences, and asks the producer-id allocator the first time it sees the producer, whose epoch the
    transaction coordinator raised at the claim."""
    topic = f"restart-{'fenced' if fence else 'claimed'}"
    with Admin(server.url) as admin:
        admin.create_topic(topic, partitions=1)
        old = admin.claim_producer(f"{topic}-task")
        with Producer(server.url, producer_id=old.producer_id, producer_epoch=old.producer_epoch) as zombie:
            zombie.send(topic, b"before", partition=0).result(10)
        new = admin.claim_producer(f"{topic}-task")  # the new instance writes nothing
        if fence:
            admin.fence_topic(topic, new)
    server.stop()
    server.start()
    zombie = Producer(server.url, producer_id=old.producer_id, producer_epoch=old.producer_epoch)
    with zombie, pytest.raises(ProducerFencedError):
        zombie.send(topic, b"after restart", partition=0).result(10)
    assert partition_values(server.url, topic, 0) == [b"before"]


def test_a_lease_makes_a_second_claim_wait_until_released(server: StandaloneServer) -> None:
    with Admin(server.url) as admin:
        holder = admin.claim_producer("leased", lease_s=30)
        with pytest.raises(ConflictError) as busy:
            admin.claim_producer("leased", lease_s=30)
        assert busy.value.code == "PRODUCER_BUSY"
        assert busy.value.retriable
        assert busy.value.retry_after is not None and 0 < busy.value.retry_after <= 30
        assert admin.renew_producer("leased", holder, lease_s=30) == holder
        admin.renew_producer("leased", holder, lease_s=0)  # released: the next claim succeeds at once
        taken = admin.claim_producer("leased", lease_s=30)
        assert taken.producer_epoch == holder.producer_epoch + 1
        with pytest.raises(ProducerFencedError):
            admin.renew_producer("leased", holder, lease_s=30)


def test_a_named_producer_is_a_transactional_id_with_a_lease(server: StandaloneServer) -> None:
    """One mechanism: the claim is the transaction coordinator's InitProducerId of the id ``name`` with a lease,
    so the transactions API sees the same producer id and epoch, and a transactional init waits for the lease
    like a second claim (then fences the holder like one)."""
    with Admin(server.url) as admin, httpx.Client(base_url=server.url, timeout=30) as http:
        holder = admin.claim_producer("connect/one-mechanism/0", lease_s=30)
        described = admin.describe_transaction("connect/one-mechanism/0")
        assert (described["producer_id"], described["producer_epoch"]) == (holder.producer_id, holder.producer_epoch)
        assert described["state"] == "Empty" and described["lease_until_ms"] > 0
        name = "connect%2Fone-mechanism%2F0"
        busy = http.post(f"/v1/transactions/{name}/init", json={"timeout_ms": 10_000})
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "PRODUCER_BUSY"
        assert busy.json()["error"]["retriable"] and 0 < int(busy.headers["retry-after"]) <= 30
        admin.renew_producer("connect/one-mechanism/0", holder, lease_s=0)  # released
        taken = http.post(f"/v1/transactions/{name}/init", json={"timeout_ms": 10_000})
        assert taken.status_code == 200, taken.text
        assert taken.json() == {"producer_id": holder.producer_id, "producer_epoch": holder.producer_epoch + 1}
        assert admin.describe_transaction("connect/one-mechanism/0")["lease_until_ms"] == 0
        with pytest.raises(ProducerFencedError):
            admin.renew_producer("connect/one-mechanism/0", holder, lease_s=30)


def test_claiming_a_name_aborts_the_open_transaction_of_its_transactional_producer(server: StandaloneServer) -> None:
    topic = "claim-aborts"
    with Admin(server.url) as admin:
        admin.create_topic(topic, partitions=1)
        with Producer(server.url, transactional_id="claimed-tx") as producer:
            producer.begin_transaction()
            producer.send(topic, b"never committed", partition=0).result(10)
            claimed = admin.claim_producer("claimed-tx", lease_s=30)  # the older instance's transaction aborts
            with pytest.raises(TalosError):
                producer.commit_transaction()
        assert claimed.producer_epoch >= 1
        assert admin.describe_transaction("claimed-tx")["state"] == "Empty"
    with Producer(server.url) as plain:
        plain.send(topic, b"after", partition=0).result(10)
    with Consumer(server.url, partitions=[(topic, 0)], wait_ms=0, isolation="read_committed") as reader:
        seen: list[bytes | None] = []
        while batch := reader.poll(0.5):
            seen += [m.value for m in batch]
    assert seen == [b"after"]
    assert partition_values(server.url, topic, 0) == [b"never committed", b"after"]  # stored, and aborted


def test_a_fenced_tasks_checkpoint_is_refused(server: StandaloneServer) -> None:
    with Admin(server.url) as admin:
        old = admin.claim_producer("connect/fenced-ckpt/0")
        admin.save_connector_offsets("fenced-ckpt", "0", {"pos": 1}, producer=old)
        new = admin.claim_producer("connect/fenced-ckpt/0")
        admin.fence_connector("fenced-ckpt", new)
        with pytest.raises(ProducerFencedError):
            admin.save_connector_offsets("fenced-ckpt", "0", {"pos": 99}, producer=old)
        admin.save_connector_offsets("fenced-ckpt", "0", {"pos": 2}, producer=new)
        assert admin.connector_offsets("fenced-ckpt")["0"] == {"pos": 2}


def test_fence_requests_are_validated(server: StandaloneServer) -> None:
    with Admin(server.url) as admin:
        admin.create_topic("fence-bad", partitions=1)
        with pytest.raises(InvalidRequestError) as bad:
            admin.fence_topic("fence-bad", ProducerIdentity(-1, 0))
        assert bad.value.status == 400
        with pytest.raises(NotFoundError):
            admin.fence_topic("no-such-topic", ProducerIdentity(1, 0))
    for body in ({"name": "x", "producer_id": 5}, {"lease_ms": 5}, {"name": ""}, {"name": "x", "lease_ms": -1}):
        answer = httpx.post(f"{server.url}/v1/producers", json=body, timeout=10)
        assert answer.status_code == 400, (body, answer.text)
        assert answer.json()["error"]["code"] == "INVALID_REQUEST"
