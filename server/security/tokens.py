"""Bearer tokens: ``talos_<id>_<secret>``. Only a hash of the secret is stored.

The secret is 32 random bytes, so a plain SHA-256 is enough (no password-style slow hash: nothing to guess).
The id is public (it names the token in lists and logs); the secret never leaves the response that made it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets

__all__ = ["TOKEN_PATTERN", "hash_secret", "new_token", "parse_token", "verify"]

TOKEN_PATTERN = re.compile(r"^talos_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_token() -> tuple[str, str, str]:
    """A fresh token: (token as given to its holder, its id, the hash to store)."""
    token_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    return f"talos_{token_id}_{secret}", token_id, hash_secret(secret)


def parse_token(token: str) -> tuple[str, str] | None:
    """(id, secret) of a well-formed token, else None."""
    match = TOKEN_PATTERN.match(token)
    return (match.group(1), match.group(2)) if match else None


def verify(secret: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_secret(secret), stored_hash)


def basic_as_bearer(header: str) -> str | None:
    """``Authorization: Basic`` of ``<anything>:<token>`` (how Confluent clients send credentials) as
    ``Bearer <token>``; None for any other value."""
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        _user, _, token = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return f"Bearer {token}" if token else None
