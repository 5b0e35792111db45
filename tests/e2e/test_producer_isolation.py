"""Idempotent producer ids belong to the tenant that got them (issue 20, point 3), against a real
``talos standalone --auth on``: ids are random, not sequential; another tenant writing with an id (JSON or
binary batch) is refused before the partition's sequence state is touched, so the owner's next write is
stored, not answered as a duplicate; another tenant cannot bump the id's epoch (fencing its owner)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from server.devservices import StandaloneServer
from talos import RecordData, encode_batch
from tests.helpers import secured_standalone

BATCH = "application/vnd.talos.batch"
PATH = "/v1/topics/shared/partitions/0/messages"


@dataclass
class Tenants:
    server: StandaloneServer
    alpha: httpx.Client  # the attacker: may produce to beta's topic (a grant), as sharing tenants do
    beta: httpx.Client  # the victim, owner of the topic "shared"


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenants]:
    data = tmp_path_factory.mktemp("producers") / "data"
    with secured_standalone(data, {"alpha": None, "beta": None}) as secured:
        with secured.admin("beta") as beta:
            beta.create_topic("shared", partitions=1)
            beta.grant("shared", "alpha", ["produce", "consume"])
        with secured.client("alpha") as alpha, secured.client("beta") as beta:
            yield Tenants(secured.server, alpha, beta)


def new_producer(client: httpx.Client) -> int:
    answer = client.post("/v1/producers", json={})
    assert answer.status_code == 200, answer.text
    assert answer.json()["producer_epoch"] == 0
    return int(answer.json()["producer_id"])


def values(client: httpx.Client) -> list[str]:
    answer = client.get(PATH, params={"offset": 0, "max_messages": 1000})
    assert answer.status_code == 200, answer.text
    return [m["value"] for m in answer.json()["messages"]]


@pytest.mark.slow
def test_producer_ids_are_random_not_sequential(tenants: Tenants) -> None:
    ids = [new_producer(tenants.beta) for _ in range(5)] + [new_producer(tenants.alpha)]
    assert len(set(ids)) == len(ids)
    assert all(abs(a - b) > 1 for a, b in itertools.pairwise(ids))
    assert max(ids) > 2**40  # from 63 random bits; sequential ids would be 0, 1, 2, ...


def test_another_tenants_write_with_my_id_is_refused_and_my_next_write_is_stored(tenants: Tenants) -> None:
    victim = new_producer(tenants.beta)
    forged = {"producer_id": victim, "producer_epoch": 0, "sequence": 100, "messages": [{"value": "forged"}]}
    refused = tenants.alpha.post(PATH, json=forged)
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "FORBIDDEN"
    # The same through the binary batch path (the producer id in the batch header).
    batch = encode_batch([RecordData(b"forged")], producer_id=victim, producer_epoch=0, base_sequence=100)
    refused = tenants.alpha.post(PATH, content=batch, headers={"content-type": BATCH})
    assert refused.status_code == 403, refused.text
    # An id nobody allocated is refused the same way (it does not tell whether an id exists).
    unknown = tenants.alpha.post(PATH, json={**forged, "producer_id": victim ^ 1})
    assert unknown.status_code == 403 and unknown.json()["error"]["code"] == "FORBIDDEN"

    real = {"producer_id": victim, "producer_epoch": 0, "sequence": 0, "messages": [{"value": "real"}]}
    stored = tenants.beta.post(PATH, json=real)
    assert stored.status_code == 200, stored.text
    result = stored.json()["results"][0]
    assert result["offset"] >= 0 and not result.get("duplicate")
    assert "real" in values(tenants.beta) and "forged" not in values(tenants.beta)

    # The attacker's own id works for it on the same partition, and stays its own.
    own = new_producer(tenants.alpha)
    mine = {"producer_id": own, "producer_epoch": 0, "sequence": 0, "messages": [{"value": "alpha's"}]}
    assert tenants.alpha.post(PATH, json=mine).status_code == 200
    assert tenants.beta.post(PATH, json={**mine, "sequence": 1}).status_code == 403


def test_another_tenant_cannot_bump_my_epoch(tenants: Tenants) -> None:
    victim = new_producer(tenants.beta)
    bumped = tenants.alpha.post("/v1/producers", json={"producer_id": victim})
    never = tenants.alpha.post("/v1/producers", json={"producer_id": victim ^ 1})
    assert bumped.status_code == never.status_code == 404, bumped.text
    assert bumped.json()["error"]["code"] == never.json()["error"]["code"] == "UNKNOWN_PRODUCER"
    # Not fenced: the owner's epoch 0 still writes.
    write = {"producer_id": victim, "producer_epoch": 0, "sequence": 0, "messages": [{"value": "not fenced"}]}
    assert tenants.beta.post(PATH, json=write).status_code == 200
    # The owner itself still gets the next epoch.
    mine = tenants.beta.post("/v1/producers", json={"producer_id": victim})
    assert mine.status_code == 200 and mine.json() == {"producer_id": victim, "producer_epoch": 1}
