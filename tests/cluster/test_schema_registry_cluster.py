"""The schema registry on a cluster of three: confluent-kafka's ``SchemaRegistryClient`` registering through
different servers at once gets one id per schema (every server relays to the owner of ``__schemas``), and a
kill -9 of that owner loses no registered schema, nor gives an id twice afterwards."""

from __future__ import annotations

import json
import threading
import time

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from server.devservices import wait_until
from tests.cluster.conftest import CLUSTER_TOKEN, Cluster


def _client(url: str) -> SchemaRegistryClient:
    # Confluent's clients send Basic credentials: the password is a Talos token
    return SchemaRegistryClient({"url": f"{url}/schema-registry", "basic.auth.user.info": f"admin:{CLUSTER_TOKEN}"})


def _avro(name: str, *fields: str) -> Schema:
    record = {"type": "record", "name": name, "fields": [{"name": f, "type": "string"} for f in ("id", *fields)]}
    return Schema(json.dumps(record), "AVRO")


def _register(client: SchemaRegistryClient, subject: str, schema: Schema) -> int:
    """Register, retrying what a moving coordinator answers (503, retriable, as Confluent's clients see it)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return client.register_schema(subject, schema)
        except SchemaRegistryError as exc:
            if exc.http_status_code != 503 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.quick_reassign
def test_concurrent_registration_through_every_server_and_kill_9_of_the_schemas_owner(cluster: Cluster) -> None:
    servers = [cluster.servers[s] for s in ("s1", "s2", "s3")]
    clients = [_client(s.url) for s in servers]
    _register(clients[0], "warm-up", _avro("WarmUp"))  # the topic made, its owner loaded
    shared = _avro("Shared", "a")
    ids: dict[str, list[int]] = {}
    lock = threading.Lock()
    start = threading.Barrier(9)

    def register(index: int) -> None:
        client = clients[index % 3]
        start.wait()
        own = _register(client, f"own-{index}", _avro(f"Own{index}"))
        same = _register(client, f"shared-{index % 2}", shared)
        with lock:
            ids.setdefault("shared", []).append(same)
            ids.setdefault("own", []).append(own)

    threads = [threading.Thread(target=register, args=(i,)) for i in range(9)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(ids["shared"]) == len(ids["own"]) == 9, ids
    assert len(set(ids["shared"])) == 1, f"one schema, one id: {ids['shared']}"
    assert len(set(ids["own"])) == 9, f"nine schemas, nine ids: {ids['own']}"
    assert ids["shared"][0] not in ids["own"]
    for client in clients:  # every server answers the same registry
        assert client.get_versions("shared-0") == client.get_versions("shared-1") == [1]
        assert sorted(client.get_subjects()) == sorted(
            ["warm-up", "shared-0", "shared-1", *(f"own-{i}" for i in range(9))]
        )

    # a subject holding "/" (sent as %2F) relayed whole from every server to the coordinator
    assert {_register(client, "team/shared", shared) for client in clients} == {ids["shared"][0]}
    assert all(client.get_versions("team/shared") == [1] for client in clients)

    owner = cluster.routes("__schemas")[0]
    registered = {f"own-{i}": ids["own"][i] for i in range(9)}  # not in thread order: read them back
    registered = {s: clients[0].get_latest_version(s).schema_id for s in registered}
    cluster.servers[owner].kill()
    survivor = next(s for s in servers if s.server_id != owner)
    client = _client(survivor.url)
    cluster.wait_members({s.server_id for s in servers} - {owner}, timeout=60)

    def answers() -> bool:
        try:
            return client.get_latest_version("own-0").schema_id == registered["own-0"]
        except SchemaRegistryError:
            return False

    wait_until(answers, timeout=60, what="the registry answered by the new owner of __schemas")
    for subject, schema_id in registered.items():
        latest = client.get_latest_version(subject)
        assert latest.schema_id == schema_id and latest.version == 1
        assert json.loads(client.get_schema(schema_id).schema_str)["name"] == f"Own{subject.split('-')[1]}"
    after = _register(client, "after-the-kill", _avro("AfterTheKill"))
    assert after > max([*registered.values(), ids["shared"][0]]), "an id is never given twice"
    assert _register(client, "shared-0", shared) == ids["shared"][0]
