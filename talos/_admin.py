"""Topic administration: ``Admin`` and its asyncio twin ``AsyncAdmin``.

Each call is described once as a :class:`_Call` (method, path, body, how to read the answer); the two
classes only differ in how they send it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import orjson

from talos._admin_call import Call as _Call
from talos._tenants import SecurityCalls as calls
from talos._transport import (
    AiohttpTransport,
    AsyncTransport,
    Transport,
    Urllib3Transport,
    authorized,
    authorized_async,
    check,
)

__all__ = ["Admin", "AsyncAdmin", "PartitionInfo", "TopicInfo", "DEFAULT_URL"]

DEFAULT_URL = "http://127.0.0.1:8080"
_JSON = {"content-type": "application/json"}


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
class TopicInfo:
    name: str
    partitions: int
    retention_ms: int | None = None
    retention_bytes: int | None = None
    version: int = 1
    created_ms: int = 0
    partition_offsets: list[PartitionInfo] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: Any) -> TopicInfo:
        detail = [PartitionInfo.from_json(p) for p in data.get("partitions_detail", [])]
        return cls(
            data["name"],
            data["partitions"],
            data.get("retention_ms"),
            data.get("retention_bytes"),
            data.get("version", 1),
            data.get("created_ms", 0),
            detail,
        )


def _topic_path(name: str) -> str:
    return f"/v1/topics/{quote(name, safe='')}"


def _create(name: str, partitions: int, retention_ms: int | None, retention_bytes: int | None) -> _Call:
    body: dict[str, object] = {"name": name, "partitions": partitions}
    if retention_ms is not None:
        body["retention_ms"] = retention_ms
    if retention_bytes is not None:
        body["retention_bytes"] = retention_bytes
    return _Call("POST", "/v1/topics", lambda r: TopicInfo.from_json(r.json()), orjson.dumps(body))


def _list() -> _Call:
    return _Call("GET", "/v1/topics", lambda r: [TopicInfo.from_json(t) for t in r.json()["topics"]])  # type: ignore[index]


def _describe(name: str) -> _Call:
    return _Call("GET", _topic_path(name), lambda r: TopicInfo.from_json(r.json()))


def _alter(name: str, changes: dict[str, int | None]) -> _Call:
    return _Call("PATCH", _topic_path(name), lambda r: TopicInfo.from_json(r.json()), orjson.dumps(changes))


def _delete(name: str) -> _Call:
    return _Call("DELETE", _topic_path(name), lambda r: None)


def _offsets(topic: str, partition: int, timestamp: int | None) -> _Call:
    params: dict[str, str | int] | None = {"timestamp": timestamp} if timestamp is not None else None
    return _Call("GET", f"{_topic_path(topic)}/partitions/{partition}/offsets", lambda r: r.json(), params=params)


def _group_path(name: str) -> str:
    return f"/v1/groups/{quote(name, safe='')}"


def _list_groups() -> _Call:
    return _Call("GET", "/v1/groups", lambda r: r.json()["groups"])  # type: ignore[index]


def _describe_group(name: str) -> _Call:
    return _Call("GET", _group_path(name), lambda r: r.json())


def _reset_offsets(
    group: str, topic: str, to: str, partition: int | None, offset: int | None, timestamp: int | None
) -> _Call:
    if to not in ("earliest", "latest", "offset", "timestamp"):
        raise ValueError("to must be 'earliest', 'latest', 'offset' or 'timestamp'")
    body = {"topic": topic, "to": to, "partition": partition, "offset": offset, "timestamp": timestamp}
    payload = orjson.dumps({k: v for k, v in body.items() if v is not None})
    return _Call("POST", f"{_group_path(group)}/offsets/reset", lambda r: r.json()["offsets"], payload)  # type: ignore[index]


def _connector_offsets_path(connector: str) -> str:
    return f"/v1/connectors/{quote(connector, safe='')}/offsets"


def _connector_offsets(connector: str) -> _Call:
    return _Call("GET", _connector_offsets_path(connector), lambda r: r.json()["tasks"])  # type: ignore[index]


def _save_connector_offsets(connector: str, task: str, checkpoint: dict[str, Any] | None) -> _Call:
    body = orjson.dumps({"task": task, "checkpoint": checkpoint})
    return _Call("PUT", _connector_offsets_path(connector), lambda r: None, body)


def _changes(partitions: int | None, retention_ms: int | None, retention_bytes: int | None) -> dict[str, int | None]:
    changes = {"partitions": partitions, "retention_ms": retention_ms, "retention_bytes": retention_bytes}
    return {k: v for k, v in changes.items() if v is not None}


class Admin:
    """Create, list, describe, change and delete topics.

    >>> admin = Admin("http://127.0.0.1:8080")
    >>> admin.create_topic("orders", partitions=8)

    With auth on, ``token=`` (default: ``TALOS_TOKEN``) decides what it may do: the admin token manages
    tenants, tokens, grants and quotas; a tenant's token its own topics, tokens and quota requests.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        timeout: float = 30.0,
        transport: Transport | None = None,
        token: str | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._timeout = timeout
        self._transport = authorized(transport or Urllib3Transport(timeout=timeout), token)

    def _call(self, call: _Call) -> Any:
        response = self._transport.request(
            call.method, self.url + call.path, params=call.params, body=call.body, headers=_JSON, timeout=self._timeout
        )
        return call.read(check(response))

    def create_topic(
        self, name: str, *, partitions: int = 1, retention_ms: int | None = None, retention_bytes: int | None = None
    ) -> TopicInfo:
        return self._call(_create(name, partitions, retention_ms, retention_bytes))  # type: ignore[no-any-return]

    def list_topics(self) -> list[TopicInfo]:
        return self._call(_list())  # type: ignore[no-any-return]

    def describe_topic(self, name: str) -> TopicInfo:
        """The topic with each partition's earliest and latest offsets."""
        return self._call(_describe(name))  # type: ignore[no-any-return]

    def alter_topic(
        self,
        name: str,
        *,
        partitions: int | None = None,
        retention_ms: int | None = None,
        retention_bytes: int | None = None,
    ) -> TopicInfo:
        """Add partitions (never fewer) or change retention."""
        return self._call(_alter(name, _changes(partitions, retention_ms, retention_bytes)))  # type: ignore[no-any-return]

    def delete_topic(self, name: str) -> None:
        self._call(_delete(name))

    def offsets(self, topic: str, partition: int, *, timestamp: int | None = None) -> dict[str, int]:
        """``{"earliest", "latest", "session"}``, and ``"offset"``: the first at or after ``timestamp`` (ms)
        if given. ``session`` is the partition's load session (it changes when the partition moves)."""
        return self._call(_offsets(topic, partition, timestamp))  # type: ignore[no-any-return]

    def list_groups(self) -> list[str]:
        """Names of the consumer groups that ever joined (with auth on: those the caller may use)."""
        return self._call(_list_groups())  # type: ignore[no-any-return]

    def describe_group(self, name: str) -> dict[str, Any]:
        """Members, their assignment, and per partition the committed offset, high watermark and lag."""
        return self._call(_describe_group(name))  # type: ignore[no-any-return]

    def reset_offsets(
        self,
        group: str,
        topic: str,
        *,
        to: str,
        partition: int | None = None,
        offset: int | None = None,
        timestamp: int | None = None,
    ) -> list[dict[str, Any]]:
        """Move the group's committed offsets of ``topic`` (or one partition) to ``"earliest"``, ``"latest"``,
        an ``"offset"`` or a ``"timestamp"`` (ms). The group must have no active members (409 otherwise)."""
        return self._call(_reset_offsets(group, topic, to, partition, offset, timestamp))  # type: ignore[no-any-return]

    def connector_offsets(self, connector: str) -> dict[str, dict[str, Any]]:
        """The connector's checkpoints, task → document (this token's tenant's connector of that name)."""
        return self._call(_connector_offsets(connector))  # type: ignore[no-any-return]

    def save_connector_offsets(self, connector: str, task: str, checkpoint: dict[str, Any] | None) -> None:
        """Save one task's checkpoint (None removes it); durable when this returns."""
        self._call(_save_connector_offsets(connector, task, checkpoint))

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ---------------------------------------------------------------- tenants, tokens, grants, quotas
    # The admin token manages everything; a tenant's token manages its own tokens, grants on its topics,
    # reads its quotas and asks for more.

    def whoami(self) -> dict[str, Any]:
        """``{"tenant", "admin", "token_id", "auth"}`` of the token this client sends."""
        return self._call(calls.whoami())  # type: ignore[no-any-return]

    def create_tenant(
        self, name: str, *, description: str = "", quota: dict[str, float] | None = None
    ) -> dict[str, Any]:
        return self._call(calls.create_tenant(name, description, quota))  # type: ignore[no-any-return]

    def list_tenants(self) -> list[dict[str, Any]]:
        return self._call(calls.list_tenants())  # type: ignore[no-any-return]

    def delete_tenant(self, name: str) -> None:
        self._call(calls.delete_tenant(name))

    def create_token(self, tenant: str, *, name: str = "") -> dict[str, Any]:
        """A new token of ``tenant``; ``["token"]`` is the secret, shown this once."""
        return self._call(calls.create_token(tenant, name))  # type: ignore[no-any-return]

    def list_tokens(self, tenant: str) -> list[dict[str, Any]]:
        return self._call(calls.list_tokens(tenant))  # type: ignore[no-any-return]

    def revoke_token(self, tenant: str, token_id: str) -> None:
        self._call(calls.revoke_token(tenant, token_id))

    def grant(self, topic: str, tenant: str, actions: list[str]) -> dict[str, Any]:
        """Let ``tenant`` produce / consume / admin ``topic`` (a name, ``prefix*`` or ``*``)."""
        return self._call(calls.grant(topic, tenant, actions))  # type: ignore[no-any-return]

    def revoke(self, topic: str, tenant: str, actions: list[str] | None = None) -> None:
        self._call(calls.revoke(topic, tenant, actions))

    def list_acls(self, *, topic: str | None = None, tenant: str | None = None) -> list[dict[str, Any]]:
        return self._call(calls.list_acls(topic, tenant))  # type: ignore[no-any-return]

    def grant_group(self, group: str, tenant: str) -> dict[str, Any]:
        """Let ``tenant`` use consumer group ``group`` (one the caller owns): join, commit, reset, describe,
        and its retry and dead-letter topics."""
        return self._call(calls.grant_group(group, tenant))  # type: ignore[no-any-return]

    def revoke_group(self, group: str, tenant: str) -> None:
        self._call(calls.revoke_group(group, tenant))

    def list_group_acls(self, *, group: str | None = None, tenant: str | None = None) -> list[dict[str, Any]]:
        return self._call(calls.list_group_acls(group, tenant))  # type: ignore[no-any-return]

    def quotas(self, tenant: str) -> dict[str, Any]:
        return self._call(calls.quotas(tenant))  # type: ignore[no-any-return]

    def set_quota(
        self, *, tenant: str | None = None, topic: str | None = None, **limits: float | None
    ) -> dict[str, Any]:
        """Set limits (``produce_bytes_per_s``, ``fetch_bytes_per_s``, ``requests_per_s``, ``partitions``;
        None = unlimited) of a tenant or a topic."""
        return self._call(calls.set_quota(tenant, topic, limits))  # type: ignore[no-any-return]

    def request_quota(
        self,
        resource: str,
        requested: float,
        *,
        topic: str | None = None,
        tenant: str | None = None,
        justification: str = "",
    ) -> dict[str, Any]:
        """Ask for a new limit; the answer holds the decision (``status``, ``reason``)."""
        call = calls.request_quota(resource, requested, topic, tenant, justification)
        return self._call(call)  # type: ignore[no-any-return]

    def quota_requests(self, *, status: str | None = None) -> list[dict[str, Any]]:
        return self._call(calls.quota_requests(status))  # type: ignore[no-any-return]

    def decide_quota_request(self, request_id: int, *, approve: bool, reason: str = "") -> dict[str, Any]:
        return self._call(calls.decide(request_id, approve, reason))  # type: ignore[no-any-return]

    def audit(self, *, limit: int = 200) -> list[dict[str, Any]]:
        """The audit log, newest first."""
        return self._call(calls.audit(limit))  # type: ignore[no-any-return]


