"""Headers on every portal response (``/portal``…): no framing (clickjacking), no MIME sniffing, no
referrer to other sites, no caching of pages that hold CSRF nonces, and a Content-Security-Policy that
lets nothing load. A rendered page sets its own policy, which adds its inline style and script by nonce
(``pages._render``); this one applies to everything else (redirects, error bodies)."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from server.web import ASGIApp, Receive, Scope, Send

__all__ = ["PAGE_POLICY", "PortalHeaders"]

_POLICY = "default-src 'none'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
# A page: its own inline <style> and <script> (by the nonce of that response), nothing from elsewhere;
# requests from a script only to this server.
PAGE_POLICY = (
    "default-src 'none'; style-src 'nonce-{nonce}'; script-src 'nonce-{nonce}'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS = (
    (b"content-security-policy", _POLICY.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)


def _portal(path: str) -> bool:
    return path == "/portal" or path.startswith("/portal/")


class PortalHeaders:
    """ASGI wrapper adding :data:`_HEADERS` (those a response has not set itself) to portal responses."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _portal(scope["path"]):
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {bytes(name).lower() for name, _ in headers}
                headers += [(name, value) for name, value in _HEADERS if name not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
