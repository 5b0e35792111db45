"""Administration: ``Admin`` and its asyncio twin ``AsyncAdmin``.

Each request is described once as a :class:`_Call` (method, path, body, how to read the answer) and each
method once, as steps, on :class:`_Admin`; the two classes only differ in how they wait
(``talos._clients``).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

import orjson

from talos._admin_call import Call as _Call
from talos._clients import Asynchronous, Blocking, ClientBase, operation
from talos._connector_admin import ConnectorAdmin
from talos._steps import Request, Steps, http
from talos._tenants import SecurityCalls as calls
from talos._tls import TLSOption
from talos._transport import AnyTransport, AsyncTransport, Response, Transport, check

__all__ = [
    "DEFAULT_URL",
    "Admin",
    "AsyncAdmin",
    "TOPIC_SETTINGS",
    "PartitionInfo",
    "ProducerIdentity",
    "TopicInfo",
    "TopicSettings",
    "offsets_call",
    "send",
]

DEFAULT_URL = "http://127.0.0.1:8080"
_JSON = {"content-type": "application/json"}
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    earliest: int | None  # None: the owner could not answer just now (a cluster mid-failover)
    latest: int | None
    owner: str | None = None  # the server that owns it (cluster mode)

    @classmethod
    def from_json(cls, data: Any) -> PartitionInfo:
        # Only the fields we know: a newer server may add more.
        return cls(data["partition"], data.get("earliest"), data.get("latest"), data.get("owner"))


@dataclass(frozen=True, slots=True)
class ProducerIdentity:
    """An idempotent producer's id and epoch: what ``Producer(producer_id=, producer_epoch=)`` continues."""

    producer_id: int
    producer_epoch: int

    @classmethod
    def from_response(cls, response: Response) -> ProducerIdentity:
        data = response.json()
        assert isinstance(data, dict)
        return cls(int(data["producer_id"]), int(data["producer_epoch"]))


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """What a topic is configured with; the server's stored record adds its owner (``server.topics``)."""

    name: str
    partitions: int
    retention_ms: int | None = None
    retention_bytes: int | None = None
    version: int = 1
    created_ms: int = 0
    trace_sample: int = 0  # message trace: 0 off, 1 every message, N one message in N (docs/trace.md)
    # Compaction (docs/compaction.md): "delete" (retention only), "compact" (the last value of every key is
    # kept), or "compact,delete" (both).
    cleanup_policy: str = "delete"
    min_compaction_lag_ms: int = 0  # a record younger than this is never compacted away
    max_compaction_lag_ms: int | None = None  # a record older than this is compacted even below the dirty ratio
    delete_retention_ms: int = 86_400_000  # a tombstone is kept this long once its key's older values are gone
    min_cleanable_dirty_ratio: float = 0.5  # compact once this share of the log is not yet compacted
    segment_ms: int | None = None  # roll the active segment at this age (None: the server's default)
    segment_bytes: int | None = None  # ... or this size
    # Produce-time validation (docs/schema-registry.md): a record's value (key) must carry the id of a schema
    # registered under the topic's subject ``<topic>-value`` (``<topic>-key``) in Confluent's framing.
    value_schema_validation: bool = False
    key_schema_validation: bool = False


#: The settings a topic is created or changed with, besides its name and partitions.
TOPIC_SETTINGS = (
    "retention_ms",
    "retention_bytes",
    "trace_sample",
    "cleanup_policy",
    "min_compaction_lag_ms",
    "max_compaction_lag_ms",
    "delete_retention_ms",
    "min_cleanable_dirty_ratio",
    "segment_ms",
    "segment_bytes",
    "value_schema_validation",
    "key_schema_validation",
)


@dataclass(frozen=True, slots=True)
class TopicInfo(TopicSettings):
    partition_offsets: list[PartitionInfo] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: Any) -> TopicInfo:
        detail = [PartitionInfo.from_json(p) for p in data.get("partitions_detail", [])]
        # Only the fields we know: a newer server may add more, an older one fewer.
        known = {name: data[name] for name in (*TOPIC_SETTINGS, "version", "created_ms") if name in data}
        return cls(data["name"], data["partitions"], **known, partition_offsets=detail)


