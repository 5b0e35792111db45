"""Tenants A and C attack everything tenant B owns, through every operation of the served OpenAPI document
(issue 20, "Done means"), against a real ``talos standalone --auth on``.

B makes one of each object it can own: a topic with messages, a consumer group with a live member and
committed offsets (so its ``__retry.<group>`` and ``__dlq.<group>`` topics exist), an idempotent producer id,
a quota request, a second token, a connector checkpoint, a connector the cluster runs (paused) and a push
subscription (with a leased message).
Then, for every operation in ``/openapi.json``
(so a new endpoint is covered without editing this file), path parameters are filled with B's objects
(:data:`PATH_VALUES`; an operation with a parameter this table does not know FAILS the test, so new
endpoints are added knowingly), a request body is built from the operation's schema with B's names, and:

- without a token, every non-public operation answers 401;
- with A's or C's token, an operation on B's objects answers 401, 403 or 404 (a create whose name B already
  uses may also answer 409: names are global); a list answers 200 without any of B's objects;
- afterwards nothing of B's changed: messages and offsets of all three topics, the topic's settings, the
  group's members and committed offsets, the member still heartbeats, the token still works, the quota
  request is as it was, the checkpoint is as it was, and B's producer id still writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from talos import Admin
from tests.helpers import SecuredStandalone, secured_standalone

PUBLIC = ("/healthz", "/readyz", "/metrics", "/docs", "/redoc", "/openapi.json", "/portal")
SECRET = "bsecret"  # in every name B gives its objects: a list that shows one of them leaks it
TOPIC = f"{SECRET}-orders"
GROUP = f"{SECRET}-group"
CONNECTOR = f"{SECRET}-connector"
CHECKPOINT = f"{SECRET}-checkpoint-7"
TRANSACTIONAL_ID = f"{SECRET}-txn"  # B's, with a transaction open on its topic
SUBSCRIPTION = f"{SECRET}-subscription"
DENIED = {401, 403, 404}
# Names each tenant has its own namespace of: A's "bsecret-connector" is A's, not B's (B's must not change). A
# call on A's own object of that name may succeed, or conflict with it (A's transactional id named with B's
# producer id); B's, in the snapshot, must not change.
TENANT_SCOPED = ("/v1/connectors/", "/v1/transactions/")
# Nobody's objects: checking a configuration against a connector type answers anyone.
NOBODYS = ("/connector-plugins/",)
# Make-or-change calls on one namespace of names for all tenants (cluster-run connectors, as topics): B's name
# is taken (409), as a create's would be.
MAKES = ("PUT /connectors/{name}/config",)


@dataclass
class Victim:
    """Tenant B and what it owns."""

    token: str
    spare_token_id: str
    spare_token: str
    member_id: str
    generation: int
    retry_topic: str
    dead_letter_topic: str
    producer_id: int
    producer_epoch: int
    request_id: int
    connector: bool
    transactional_producer_id: int  # of B's TRANSACTIONAL_ID (another tenant may have an id of that name)


@dataclass
class World(SecuredStandalone):  # tenants a, b, c
    victim: Victim


def _ok(answer: httpx.Response) -> Any:
    assert answer.status_code < 300, f"{answer.request.method} {answer.request.url}: {answer.status_code} {answer.text}"
    return answer.json() if answer.content else None


def _make_victim(world_url: str, token: str, admin: Admin) -> Victim:
    with httpx.Client(base_url=world_url, headers={"authorization": f"Bearer {token}"}, timeout=30) as b:
        _ok(b.post("/v1/topics", json={"name": TOPIC, "partitions": 1}))
        _ok(b.post(f"/v1/topics/{TOPIC}/messages", json={"messages": [{"value": f"{SECRET}-m{i}"} for i in range(3)]}))
        joined = _ok(b.post(f"/v1/groups/{GROUP}/members", json={"topics": [TOPIC], "session_timeout_ms": 300_000}))
        member_id, generation = joined["member_id"], joined["generation"]
        commit = {"member_id": member_id, "offsets": [{"topic": TOPIC, "partition": 0, "offset": 2}]}
        _ok(b.post(f"/v1/groups/{GROUP}/offsets", json=commit))
        producer = _ok(b.post("/v1/producers", json={}))
        idempotent = {
            "messages": [{"value": "idempotent-0"}],
            "producer_id": producer["producer_id"],
            "producer_epoch": producer["producer_epoch"],
            "sequence": 0,
        }
        _ok(b.post(f"/v1/topics/{TOPIC}/partitions/0/messages", json=idempotent))
        asked = _ok(b.post("/v1/quota-requests", json={"resource": "partitions", "requested": 1_000_000}))
        spare = _ok(b.post("/v1/tenants/b/tokens", json={"name": "spare"}))
        connector = b.put(f"/v1/connectors/{CONNECTOR}/offsets", json={"task": "t0", "checkpoint": {"pos": CHECKPOINT}})
        assert connector.status_code in (200, 404), connector.text  # 404: no such API (yet)
        # A connector the cluster runs, of the same name, paused (its task's target does not exist).
        sink = {"connector.class": "hdfs-sink", "topics": TOPIC, "namenode": "http://127.0.0.1:9", "path": "/b"}
        _ok(b.post("/connectors", json={"name": CONNECTOR, "config": sink}))
        _ok(b.put(f"/connectors/{CONNECTOR}/pause"))
        made = {"name": SUBSCRIPTION, "topic": TOPIC, "start": "earliest", "ack_timeout_ms": 3_600_000}
        _ok(b.post("/v1/subscriptions", json=made))
        pull = {"subscriber": "b-worker", "max_messages": 1, "wait_ms": 5000}
        assert len(_ok(b.post(f"/v1/subscriptions/{SUBSCRIPTION}/pull", json=pull))["messages"]) == 1
        txn = _ok(b.post(f"/v1/transactions/{TRANSACTIONAL_ID}/init", json={"timeout_ms": 900_000}))
        added = {"partitions": [{"topic": TOPIC, "partition": 0}], **txn}
        _ok(b.post(f"/v1/transactions/{TRANSACTIONAL_ID}/partitions", json=added))
    return Victim(
        token=token,
        spare_token_id=spare["id"],
        spare_token=spare["token"],
        member_id=member_id,
        generation=generation,
        retry_topic=joined["retry_topic"],
        dead_letter_topic=joined["dead_letter_topic"],
        producer_id=producer["producer_id"],
        producer_epoch=producer["producer_epoch"],
        request_id=asked["id"],
        connector=connector.status_code == 200,
        transactional_producer_id=txn["producer_id"],
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    data = tmp_path_factory.mktemp("isolation") / "data"
    with secured_standalone(data, dict.fromkeys(("a", "b", "c"))) as secured:
        with secured.admin("admin") as admin:
            victim = _make_victim(secured.url, secured.tokens["b"], admin)
        yield World(secured.server, secured.admin_token, secured.tokens, victim)


def _path_values(victim: Victim, topic: str) -> dict[str, str]:
    """Path parameter → B's object. An operation with a parameter missing here fails the test."""
    return {
        "topic": topic,
        "partition": "0",
        "group": GROUP,
        "member_id": victim.member_id,
        "tenant": "b",
        "token_id": victim.spare_token_id,
        "request_id": str(victim.request_id),
        "name": CONNECTOR,
        "task": "0",
        "plugin": "hdfs-sink",
        "offset": "0",
        "transactional_id": TRANSACTIONAL_ID,
    }


