"""Producer ids in a real two-server cluster (ZooKeeper, HDFS; issue 20, point 3): ids kept in ZooKeeper
belong to the tenant that got them; a produce with another tenant's id that arrives at the server which
does not own the partition is forwarded with the caller's identity and refused at the owner, and the
owner's next write is stored; another tenant cannot bump the id's epoch through any server."""

from __future__ import annotations

import httpx
import pytest

from talos import Admin, RecordData, encode_batch
from tests.cluster.conftest import CLUSTER_TOKEN, Cluster
from tests.helpers import create_tenants

pytestmark = [pytest.mark.hdfs, pytest.mark.zookeeper]


def test_another_tenants_producer_id_is_refused_at_the_owner_after_forwarding(pair: Cluster) -> None:
    s1, s2 = pair.servers["s1"], pair.servers["s2"]
    with Admin(s1.url, token=CLUSTER_TOKEN) as admin:
        tokens = create_tenants(admin, {"alpha": None, "beta": None})
    alpha_token, beta_token = tokens["alpha"], tokens["beta"]
    alpha = {"authorization": f"Bearer {alpha_token}"}
    beta = {"authorization": f"Bearer {beta_token}"}
    with Admin(s1.url, token=beta_token) as owner:
        owner.create_topic("shared", partitions=6)
        owner.grant("shared", "alpha", ["produce", "consume"])
    remote = next(p for p, server in pair.routes("shared").items() if server == "s2")
    path = f"/v1/topics/shared/partitions/{remote}/messages"

    made = httpx.post(f"{s2.url}/v1/producers", json={}, headers=beta, timeout=30)
    assert made.status_code == 200, made.text
    victim = int(made.json()["producer_id"])

    forged = {"producer_id": victim, "producer_epoch": 0, "sequence": 100, "messages": [{"value": "forged"}]}
    refused = httpx.post(f"{s1.url}{path}", json=forged, headers=alpha, timeout=30)  # s1 forwards to s2
    assert refused.status_code == 403, refused.text
    batch = encode_batch([RecordData(b"forged")], producer_id=victim, producer_epoch=0, base_sequence=100)
    raw = httpx.post(
        f"{s1.url}{path}", content=batch, headers={**alpha, "content-type": "application/vnd.talos.batch"}, timeout=30
    )
    assert raw.status_code == 403, raw.text
    bumped = httpx.post(f"{s1.url}/v1/producers", json={"producer_id": victim}, headers=alpha, timeout=30)
    assert bumped.status_code == 404, bumped.text

    real = {"producer_id": victim, "producer_epoch": 0, "sequence": 0, "messages": [{"value": "real"}]}
    stored = httpx.post(f"{s1.url}{path}", json=real, headers=beta, timeout=30)
    assert stored.status_code == 200, stored.text
    result = stored.json()["results"][0]
    assert result["offset"] >= 0 and not result.get("duplicate")