def _json(response: Response) -> Any:
    return response.json()


def _topic_path(name: str) -> str:
    return f"/v1/topics/{quote(name, safe='')}"


def _create(name: str, partitions: int, settings: Mapping[str, object]) -> _Call[TopicInfo]:
    body: dict[str, object] = {"name": name, "partitions": partitions, **_given(settings)}
    return _Call("POST", "/v1/topics", lambda r: TopicInfo.from_json(r.json()), orjson.dumps(body))


def _list() -> _Call[list[TopicInfo]]:
    return _Call("GET", "/v1/topics", lambda r: [TopicInfo.from_json(t) for t in r.json()["topics"]])  # type: ignore[index]


def _describe(name: str) -> _Call[TopicInfo]:
    return _Call("GET", _topic_path(name), lambda r: TopicInfo.from_json(r.json()))


def _alter(name: str, changes: dict[str, object]) -> _Call[TopicInfo]:
    return _Call("PATCH", _topic_path(name), lambda r: TopicInfo.from_json(r.json()), orjson.dumps(changes))


def _delete(name: str) -> _Call[None]:
    return _Call("DELETE", _topic_path(name), lambda r: None)


def _delete_records(topic: str, offsets: Mapping[int, int]) -> _Call[dict[int, int]]:
    body = {"partitions": [{"partition": p, "offset": o} for p, o in offsets.items()]}

    def read(response: Response) -> dict[int, int]:
        return {int(p["partition"]): int(p["low_watermark"]) for p in response.json()["partitions"]}  # type: ignore[index]

    return _Call("POST", f"{_topic_path(topic)}/delete-records", read, orjson.dumps(body))


def _compact(topic: str, partition: int) -> _Call[dict[str, Any]]:
    return _Call("POST", f"{_topic_path(topic)}/partitions/{partition}/compact", _json, b"{}")


def offsets_call(topic: str, partition: int, timestamp: int | None = None) -> _Call[dict[str, int]]:
    params: dict[str, str | int] | None = {"timestamp": timestamp} if timestamp is not None else None
    return _Call("GET", f"{_topic_path(topic)}/partitions/{partition}/offsets", _json, params=params)


def _trace(topic: str, partition: int, offset: int) -> _Call[dict[str, Any]]:
    return _Call("GET", f"{_topic_path(topic)}/partitions/{partition}/messages/{offset}/trace", _json)


def _trace_key(
    topic: str, key: str | bytes, since_ms: int | None, until_ms: int | None, limit: int
) -> _Call[list[dict[str, Any]]]:
    params: dict[str, str | int] = {"limit": limit}
    if isinstance(key, bytes):
        params["key_b64"] = base64.b64encode(key).decode()
    else:
        params["key"] = key
    if since_ms is not None:
        params["since"] = since_ms
    if until_ms is not None:
        params["until"] = until_ms
    return _Call("GET", f"{_topic_path(topic)}/trace", lambda r: r.json()["messages"], params=params)  # type: ignore[index]


def _subscription_path(name: str) -> str:
    return f"/v1/subscriptions/{quote(name, safe='')}"


def _create_subscription(name: str, topic: str, settings: dict[str, object]) -> _Call[dict[str, Any]]:
    body = {"name": name, "topic": topic, **{k: v for k, v in settings.items() if v is not None}}
    return _Call("POST", "/v1/subscriptions", _json, orjson.dumps(body))


def _group_path(name: str) -> str:
    return f"/v1/groups/{quote(name, safe='')}"


def _list_transactions() -> _Call[list[dict[str, Any]]]:
    return _Call("GET", "/v1/transactions", lambda r: r.json()["transactions"])  # type: ignore[index]


def _describe_transaction(transactional_id: str) -> _Call[dict[str, Any]]:
    return _Call("GET", f"/v1/transactions/{quote(transactional_id, safe='')}", _json)


def _list_groups() -> _Call[list[str]]:
    return _Call("GET", "/v1/groups", lambda r: r.json()["groups"])  # type: ignore[index]


