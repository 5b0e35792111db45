"""TLS for a server's listeners (REST, the portal and push subscriptions on its HTTP port; the Kafka listener) and for
its calls to the other servers: one certificate and key (PEM), an optional CA bundle, reloaded when the files change.

asyncio keeps the :class:`ssl.SSLContext` a listener was started with, so each listener gets one context for good
whose ``sni_callback`` hands every new handshake the newest context built from the files (OpenSSL calls it for
every ClientHello, with or without a server name). A reload builds a whole new context before it is used: files
caught half rotated (a new certificate, the old key) fail to load, and the previous context goes on serving until
the files change again. Connections already open keep the context they started with.

The CA bundle (``ca_file``) verifies client certificates (``client_auth`` optional or required: mTLS) and the other
servers' certificates when this server forwards to them; without it, peers are checked against the system's CAs.
A server presents its own certificate to the servers it calls, so a cluster can require client certificates
between its members too.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Mapping
from typing import NamedTuple

from server.config import ServerConfig
from server.usage.meter import TENANT_HEADER

__all__ = [
    "CERTIFICATE_HEADER",
    "CERTIFIED_TENANT_HEADER",
    "CLIENT_AUTH",
    "ServerTLS",
    "certificate_name",
    "certified_credentials",
    "certified_tenant",
    "request_credentials",
]

# A verified client certificate names a tenant by its subject's common name (CN): the HTTP protocol puts that name
# in this header of each request of the connection, after dropping any the client sent (only the server says who a
# certificate names); the authentication reads it when no bearer token is sent (server.security.guard).
CERTIFICATE_HEADER = "x-talos-certificate-tenant"
# A request a certificate authenticated, passed on to another server (which never sees the certificate): the
# servers' own token with this header naming the tenant. The other server takes it as that tenant, never as the
# admin, and only along with the admin token: from anyone else it means nothing.
CERTIFIED_TENANT_HEADER = "x-talos-certified-tenant"
# Inside a server, such a request's credentials (what forwards pass on: ``Caller.credentials``, a subscription's
# link) are ``Certified <tenant>``; the forwarder turns them into the two headers above. Sent by a client as its
# ``Authorization``, it authenticates nobody.
_CERTIFIED = "Certified "

log = logging.getLogger("talos.server")

# none: no client certificate asked; optional: asked, and verified if sent; required: a handshake without a valid
# one fails.
CLIENT_AUTH = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}

_Stamp = tuple[tuple[int, int, int] | None, ...]


class _Files(NamedTuple):
    cert: str
    key: str
    ca: str


class ServerTLS:
    """The server side of TLS (raises :class:`ValueError` saying which file is wrong if the files do not load)."""

    def __init__(self, cert_file: str, key_file: str = "", *, ca_file: str = "", client_auth: str = "none") -> None:
        if client_auth not in CLIENT_AUTH:
            raise ValueError(f"tls_client_auth: expected one of {sorted(CLIENT_AUTH)}, got {client_auth!r}")
        if client_auth != "none" and not ca_file:
            raise ValueError(f"tls_client_auth={client_auth} needs tls_ca_file: the CA that signs client certificates")
        self._files = _Files(cert_file, key_file or cert_file, ca_file)
        self._verify = CLIENT_AUTH[client_auth]
        self._stamp = self._stamps()
        self._failed: _Stamp | None = None  # files that did not load: tried again once they change again
        self._current = self._server_context()
        self.client_context = self._client_context()
        self.reloads = 0
        self.reload_failures = 0

    @classmethod
    def of(cls, config: ServerConfig) -> ServerTLS | None:
        """The server's TLS, or None when ``tls_cert_file`` is not set (plaintext, the default)."""
        if not config.tls_cert_file:
            if config.tls_key_file or config.tls_client_auth != "none":
                raise ValueError("tls_key_file and tls_client_auth need tls_cert_file")
            return None
        if config.tls_reload_s <= 0:
            raise ValueError("tls_reload_s must be > 0")
        return cls(
            config.tls_cert_file, config.tls_key_file, ca_file=config.tls_ca_file, client_auth=config.tls_client_auth
        )

    def listening_context(self) -> ssl.SSLContext:
        """A context for one listener to start with: every handshake on it uses the newest files' context."""
        context = self._server_context()
        context.sni_callback = self._select
        return context

    def _select(self, connection: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext) -> None:
        # The verify mode stays the listening context's (OpenSSL copies it into each connection at its start);
        # every context here has the same one.
        connection.context = self._current

    def _server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._load_identity(context)
        if self._files.ca:
            self._load_ca(context)
        context.verify_mode = self._verify
        return context

    def _client_context(self) -> ssl.SSLContext:
        """For this server's calls to the other servers: their certificates checked (names included) against the
        CA bundle (else the system's CAs), this server's own certificate presented if they ask for one."""
        if self._files.ca:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # the bundle alone, not the system's CAs as well
            self._load_ca(context)
        else:
            context = ssl.create_default_context()
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._load_identity(context)
        return context

    def _load_identity(self, context: ssl.SSLContext) -> None:
        try:
            context.load_cert_chain(self._files.cert, self._files.key)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(
                f"TLS certificate {self._files.cert} with key {self._files.key} does not load: {_reason(exc)}"
            ) from None

    def _load_ca(self, context: ssl.SSLContext) -> None:
        try:
            context.load_verify_locations(cafile=self._files.ca)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"TLS CA bundle {self._files.ca} does not load: {_reason(exc)}") from None

    def _stamps(self) -> _Stamp:
        stamps = []
        for path in self._files:
            try:
                stat = os.stat(path) if path else None
            except OSError:
                stat = None
            stamps.append(None if stat is None else (stat.st_mtime_ns, stat.st_size, stat.st_ino))
        return tuple(stamps)

    def reload_if_changed(self) -> bool:
        """Load the files again if they changed since they last loaded; True if new handshakes now use them."""
        stamp = self._stamps()
        if stamp in (self._stamp, self._failed):
            return False
        try:
            context = self._server_context()
            self._load_identity(self.client_context)  # the same files, just loaded: the calls to peers present it
        except ValueError as exc:
            self._failed = stamp
            self.reload_failures += 1
            log.warning("TLS files changed but do not load (the previous certificate goes on serving): %s", exc)
            return False
        self._current, self._stamp, self._failed = context, stamp, None
        self.reloads += 1
        log.info("TLS certificate reloaded from %s", self._files.cert)
        return True

    async def watch(self, every_s: float) -> None:
        """Reload whenever the files change, looking every ``every_s`` seconds (until cancelled)."""
        while True:
            await asyncio.sleep(every_s)
            try:
                self.reload_if_changed()
            except Exception:
                log.exception("TLS reload")


