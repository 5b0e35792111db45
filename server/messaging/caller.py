"""Who a message request is served for, whatever edge it came by: the protocol-neutral identity the services
take instead of a protocol's request headers."""

from __future__ import annotations

from typing import NamedTuple

from server.usage.meter import DEFAULT_TENANT

__all__ = ["SERVERS", "Caller", "for_tenant"]


class Caller(NamedTuple):
    """A tuple: the REST edge makes one per request, the Kafka listener one per connection.

    ``tenant``: the tenant the request acts for: its quotas, its metering, the producer ids it owns (None:
    the servers' own requests, or the admin naming no tenant). ``client``: the producer's ``host:port``, for
    the message trace. The rest matter only if the partition is another server's: ``credentials``, what the
    call to it authenticates with (None: the servers' own token); ``hops``, how many servers passed it on
    already; ``route``, ``"direct"`` for a client that routes itself (it is told the owner, 421, instead)."""

    tenant: str | None = None
    client: str | None = None
    credentials: str | None = None
    hops: str | None = None
    route: str | None = None

    @property
    def billed(self) -> str:
        """The tenant its usage is metered for (the default tenant's when none is named)."""
        return self.tenant or DEFAULT_TENANT


SERVERS = Caller()  # the servers' own requests (internal topics, coordinators), as the admin, for nobody


def for_tenant(tenant: str | None) -> Caller:
    """A server's request on a tenant's behalf (a push subscription's reads): billed to it, under its quota."""
    return SERVERS if tenant is None else Caller(tenant)