def _describe_group(name: str) -> _Call[dict[str, Any]]:
    return _Call("GET", _group_path(name), _json)


def _reset_offsets(
    group: str, topic: str, to: str, partition: int | None, offset: int | None, timestamp: int | None
) -> _Call[list[dict[str, Any]]]:
    if to not in ("earliest", "latest", "offset", "timestamp"):
        raise ValueError("to must be 'earliest', 'latest', 'offset' or 'timestamp'")
    body = {"topic": topic, "to": to, "partition": partition, "offset": offset, "timestamp": timestamp}
    payload = orjson.dumps({k: v for k, v in body.items() if v is not None})
    return _Call("POST", f"{_group_path(group)}/offsets/reset", lambda r: r.json()["offsets"], payload)  # type: ignore[index]


def _connector_offsets_path(connector: str) -> str:
    return f"/v1/connectors/{quote(connector, safe='')}/offsets"


def _connector_offsets(connector: str) -> _Call[dict[str, dict[str, Any]]]:
    return _Call("GET", _connector_offsets_path(connector), lambda r: r.json()["tasks"])  # type: ignore[index]


def _save_connector_offsets(
    connector: str, task: str, checkpoint: dict[str, Any] | None, producer: ProducerIdentity | None
) -> _Call[None]:
    fields = (
        {} if producer is None else {"producer_id": producer.producer_id, "producer_epoch": producer.producer_epoch}
    )
    body = orjson.dumps({"task": task, "checkpoint": checkpoint, **fields})
    return _Call("PUT", _connector_offsets_path(connector), lambda r: None, body)


def _claim_producer(name: str, lease_ms: int, holder: ProducerIdentity | None) -> _Call[ProducerIdentity]:
    body = {"name": name, "lease_ms": lease_ms, **(_identity(holder) if holder else {})}
    return _Call("POST", "/v1/producers", ProducerIdentity.from_response, orjson.dumps(body))


def _identity(producer: ProducerIdentity) -> dict[str, int]:
    return {"producer_id": producer.producer_id, "producer_epoch": producer.producer_epoch}


def _fence(path: str, holder: ProducerIdentity) -> _Call[None]:
    return _Call("POST", path, lambda r: None, orjson.dumps(_identity(holder)))


# Settings whose -1 (Kafka's convention) means unlimited (retention, the compaction lag) or the server's default
# (segment rolls): sent as null.
_UNSET_BY_MINUS_ONE = ("retention_ms", "retention_bytes", "max_compaction_lag_ms", "segment_ms", "segment_bytes")


def _given(settings: Mapping[str, object]) -> dict[str, object]:
    """The settings given (None: not given, the server's default or unchanged; -1 of an unlimited one: null)."""
    return {k: None if v == -1 and k in _UNSET_BY_MINUS_ONE else v for k, v in settings.items() if v is not None}


def send(url: str, call: _Call[T], timeout: float) -> Steps[T]:
    """Steps of one admin request to the server at ``url``: its answer, read, or its error raised."""
    request = Request(call.method, url + call.path, call.params, call.body, _JSON, timeout)
    return call.read(check((yield from http(request))))


