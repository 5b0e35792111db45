"""The schema registry with auth on, tried as an attacker would: who owns a subject, who may see a schema id.
A topic's subjects (``<topic>-value``) follow the topic's grants; any other subject is its tenant's own; an id is
answered only to a caller that may read a subject registered with it. Also ``python-schema-registry-client``
(a client no one here wrote) registering and checking compatibility with a tenant's Basic credentials."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from schema_registry.client import SchemaRegistryClient as OtherClient
from schema_registry.client import schema as other_schema

from server.devservices import StandaloneServer
from talos import Admin
from tests.helpers import running_standalone

ADMIN_TOKEN = f"admin-{secrets.token_urlsafe(24)}"
USER = json.dumps({"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]})
USER_DEFAULT = json.dumps(
    {
        "type": "record",
        "name": "User",
        "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int", "default": 0}],
    }
)
USER_NO_DEFAULT = json.dumps(
    {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]}
)


@dataclass
class Tenants:
    server: StandaloneServer
    acme: str
    globex: str

    def registry(self, token: str | None) -> httpx.Client:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=f"{self.server.url}/schema-registry", headers=headers, timeout=30)


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenants]:
    data = tmp_path_factory.mktemp("registry-tenants") / "data"
    env = {"TALOS_ADMIN_TOKEN": ADMIN_TOKEN, "TALOS_AUTH": "on"}
    with running_standalone(data, env=env) as server, Admin(server.url, token=ADMIN_TOKEN) as admin:
        admin.create_tenant("acme")
        admin.create_tenant("globex")
        acme = admin.create_token("acme")["token"]
        globex = admin.create_token("globex")["token"]
        with Admin(server.url, token=acme) as owner:
            owner.create_topic("orders")
        yield Tenants(server, acme, globex)


def _register(client: httpx.Client, subject: str, schema: str) -> httpx.Response:
    return client.post(f"/subjects/{subject}/versions", json={"schema": schema})


def test_no_token_is_401_in_confluents_shape(tenants: Tenants) -> None:
    with tenants.registry(None) as anonymous:
        answer = anonymous.get("/subjects")
    assert answer.status_code == 401 and answer.json()["error_code"] == 40101


def test_a_topics_subject_follows_the_topics_grants(tenants: Tenants) -> None:
    with tenants.registry(tenants.acme) as acme, tenants.registry(tenants.globex) as globex:
        registered = _register(acme, "orders-value", USER)
        assert registered.status_code == 200, registered.text
        schema_id = registered.json()["id"]
        # globex has no grant: the subject and its id do not exist for it, and it cannot register under it
        assert globex.get("/subjects/orders-value/versions").json()["error_code"] == 40401
        assert globex.get(f"/schemas/ids/{schema_id}").json()["error_code"] == 40403
        assert "orders-value" not in globex.get("/subjects").json()
        assert _register(globex, "orders-value", USER_DEFAULT).json()["error_code"] == 40401
        with Admin(tenants.server.url, token=tenants.acme) as owner:
            owner.grant("orders", "globex", ["consume"])
        try:
            # a consumer of the topic reads its schemas (its deserializer needs the id) but may not change them
            assert globex.get(f"/schemas/ids/{schema_id}").json()["schema"] == USER
            assert globex.get("/subjects/orders-value/versions").json() == [1]
            assert "orders-value" in globex.get("/subjects").json()
            refused = _register(globex, "orders-value", USER_DEFAULT)
            assert refused.status_code == 403 and refused.json()["error_code"] == 40301
            assert globex.delete("/subjects/orders-value").status_code == 403
            assert globex.put("/config/orders-value", json={"compatibility": "NONE"}).status_code == 403
            # a reference never reaches into the topic owner's other subjects (found in review)
            peek = {"schema": USER, "references": [{"name": "x", "subject": "com.acme.User", "version": 1}]}
            probed = globex.post("/compatibility/subjects/orders-value/versions/latest?verbose=true", json=peek)
            assert probed.json()["error_code"] == 42201, probed.text
        finally:
            with Admin(tenants.server.url, token=tenants.acme) as owner:
                owner.revoke("orders", "globex")
        assert globex.get(f"/schemas/ids/{schema_id}").json()["error_code"] == 40403


def test_other_subjects_are_each_tenants_own(tenants: Tenants) -> None:
    with tenants.registry(tenants.acme) as acme, tenants.registry(tenants.globex) as globex:
        mine = _register(acme, "com.acme.User", USER).json()["id"]
        theirs = _register(globex, "com.acme.User", USER).json()["id"]
        assert mine != theirs, "two tenants' schemas: two ids, so an id tells no tenant what another registered"
        assert globex.get(f"/schemas/ids/{mine}").json()["error_code"] == 40403
        assert acme.get(f"/schemas/ids/{theirs}").json()["error_code"] == 40403
        assert acme.put("/config/com.acme.User", json={"compatibility": "NONE"}).status_code == 200
        assert globex.get("/config/com.acme.User").json()["error_code"] == 40408  # acme's level is acme's
        assert _register(globex, "com.acme.User", USER_NO_DEFAULT).status_code == 409  # BACKWARD for globex
        assert _register(acme, "com.acme.User", USER_NO_DEFAULT).status_code == 200
        # a topic's subject registered before the topic exists is its registrant's, and stays so once it does
        early = _register(acme, "later-value", USER).json()["id"]
        assert "later-value" in acme.get("/subjects").json()
        assert acme.get(f"/schemas/ids/{early}").status_code == 200
        assert globex.get(f"/schemas/ids/{early}").json()["error_code"] == 40403
        with Admin(tenants.server.url, token=tenants.acme) as owner:
            owner.create_topic("later")
        assert acme.get("/subjects/later-value/versions").json() == [1]
        assert "later-value" not in globex.get("/subjects").json()


def test_only_the_admin_imports_with_ids(tenants: Tenants) -> None:
    with tenants.registry(tenants.globex) as globex, tenants.registry(ADMIN_TOKEN) as admin:
        assert globex.put("/mode/imported", json={"mode": "IMPORT"}).status_code == 200
        chosen = {"schema": USER, "id": 2**31 - 1, "version": 1}
        refused = globex.post("/subjects/imported/versions", json=chosen)
        assert refused.status_code == 403 and refused.json()["error_code"] == 40301
        assert admin.put("/mode/imported", json={"mode": "IMPORT"}).status_code == 200
        assert admin.post("/subjects/imported/versions", json={**chosen, "id": 2**31}).json()["error_code"] == 42201
        assert admin.post("/subjects/imported/versions", json={**chosen, "id": 5000}).json() == {"id": 5000}


def test_python_schema_registry_client_registers_and_checks_compatibility(tenants: Tenants) -> None:
    client = OtherClient(
        {
            "url": f"{tenants.server.url}/schema-registry",
            "basic.auth.credentials.source": "USER_INFO",
            "basic.auth.user.info": f"acme:{tenants.acme}",
        }
    )
    subject = "pyclient-users"
    schema_id = client.register(subject, other_schema.AvroSchema(USER))
    assert schema_id > 0
    assert client.register(subject, other_schema.AvroSchema(USER)) == schema_id
    assert client.test_compatibility(subject, other_schema.AvroSchema(USER_DEFAULT)) is True
    assert client.test_compatibility(subject, other_schema.AvroSchema(USER_NO_DEFAULT)) is False
    assert client.get_by_id(schema_id).raw_schema["name"] == "User"
    assert client.get_versions(subject) == [1]
    assert client.update_compatibility("FULL", subject) is True
    assert client.get_compatibility(subject) == "FULL"
    assert client.check_version(subject, other_schema.AvroSchema(USER)).version == 1
    assert client.delete_subject(subject) == [1]