def _field_values(victim: Victim, topic: str, attacker: str) -> dict[str, Any]:
    """Body and query fields by name: B's objects, the attacker as the beneficiary of grants."""
    return {
        "topic": topic,
        "topics": [topic],
        "name": topic,  # a create under B's name
        "group": GROUP,
        "member_id": victim.member_id,
        "producer_id": victim.producer_id,
        "producer_epoch": victim.producer_epoch,
        "tenant": attacker,
        "partition": 0,
        "offset": 0,
        "generation": victim.generation,
        "task": "t0",
        "messages": [{"value": "forged", "headers": {"talos-not-before": "not-a-number"}}],
        "actions": ["produce", "consume", "admin"],
        "decision": "approve",
        "to": "earliest",
        "resource": "partitions",
        "requested": 1000,
        "checkpoint": {"pos": 0},
    }


def _resolve(schema: dict[str, Any], document: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = document["components"]["schemas"][name]
    return schema


def _example(schema: dict[str, Any], document: dict[str, Any], fields: dict[str, Any], name: str | None) -> Any:
    """A value for ``schema``: B's object when the field's name is known, else the simplest valid value."""
    if name is not None and name in fields:
        return fields[name]
    schema = _resolve(schema, document)
    for combined in ("anyOf", "oneOf", "allOf"):
        if combined in schema:
            choices = [s for s in schema[combined] if _resolve(s, document).get("type") != "null"]
            return _example(choices[0], document, fields, None) if choices else None
    if "enum" in schema:
        return schema["enum"][0]
    if schema.get("default") is not None:
        return schema["default"]
    kind = schema.get("type", "object")
    if kind == "object":
        required = set(schema.get("required", ()))
        properties = schema.get("properties", {})
        return {
            key: _example(sub, document, fields, key)
            for key, sub in properties.items()
            if key in required or key in fields
        }
    if kind == "array":
        return [_example(schema.get("items", {}), document, fields, None)]
    if kind == "integer":
        return int(schema.get("minimum", 0))
    if kind == "number":
        return 1.0
    if kind == "boolean":
        return False
    return "x"


@dataclass
class Attack:
    method: str
    template: str
    path: str
    query: dict[str, str]
    body: Any

    @property
    def label(self) -> str:
        return f"{self.method} {self.path}"


def _attacks(document: dict[str, Any], victim: Victim, attacker: str) -> list[Attack]:
    out: list[Attack] = []
    unknown: list[str] = []
    for template, item in document["paths"].items():
        for method, operation in item.items():
            parameters = operation.get("parameters", [])
            names = {p["name"] for p in parameters if p["in"] == "path"}
            topics = [TOPIC, victim.retry_topic, victim.dead_letter_topic] if "topic" in names else [TOPIC]
            for topic in topics:
                values = _path_values(victim, topic)
                if template.startswith("/v1/subscriptions/"):
                    values["name"] = SUBSCRIPTION
                missing = sorted(names - set(values))
                if missing:
                    unknown.append(f"{method.upper()} {template}: {missing}")
                    continue
                path = template
                for key in names:
                    path = path.replace("{" + key + "}", quote(values[key], safe=""))
                fields = _field_values(victim, topic, attacker)
                if template == "/connectors":
                    fields["name"] = CONNECTOR  # a create under the name of B's connector
                query = {
                    p["name"]: str(_example(p.get("schema", {}), document, fields, p["name"]))
                    for p in parameters
                    if p["in"] == "query" and (p.get("required") or p["name"] in ("topic", "group", "tenant"))
                }
                body = None
                content = operation.get("requestBody", {}).get("content", {})
                if "application/json" in content:
                    body = _example(content["application/json"].get("schema", {}), document, fields, None)
                out.append(Attack(method.upper(), template, path, query, body))
    assert not unknown, f"operations with path parameters this test cannot fill (add them to _path_values): {unknown}"
    return out


def _snapshot(world: World) -> dict[str, Any]:
    """What B sees of its own objects."""
    victim = world.victim
    state: dict[str, Any] = {}
    with world.bearer(victim.token) as b:
        for topic in (TOPIC, victim.retry_topic, victim.dead_letter_topic):
            described = _ok(b.get(f"/v1/topics/{quote(topic, safe='')}"))
            state[f"topic {topic}"] = {k: v for k, v in described.items() if k != "partitions_detail"}
            state[f"offsets {topic}"] = [(p["earliest"], p["latest"]) for p in described["partitions_detail"]]
        fetched = _ok(b.get(f"/v1/topics/{TOPIC}/partitions/0/messages", params={"offset": 0}))
        state["messages"] = [(m["offset"], m.get("value"), m.get("headers")) for m in fetched["messages"]]
        group = _ok(b.get(f"/v1/groups/{GROUP}"))
        state["members"] = sorted(m["member_id"] for m in group["members"])
        state["committed"] = _ok(b.get(f"/v1/groups/{GROUP}/offsets"))["offsets"]
        requests = _ok(b.get("/v1/quota-requests"))["requests"]
        state["quota request"] = [r for r in requests if r["id"] == victim.request_id]
        state["tokens"] = sorted(t["id"] for t in _ok(b.get("/v1/tenants/b/tokens"))["tokens"])
        state["grants"] = _ok(b.get("/v1/acls"))["acls"]
        if victim.connector:
            state["checkpoint"] = _ok(b.get(f"/v1/connectors/{CONNECTOR}/offsets"))
        state["cluster connector"] = _ok(b.get(f"/connectors/{CONNECTOR}"))
        state["cluster connector state"] = _ok(b.get(f"/connectors/{CONNECTOR}/status"))["connector"]["state"]
        subscription = _ok(b.get(f"/v1/subscriptions/{SUBSCRIPTION}"))
        state["subscription"] = {k: v for k, v in subscription.items() if k != "subscribers"}
        dead = _ok(b.get(f"/v1/topics/__sub-dlq.{SUBSCRIPTION}"))["partitions_detail"]
        state["dead letters"] = [(p["earliest"], p["latest"]) for p in dead]
        txn = _ok(b.get(f"/v1/transactions/{TRANSACTIONAL_ID}"))
        state["transaction"] = {k: v for k, v in txn.items() if k != "updated_ms"}
    return state


def _leaks(world: World, text: str, sent: str) -> list[str]:
    """B's names and data in an answer, but for those the request itself named (an answer may echo them)."""
    victim = world.victim
    secrets_of_b = [
        TOPIC,
        GROUP,
        victim.retry_topic,
        victim.dead_letter_topic,
        victim.member_id,
        victim.spare_token_id,
        str(victim.producer_id),
        CHECKPOINT,
        SUBSCRIPTION,
        str(victim.transactional_producer_id),  # (the name is no secret: an attacker may own one like it)
        f"{SECRET}-m0",
    ]
    return [s for s in secrets_of_b if s in text and s not in sent]


@pytest.mark.slow
def test_tenants_cannot_reach_each_others_objects_through_any_operation(world: World) -> None:
    document = httpx.get(f"{world.server.url}/openapi.json", timeout=30).json()
    before = _snapshot(world)
    assert before["members"] == [world.victim.member_id]
    problems: list[str] = []

    with world.bearer(None) as anonymous:
        for attack in _attacks(document, world.victim, "a"):
            if attack.template.startswith(PUBLIC):
                continue
            answer = anonymous.request(attack.method, attack.path, params=attack.query, json=attack.body)
            if answer.status_code != 401:
                problems.append(f"no token: {attack.label} → {answer.status_code} {answer.text[:200]}")

    for attacker in ("a", "c"):
        attacks = [a for a in _attacks(document, world.victim, attacker) if not a.template.startswith(PUBLIC)]
        # At once, not one by one: before refusing a group a server re-reads the security settings (at most
        # once a second), and one re-read answers every request waiting for it.
        with world.bearer(world.tokens[attacker]) as client, ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda a: client.request(a.method, a.path, params=a.query, json=a.body), attacks))
        for attack, answer in zip(attacks, answers, strict=True):
            status = answer.status_code
            leaked = _leaks(world, answer.text, f"{attack.path} {attack.query} {attack.body}")
            creates = attack.method == "POST" and "{" not in attack.template
            allowed = DENIED | ({409} if creates else set())
            if attack.template.startswith(TENANT_SCOPED):
                allowed |= {200, 201, 204, 409}
            if attack.template.startswith(NOBODYS):
                allowed |= {200, 400}
            if f"{attack.method} {attack.template}" in MAKES:
                allowed |= {409}
            if attack.method == "GET" and "{" not in attack.template:  # a listing, maybe filtered by B's names
                if status not in DENIED | {200} or leaked:
                    problems.append(f"{attacker}: {attack.label} → {status}, shows B's {leaked}")
            elif status not in allowed or leaked:
                detail = f"query={attack.query} body={attack.body}"
                problems.append(f"{attacker}: {attack.label} {detail} → {status} {answer.text[:200]}")

    after = _snapshot(world)
    for key, value in before.items():
        if after.get(key) != value:
            problems.append(f"B's {key} changed: {value!r} → {after.get(key)!r}")
    victim = world.victim
    with world.bearer(victim.token) as b:
        beat = b.post(f"/v1/groups/{GROUP}/members/{victim.member_id}/heartbeat", json={})
        if beat.status_code != 200:
            problems.append(f"B's member no longer heartbeats: {beat.status_code} {beat.text[:200]}")
        idempotent = {
            "messages": [{"value": "idempotent-1"}],
            "producer_id": victim.producer_id,
            "producer_epoch": victim.producer_epoch,
            "sequence": 1,
        }
        written = b.post(f"/v1/topics/{TOPIC}/partitions/0/messages", json=idempotent)
        result = written.json().get("results", [{}])[0] if written.status_code == 200 else {}
        if written.status_code != 200 or result.get("offset", -1) < 0 or result.get("duplicate"):
            problems.append(f"B's producer id no longer writes: {written.status_code} {written.text[:200]}")
    with world.bearer(victim.spare_token) as spare:
        whoami = spare.get("/v1/whoami")
        if whoami.status_code != 200 or whoami.json().get("tenant") != "b":
            problems.append(f"B's token no longer works: {whoami.status_code} {whoami.text[:200]}")

    assert not problems, f"{len(problems)} isolation failures:\n" + "\n".join(problems)
