"""How a client checks the servers' certificates and proves who it is, over ``https://`` and ``wss://``.

Every client takes ``tls=``: a :class:`TLS` (file names), or an :class:`ssl.SSLContext` made by the caller. Without
it, the files named by ``TALOS_CA_FILE``, ``TALOS_CERT_FILE`` and ``TALOS_KEY_FILE`` are used (as ``TALOS_TOKEN``
is: tools built on the SDK need no option), else the system's CAs and no client certificate.

Imports: the standard library only.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["TLS", "TLSOption", "client_context"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TLS:
    """``ca_file``: the CA bundle (PEM) that signs the servers' certificates (default: the system's CAs);
    ``cert_file``: a client certificate (PEM), for servers that ask for one (mTLS); ``key_file``: its key
    (default: in ``cert_file``)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    def __post_init__(self) -> None:
        if self.key_file and not self.cert_file:
            raise ValueError("key_file needs cert_file")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TLS | None:
        """From ``TALOS_CA_FILE``, ``TALOS_CERT_FILE`` and ``TALOS_KEY_FILE``; None if none is set."""
        env = os.environ if environ is None else environ
        found = {name: env.get(f"TALOS_{name.upper()}") or None for name in ("ca_file", "cert_file", "key_file")}
        return cls(**found) if any(found.values()) else None

    def context(self) -> ssl.SSLContext:
        """An SSL context checking servers (their names included) against ``ca_file``, presenting ``cert_file``."""
        try:
            context = ssl.create_default_context(cafile=self.ca_file)
            if self.cert_file:
                context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"TLS files ({self}) do not load: {exc}") from None
        return context


TLSOption = TLS | ssl.SSLContext | None


def client_context(tls: TLSOption) -> ssl.SSLContext | None:
    """The context a client's connections use: ``tls``'s, else the environment's, else None (the defaults)."""
    if isinstance(tls, ssl.SSLContext):
        return tls
    chosen = tls if tls is not None else TLS.from_env()
    return chosen.context() if chosen is not None else None
