"""The call to a partition on another server, as a caller: what it passes on (the caller's credentials, tenant,
address, hops), and the owner's answer read back (``answer_of``). The HTTP client itself is the broker's
:class:`~server.peers.Forwarder`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import orjson

from server.cluster import Owner
from server.errors import ApiError
from server.messaging.caller import Caller
from server.peers import HOPS_HEADER, JSON, ROUTE_HEADER, Forwarder, Reply
from server.trace.recorder import CLIENT_HEADER
from server.usage.meter import TENANT_HEADER

__all__ = [
    "BATCH_CONTENT_TYPE",
    "HOPS_HEADER",
    "JSON",
    "ROUTE_HEADER",
    "Forwarder",
    "Reply",
    "answer_of",
    "call_partition",
    "caller_headers",
    "partition_path",
    "post_to_owner",
]

BATCH_CONTENT_TYPE = "application/vnd.talos.batch"


def answer_of(reply: Reply) -> dict[str, Any]:
    """The JSON document of a 2xx answer (another server's; an empty body is ``{}``); the answer's own error
    otherwise, as an :class:`ApiError` with the same status, code and retriability."""
    try:
        doc = orjson.loads(reply.body) if reply.body else {}
    except orjson.JSONDecodeError:
        doc = {}
    if 200 <= reply.status < 300 and isinstance(doc, dict):
        return doc
    error = doc.get("error", {}) if isinstance(doc, dict) else {}
    raise ApiError(
        reply.status if reply.status >= 400 else 502,
        str(error.get("code", "FORWARD_FAILED")),
        str(error.get("message", f"the owner answered {reply.status}")),
        retriable=bool(error.get("retriable", reply.status >= 500)),
        headers={k: v for k, v in reply.headers.items() if k.lower() == "retry-after"},
    )


def partition_path(topic: str, partition: int, leaf: str) -> str:
    return f"/v1/topics/{quote(topic, safe='')}/partitions/{partition}/{leaf}"


def caller_headers(caller: Caller, *, client: bool = True, route: bool = True) -> dict[str, str]:
    """What a forward passes on for ``caller``: its credentials, the tenant it acts for, the producer's address
    (``client``), how often it was forwarded, and (``route``) whether it routes itself."""
    out: dict[str, str] = {}
    if caller.credentials is not None:
        out["authorization"] = caller.credentials
    if caller.tenant is not None:
        out[TENANT_HEADER] = caller.tenant
    if client and caller.client is not None:
        out[CLIENT_HEADER] = caller.client
    if caller.hops is not None:
        out[HOPS_HEADER] = caller.hops
    if route and caller.route is not None:
        out[ROUTE_HEADER] = caller.route
    return out


async def call_partition(
    forwarder: Forwarder,
    caller: Caller,
    owner: Owner,
    method: str,
    topic: str,
    partition: int,
    leaf: str,
    *,
    query: Mapping[str, str],
    body: bytes | None = None,
    content_type: str | None = None,
    accept: str | None = None,
    client: bool = True,
    route: bool = True,
    extra_timeout_s: float = 0.0,
) -> Reply:
    """``method`` on the partition's ``leaf`` (``messages``, ``offsets``, ``fence``) at its owner, as ``caller``."""
    headers = caller_headers(caller, client=client, route=route)
    if content_type is not None:
        headers["content-type"] = content_type
    if accept is not None:
        headers["accept"] = accept
    path = partition_path(topic, partition, leaf)
    return await forwarder.send(
        owner, method, path, query=query, headers=headers, body=body, extra_timeout_s=extra_timeout_s
    )


async def post_to_owner(
    forwarder: Forwarder,
    caller: Caller,
    owner: Owner,
    topic: str,
    partition: int,
    leaf: str,
    body: dict[str, Any],
) -> dict[str, Any]:
    """A server-side action on the partition (``fence``, ``delete-records``, ``txn-markers``: a JSON ``POST``) at
    its owner, as ``caller`` (its credentials and tenant, not its address or routing); the owner's JSON answer,
    or its error as an :class:`ApiError`."""
    reply = await call_partition(
        forwarder,
        caller,
        owner,
        "POST",
        topic,
        partition,
        leaf,
        query={},
        body=orjson.dumps(body),
        content_type=JSON,
        client=False,
        route=False,
    )
    return answer_of(reply)
