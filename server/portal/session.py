"""Portal sessions: a signed cookie naming the token that signed in (never the token itself).

The cookie holds the token's id, its tenant, when it was issued, an expiry and a CSRF nonce, signed with
HMAC-SHA256. A session ends when it expires, when the token is revoked (checked on every page), when the
signing key changes, or when a session of the same token signs out: sign-out records the time in the
security document, which every server reads, and sessions of that token issued until then are void (a
copied cookie dies with the session it was copied from; the token's other sessions end too).

The key is ``portal_secret``, else derived from the admin token, so every server of a cluster accepts
every server's sessions; with neither, a random key per process.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass

import orjson

__all__ = ["COOKIE", "LIFETIME_MS", "Session", "SessionSigner"]

COOKIE = "talos_portal"
_LIFETIME_S = 8 * 3600
LIFETIME_MS = _LIFETIME_S * 1000


@dataclass(frozen=True, slots=True)
class Session:
    token_id: str  # "admin" for the admin token
    tenant: str | None  # None: the admin
    expires: int
    csrf: str
    issued_ms: int = 0

    def ended(self, signed_out: Mapping[str, int]) -> bool:
        """Whether a sign-out of its token (``SecurityState.signed_out``) came at or after it was issued."""
        return signed_out.get(self.token_id, -1) >= self.issued_ms

    @property
    def admin(self) -> bool:
        return self.tenant is None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SessionSigner:
    def __init__(self, secret: str, admin_token: str) -> None:
        if secret:
            self._key = hashlib.sha256(secret.encode()).digest()
        elif admin_token:
            self._key = hmac.new(admin_token.encode(), b"talos-portal-session", hashlib.sha256).digest()
        else:
            self._key = secrets.token_bytes(32)

    def issue(self, token_id: str, tenant: str | None, now: float | None = None) -> tuple[str, Session]:
        at = now or time.time()
        session = Session(token_id, tenant, int(at + _LIFETIME_S), secrets.token_urlsafe(16), int(at * 1000))
        fields = {"t": token_id, "n": tenant, "e": session.expires, "c": session.csrf, "i": session.issued_ms}
        payload = _b64(orjson.dumps(fields))
        return f"{payload}.{self._sign(payload)}", session

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())

    def read(self, cookie: str | None, now: float | None = None) -> Session | None:
        """The session of a cookie this server (or one sharing its key) signed and that has not expired."""
        if not cookie or "." not in cookie:
            return None
        payload, signature = cookie.rsplit(".", 1)
        if not hmac.compare_digest(signature, self._sign(payload)):
            return None
        try:
            data = orjson.loads(_unb64(payload))
            session = Session(str(data["t"]), data["n"], int(data["e"]), str(data["c"]), int(data.get("i", 0)))
        except (ValueError, KeyError, TypeError):
            return None
        return session if session.expires > (now or time.time()) else None
