"""A REST request relayed whole to the server that answers it (a group's or a subscription's coordinator),
and that server's answer sent back as it came."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from server.cluster import Owner
from server.messaging.forwarder import Forwarder
from server.web import as_response

__all__ = ["relay"]


async def relay(
    forwarder: Forwarder, owner: Owner, request: Request, body: bytes, *, path: str | None = None
) -> Response:
    """A FastAPI route's request (its ``body`` already read) forwarded as it came, and the owner's answer. ``path``:
    the path to send, still percent-encoded, for a route whose segments may hold an encoded ``/``."""
    reply = await forwarder.send(
        owner,
        request.method,
        request.url.path if path is None else path,
        query=request.query_params,
        headers=request.headers,
        body=body or None,
    )
    return as_response(reply)