def certificate_name(transport: asyncio.BaseTransport) -> str | None:
    """The common name of the client certificate the connection's handshake verified, or None (no TLS, no
    certificate, or one without a common name)."""
    peer = transport.get_extra_info("peercert")
    if not peer:
        return None
    for rdn in peer.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and value:
                return str(value)
    return None


def certified_credentials(tenant: str) -> str:
    """The credentials a forward passes on for a request the certificate of ``tenant``'s client authenticated."""
    return _CERTIFIED + tenant


def request_credentials(headers: Mapping[str, str]) -> str | None:
    """What forwards of a request (``headers``: lower-case names) pass on to authenticate it: its own
    ``Authorization``, else the tenant its client certificate names (:func:`certified_credentials`)."""
    given = headers.get("authorization")
    if given is not None:
        acting = headers.get(CERTIFIED_TENANT_HEADER)
        if acting is not None and headers.get(TENANT_HEADER) == acting:
            # The admin's token naming a tenant (a connector task the servers run) was authenticated as that tenant
            # (the authentication names the tenant it found in the tenant header): its forwards go as that tenant.
            return certified_credentials(acting)
        return given
    certified = headers.get(CERTIFICATE_HEADER)
    return None if certified is None else certified_credentials(certified)


def certified_tenant(credentials: str | None) -> str | None:
    """The tenant of :func:`certified_credentials`; None for any other credentials."""
    if credentials is not None and credentials.startswith(_CERTIFIED):
        return credentials[len(_CERTIFIED) :] or None
    return None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    return str(exc)