class _Admin(ConnectorAdmin, ClientBase[AnyTransport]):
    """Create, list, describe, change and delete topics.

    >>> admin = Admin("http://127.0.0.1:8080")
    >>> admin.create_topic("orders", partitions=8)

    With auth on, ``token=`` (default: ``TALOS_TOKEN``) decides what it may do: the admin token manages
    tenants, tokens, grants and quotas; a tenant's token its own topics, tokens and quota requests.

    Over ``https://``, ``tls=`` (a :class:`talos.TLS` or an ``ssl.SSLContext``; default: ``TALOS_CA_FILE``,
    ``TALOS_CERT_FILE``, ``TALOS_KEY_FILE``) says which CAs to trust and which client certificate to present; the
    producers, consumers and subscribers take it too.
    """

    _transport: AnyTransport

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        timeout: float = 30.0,
        transport: AnyTransport | None = None,
        token: str | None = None,
        tls: TLSOption = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._timeout = timeout
        self._transport = self._connect(transport, token, timeout, tls=tls)

    def _send(self, call: _Call[T]) -> Steps[T]:
        return send(self.url, call, self._timeout)

    @operation
    def create_topic(
        self,
        name: str,
        *,
        partitions: int = 1,
        retention_ms: int | None = None,
        retention_bytes: int | None = None,
        cleanup_policy: str | None = None,
        min_compaction_lag_ms: int | None = None,
        max_compaction_lag_ms: int | None = None,
        delete_retention_ms: int | None = None,
        min_cleanable_dirty_ratio: float | None = None,
        segment_ms: int | None = None,
        segment_bytes: int | None = None,
        value_schema_validation: bool | None = None,
        key_schema_validation: bool | None = None,
    ) -> Steps[TopicInfo]:
        """A new topic. ``cleanup_policy="compact"`` keeps the last value of every key (a record with a key
        and a None value deletes it) instead of, or with ``"compact,delete"`` besides, retention."""
        settings = {
            "retention_ms": retention_ms,
            "retention_bytes": retention_bytes,
            "cleanup_policy": cleanup_policy,
            "min_compaction_lag_ms": min_compaction_lag_ms,
            "max_compaction_lag_ms": max_compaction_lag_ms,
            "delete_retention_ms": delete_retention_ms,
            "min_cleanable_dirty_ratio": min_cleanable_dirty_ratio,
            "segment_ms": segment_ms,
            "segment_bytes": segment_bytes,
            "value_schema_validation": value_schema_validation,
            "key_schema_validation": key_schema_validation,
        }
        return self._send(_create(name, partitions, settings))

    @operation
    def list_topics(self) -> Steps[list[TopicInfo]]:
        return self._send(_list())

    @operation
    def describe_topic(self, name: str) -> Steps[TopicInfo]:
        """The topic with each partition's earliest and latest offsets."""
        return self._send(_describe(name))

    @operation
    def alter_topic(
        self,
        name: str,
        *,
        partitions: int | None = None,
        retention_ms: int | None = None,
        retention_bytes: int | None = None,
        trace_sample: int | None = None,
        cleanup_policy: str | None = None,
        min_compaction_lag_ms: int | None = None,
        max_compaction_lag_ms: int | None = None,
        delete_retention_ms: int | None = None,
        min_cleanable_dirty_ratio: float | None = None,
        segment_ms: int | None = None,
        segment_bytes: int | None = None,
        value_schema_validation: bool | None = None,
        key_schema_validation: bool | None = None,
    ) -> Steps[TopicInfo]:
        """Add partitions (never fewer), change retention, compaction, or the message trace: ``trace_sample``
        0 off, 1 every message, N one message in N. None leaves a setting as it is; -1 makes retention or the
        largest compaction lag unlimited again, and a segment size or age the server's default.
        ``value_schema_validation`` / ``key_schema_validation``: refuse records whose value (key) does not carry
        a schema id registered under the topic's subject (docs/schema-registry.md)."""
        changes = {
            "partitions": partitions,
            "retention_ms": retention_ms,
            "retention_bytes": retention_bytes,
            "trace_sample": trace_sample,
            "cleanup_policy": cleanup_policy,
            "min_compaction_lag_ms": min_compaction_lag_ms,
            "max_compaction_lag_ms": max_compaction_lag_ms,
            "delete_retention_ms": delete_retention_ms,
            "min_cleanable_dirty_ratio": min_cleanable_dirty_ratio,
            "segment_ms": segment_ms,
            "segment_bytes": segment_bytes,
            "value_schema_validation": value_schema_validation,
            "key_schema_validation": key_schema_validation,
        }
        return self._send(_alter(name, _given(changes)))

    @operation
    def delete_topic(self, name: str) -> Steps[None]:
        return self._send(_delete(name))

    @operation
    def delete_records(self, topic: str, offsets: Mapping[int, int]) -> Steps[dict[int, int]]:
        """Delete every record below ``offsets[partition]`` of each partition named (-1: every record so far), as
        Kafka's DeleteRecords; durable when this returns. Each partition's new earliest offset (its low
        watermark). Past a partition's latest offset raises :class:`OffsetOutOfRangeError`."""
        return self._send(_delete_records(topic, offsets))

    @operation
    def compact(self, topic: str, partition: int) -> Steps[dict[str, Any]]:
        """Compact a partition of a compacted topic now, whatever its dirty ratio (docs/compaction.md); what the
        pass did: ``{"compacted", "cleaned_to", "records_removed", "bytes_read", "bytes_written", ...}``."""
        return self._send(_compact(topic, partition))

    @operation
    def offsets(self, topic: str, partition: int, *, timestamp: int | None = None) -> Steps[dict[str, int]]:
        """``{"earliest", "latest", "last_stable", "session"}``, and ``"offset"``: the first at or after
        ``timestamp`` (ms) if given. ``last_stable``: the latest for read-committed readers (below it every
        transaction is decided). ``session`` is the partition's load session (it changes when the partition
        moves)."""
        return self._send(offsets_call(topic, partition, timestamp))

    @operation
    def trace(self, topic: str, partition: int, offset: int) -> Steps[dict[str, Any]]:
        """What happened to one message of a traced topic (``alter_topic(trace_sample=)``): ``{"events":
        [{"event": "produced" | "delivered" | "committed" | "retried" | "dead_lettered", "ts", ...}], "key"?,
        "traceparent"?, "sampled"}``, oldest first."""
        return self._send(_trace(topic, partition, offset))

    @operation
    def trace_key(
        self,
        topic: str,
        key: str | bytes,
        *,
        since_ms: int | None = None,
        until_ms: int | None = None,
        limit: int = 100,
    ) -> Steps[list[dict[str, Any]]]:
        """The traced messages of ``topic`` with ``key`` produced between ``since_ms`` (default: a day ago) and
        ``until_ms`` (default: now), each with its timeline as :meth:`trace` gives it."""
        return self._send(_trace_key(topic, key, since_ms, until_ms, limit))

    @operation
    def create_subscription(
        self,
        name: str,
        topic: str,
        *,
        ack_timeout_ms: int | None = None,
        max_deliveries: int | None = None,
        key_ordered: bool | None = None,
        max_in_flight: int | None = None,
        start: str | None = None,
    ) -> Steps[dict[str, Any]]:
        """Make a push subscription of ``topic`` (see :class:`talos.Subscriber`): messages not acknowledged within
        ``ack_timeout_ms`` (30 s) go to another subscriber; after ``max_deliveries`` (5; 0: never) to the
        dead-letter topic ``__sub-dlq.<name>``; ``key_ordered`` holds a key's next message until the earlier one
        is settled; ``start`` is ``"latest"`` (default) or ``"earliest"``. Its description."""
        settings: dict[str, object] = {
            "ack_timeout_ms": ack_timeout_ms,
            "max_deliveries": max_deliveries,
            "key_ordered": key_ordered,
            "max_in_flight": max_in_flight,
            "start": start,
        }
        return self._send(_create_subscription(name, topic, settings))

    @operation
    def list_subscriptions(self) -> Steps[list[str]]:
        """Names of the push subscriptions the caller may use."""
        return self._send(_Call("GET", "/v1/subscriptions", lambda r: r.json()["subscriptions"]))  # type: ignore[index]

    @operation
    def describe_subscription(self, name: str) -> Steps[dict[str, Any]]:
        """Settings, subscribers, and per partition what is settled, unsettled and leased."""
        return self._send(_Call("GET", _subscription_path(name), _json))

    @operation
    def delete_subscription(self, name: str) -> Steps[None]:
        """Delete the subscription with its state and dead-letter topics."""
        return self._send(_Call("DELETE", _subscription_path(name), lambda r: None))

    @operation
    def list_groups(self) -> Steps[list[str]]:
        """Names of the consumer groups that ever joined (with auth on: those the caller may use)."""
        return self._send(_list_groups())

    @operation
    def list_transactions(self) -> Steps[list[dict[str, Any]]]:
        """Every transactional id (the caller's tenant's; the admin: everyone's) with its state (``Empty``,
        ``Ongoing``, ``PrepareCommit``, ``CompleteCommit``, ...), producer id and epoch, and the partitions of
        its open transaction."""
        return self._send(_list_transactions())

    @operation
    def describe_transaction(self, transactional_id: str) -> Steps[dict[str, Any]]:
        """One transactional id: its state, producer id and epoch, timeout, the open transaction's start time
        (ms; -1: none) and partitions, and a named producer's lease (``lease_until_ms``, 0: none).
        :class:`NotFoundError` if it was never initialized (or expired)."""
        return self._send(_describe_transaction(transactional_id))

    @operation
    def describe_group(self, name: str) -> Steps[dict[str, Any]]:
        """Members, their assignment, and per partition the committed offset, high watermark and lag."""
        return self._send(_describe_group(name))

    @operation
    def reset_offsets(
        self,
        group: str,
        topic: str,
        *,
        to: str,
        partition: int | None = None,
        offset: int | None = None,
        timestamp: int | None = None,
    ) -> Steps[list[dict[str, Any]]]:
        """Move the group's committed offsets of ``topic`` (or one partition) to ``"earliest"``, ``"latest"``,
        an ``"offset"`` or a ``"timestamp"`` (ms). The group must have no active members (409 otherwise)."""
        return self._send(_reset_offsets(group, topic, to, partition, offset, timestamp))

    @operation
    def connector_offsets(self, connector: str) -> Steps[dict[str, dict[str, Any]]]:
        """The connector's checkpoints, task → document (this token's tenant's connector of that name)."""
        return self._send(_connector_offsets(connector))

    @operation
    def save_connector_offsets(
        self, connector: str, task: str, checkpoint: dict[str, Any] | None, *, producer: ProducerIdentity | None = None
    ) -> Steps[None]:
        """Save one task's checkpoint (None removes it); durable when this returns. With ``producer`` (the
        task's named producer) the save raises :class:`ProducerFencedError` once a newer instance of the task
        fenced the connector (:meth:`fence_connector`)."""
        return self._send(_save_connector_offsets(connector, task, checkpoint, producer))

    @operation
    def fence_connector(self, connector: str, producer: ProducerIdentity) -> Steps[None]:
        """Refuse older epochs of ``producer`` on the connector's checkpoints; every checkpoint they saved
        before is readable when this returns."""
        return self._send(_fence(f"/v1/connectors/{quote(connector, safe='')}/fence", producer))

    # ---------------------------------------------------------------- named producers

    @operation
    def claim_producer(self, name: str, *, lease_s: float = 0.0) -> Steps[ProducerIdentity]:
        """The named producer ``name`` (one id per tenant and name, like Kafka's ``transactional.id``) at a new
        epoch, which fences every older instance wherever it is fenced (:meth:`fence_topic`) or the new one
        writes. With ``lease_s``, no other claim succeeds for that long unless this instance renews
        (:meth:`renew_producer`) — it raises a retriable :class:`ConflictError` ``PRODUCER_BUSY`` with
        ``retry_after`` — so a second instance waits instead of fencing a live one."""
        return self._send(_claim_producer(name, int(lease_s * 1000), None))

    @operation
    def renew_producer(self, name: str, producer: ProducerIdentity, *, lease_s: float) -> Steps[ProducerIdentity]:
        """Extend the lease of a claimed named producer (``lease_s=0`` releases it). Raises
        :class:`ProducerFencedError` if a newer instance has claimed it."""
        return self._send(_claim_producer(name, int(lease_s * 1000), producer))

    @operation
    def fence_topic(self, topic: str, producer: ProducerIdentity) -> Steps[None]:
        """Refuse older epochs of ``producer`` on every partition of ``topic``; every write they had
        acknowledged, or still get acknowledged, is readable when this returns."""
        return self._send(_fence(f"/v1/topics/{quote(topic, safe='')}/fence", producer))

    # ---------------------------------------------------------------- tenants, tokens, grants, quotas
    # The admin token manages everything; a tenant's token manages its own tokens, grants on its topics,
    # reads its quotas and asks for more.

    @operation
    def whoami(self) -> Steps[dict[str, Any]]:
        """``{"tenant", "admin", "token_id", "auth"}`` of the token this client sends."""
        return self._send(calls.whoami())

    @operation
    def create_tenant(
        self, name: str, *, description: str = "", quota: dict[str, float] | None = None
    ) -> Steps[dict[str, Any]]:
        return self._send(calls.create_tenant(name, description, quota))

    @operation
    def list_tenants(self) -> Steps[list[dict[str, Any]]]:
        return self._send(calls.list_tenants())

    @operation
    def delete_tenant(self, name: str) -> Steps[None]:
        return self._send(calls.delete_tenant(name))

    @operation
    def create_token(self, tenant: str, *, name: str = "") -> Steps[dict[str, Any]]:
        """A new token of ``tenant``; ``["token"]`` is the secret, shown this once."""
        return self._send(calls.create_token(tenant, name))

    @operation
    def list_tokens(self, tenant: str) -> Steps[list[dict[str, Any]]]:
        return self._send(calls.list_tokens(tenant))

    @operation
    def revoke_token(self, tenant: str, token_id: str) -> Steps[None]:
        return self._send(calls.revoke_token(tenant, token_id))

    @operation
    def grant(self, topic: str, tenant: str, actions: list[str]) -> Steps[dict[str, Any]]:
        """Let ``tenant`` produce / consume / admin ``topic`` (a name, ``prefix*`` or ``*``)."""
        return self._send(calls.grant(topic, tenant, actions))

    @operation
    def revoke(self, topic: str, tenant: str, actions: list[str] | None = None) -> Steps[None]:
        return self._send(calls.revoke(topic, tenant, actions))

    @operation
    def list_acls(self, *, topic: str | None = None, tenant: str | None = None) -> Steps[list[dict[str, Any]]]:
        return self._send(calls.list_acls(topic, tenant))

    @operation
    def grant_group(self, group: str, tenant: str) -> Steps[dict[str, Any]]:
        """Let ``tenant`` use consumer group ``group`` (one the caller owns): join, commit, reset, describe,
        and its retry and dead-letter topics."""
        return self._send(calls.grant_group(group, tenant))

    @operation
    def revoke_group(self, group: str, tenant: str) -> Steps[None]:
        return self._send(calls.revoke_group(group, tenant))

    @operation
    def list_group_acls(self, *, group: str | None = None, tenant: str | None = None) -> Steps[list[dict[str, Any]]]:
        return self._send(calls.list_group_acls(group, tenant))

    @operation
    def quotas(self, tenant: str) -> Steps[dict[str, Any]]:
        return self._send(calls.quotas(tenant))

    @operation
    def set_quota(
        self, /, *, tenant: str | None = None, topic: str | None = None, **limits: float | None
    ) -> Steps[dict[str, Any]]:
        """Set limits (``produce_bytes_per_s``, ``fetch_bytes_per_s``, ``requests_per_s``, ``partitions``;
        None = unlimited) of a tenant or a topic."""
        return self._send(calls.set_quota(tenant, topic, limits))

    @operation
    def request_quota(
        self,
        resource: str,
        requested: float,
        *,
        topic: str | None = None,
        tenant: str | None = None,
        justification: str = "",
    ) -> Steps[dict[str, Any]]:
        """Ask for a new limit; the answer holds the decision (``status``, ``reason``)."""
        return self._send(calls.request_quota(resource, requested, topic, tenant, justification))

    @operation
    def quota_requests(self, *, status: str | None = None) -> Steps[list[dict[str, Any]]]:
        return self._send(calls.quota_requests(status))

    @operation
    def decide_quota_request(self, request_id: int, *, approve: bool, reason: str = "") -> Steps[dict[str, Any]]:
        return self._send(calls.decide(request_id, approve, reason))

    @operation
    def audit(self, *, limit: int = 200) -> Steps[list[dict[str, Any]]]:
        """The audit log, newest first."""
        return self._send(calls.audit(limit))


class Admin(Blocking, _Admin[Transport]):
    __doc__ = _Admin.__doc__


class AsyncAdmin(Asynchronous, _Admin[AsyncTransport]):
    """The asyncio twin of :class:`Admin`: the same methods, awaited."""