class AsyncAdmin:
    """The asyncio twin of :class:`Admin`."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        timeout: float = 30.0,
        transport: AsyncTransport | None = None,
        token: str | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._timeout = timeout
        self._transport = authorized_async(transport or AiohttpTransport(timeout=timeout), token)

    async def _call(self, call: _Call) -> Any:
        response = await self._transport.request(
            call.method, self.url + call.path, params=call.params, body=call.body, headers=_JSON, timeout=self._timeout
        )
        return call.read(check(response))

    async def create_topic(
        self, name: str, *, partitions: int = 1, retention_ms: int | None = None, retention_bytes: int | None = None
    ) -> TopicInfo:
        return await self._call(_create(name, partitions, retention_ms, retention_bytes))  # type: ignore[no-any-return]

    async def list_topics(self) -> list[TopicInfo]:
        return await self._call(_list())  # type: ignore[no-any-return]

    async def describe_topic(self, name: str) -> TopicInfo:
        return await self._call(_describe(name))  # type: ignore[no-any-return]

    async def alter_topic(
        self,
        name: str,
        *,
        partitions: int | None = None,
        retention_ms: int | None = None,
        retention_bytes: int | None = None,
    ) -> TopicInfo:
        return await self._call(_alter(name, _changes(partitions, retention_ms, retention_bytes)))  # type: ignore[no-any-return]

    async def delete_topic(self, name: str) -> None:
        await self._call(_delete(name))

    async def offsets(self, topic: str, partition: int, *, timestamp: int | None = None) -> dict[str, int]:
        return await self._call(_offsets(topic, partition, timestamp))  # type: ignore[no-any-return]

    async def list_groups(self) -> list[str]:
        return await self._call(_list_groups())  # type: ignore[no-any-return]

    async def describe_group(self, name: str) -> dict[str, Any]:
        return await self._call(_describe_group(name))  # type: ignore[no-any-return]

    async def reset_offsets(
        self,
        group: str,
        topic: str,
        *,
        to: str,
        partition: int | None = None,
        offset: int | None = None,
        timestamp: int | None = None,
    ) -> list[dict[str, Any]]:
        return await self._call(_reset_offsets(group, topic, to, partition, offset, timestamp))  # type: ignore[no-any-return]

    async def connector_offsets(self, connector: str) -> dict[str, dict[str, Any]]:
        return await self._call(_connector_offsets(connector))  # type: ignore[no-any-return]

    async def save_connector_offsets(self, connector: str, task: str, checkpoint: dict[str, Any] | None) -> None:
        await self._call(_save_connector_offsets(connector, task, checkpoint))

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> AsyncAdmin:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # ---------------------------------------------------------------- tenants, tokens, grants, quotas
    # The admin token manages everything; a tenant's token manages its own tokens, grants on its topics,
    # reads its quotas and asks for more.

    async def whoami(self) -> dict[str, Any]:
        """``{"tenant", "admin", "token_id", "auth"}`` of the token this client sends."""
        return await self._call(calls.whoami())  # type: ignore[no-any-return]

    async def create_tenant(
        self, name: str, *, description: str = "", quota: dict[str, float] | None = None
    ) -> dict[str, Any]:
        return await self._call(calls.create_tenant(name, description, quota))  # type: ignore[no-any-return]

    async def list_tenants(self) -> list[dict[str, Any]]:
        return await self._call(calls.list_tenants())  # type: ignore[no-any-return]

    async def delete_tenant(self, name: str) -> None:
        await self._call(calls.delete_tenant(name))

    async def create_token(self, tenant: str, *, name: str = "") -> dict[str, Any]:
        """A new token of ``tenant``; ``["token"]`` is the secret, shown this once."""
        return await self._call(calls.create_token(tenant, name))  # type: ignore[no-any-return]

    async def list_tokens(self, tenant: str) -> list[dict[str, Any]]:
        return await self._call(calls.list_tokens(tenant))  # type: ignore[no-any-return]

    async def revoke_token(self, tenant: str, token_id: str) -> None:
        await self._call(calls.revoke_token(tenant, token_id))

    async def grant(self, topic: str, tenant: str, actions: list[str]) -> dict[str, Any]:
        """Let ``tenant`` produce / consume / admin ``topic`` (a name, ``prefix*`` or ``*``)."""
        return await self._call(calls.grant(topic, tenant, actions))  # type: ignore[no-any-return]

    async def revoke(self, topic: str, tenant: str, actions: list[str] | None = None) -> None:
        await self._call(calls.revoke(topic, tenant, actions))

    async def list_acls(self, *, topic: str | None = None, tenant: str | None = None) -> list[dict[str, Any]]:
        return await self._call(calls.list_acls(topic, tenant))  # type: ignore[no-any-return]

    async def grant_group(self, group: str, tenant: str) -> dict[str, Any]:
        """See :meth:`Admin.grant_group`."""
        return await self._call(calls.grant_group(group, tenant))  # type: ignore[no-any-return]

    async def revoke_group(self, group: str, tenant: str) -> None:
        await self._call(calls.revoke_group(group, tenant))

    async def list_group_acls(self, *, group: str | None = None, tenant: str | None = None) -> list[dict[str, Any]]:
        return await self._call(calls.list_group_acls(group, tenant))  # type: ignore[no-any-return]

    async def quotas(self, tenant: str) -> dict[str, Any]:
        return await self._call(calls.quotas(tenant))  # type: ignore[no-any-return]

    async def set_quota(
        self, *, tenant: str | None = None, topic: str | None = None, **limits: float | None
    ) -> dict[str, Any]:
        """Set limits (``produce_bytes_per_s``, ``fetch_bytes_per_s``, ``requests_per_s``, ``partitions``;
        None = unlimited) of a tenant or a topic."""
        return await self._call(calls.set_quota(tenant, topic, limits))  # type: ignore[no-any-return]

    async def request_quota(
        self,
        resource: str,
        requested: float,
        *,
        topic: str | None = None,
        tenant: str | None = None,
        justification: str = "",
    ) -> dict[str, Any]:
        """Ask for a new limit; the answer holds the decision (``status``, ``reason``)."""
        call = calls.request_quota(resource, requested, topic, tenant, justification)
        return await self._call(call)  # type: ignore[no-any-return]

    async def quota_requests(self, *, status: str | None = None) -> list[dict[str, Any]]:
        return await self._call(calls.quota_requests(status))  # type: ignore[no-any-return]

    async def decide_quota_request(self, request_id: int, *, approve: bool, reason: str = "") -> dict[str, Any]:
        return await self._call(calls.decide(request_id, approve, reason))  # type: ignore[no-any-return]

    async def audit(self, *, limit: int = 200) -> list[dict[str, Any]]:
        """The audit log, newest first."""
        return await self._call(calls.audit(limit))  # type: ignore[no-any-return]
