"""Client certificates as identities (``server.tls``): a certificate's tenant authenticates a request that sends no
token, never as the admin; a request it authenticated is passed on to another server as that tenant (the servers'
own token with the tenant named), never as the servers' own token alone, which would make it the admin there."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fencing.local import LocalFileSystem
from server.config import ServerConfig
from server.errors import ApiError
from server.peers import outgoing_headers
from server.security.access import Principal
from server.security.guard import Security
from server.security.state import SecurityState, TokenRecord
from server.security.store import SecurityStore
from server.security.tokens import new_token
from server.tls import (
    CERTIFICATE_HEADER,
    CERTIFIED_TENANT_HEADER,
    certified_credentials,
    certified_tenant,
    request_credentials,
)
from server.web import caller_of

ADMIN = "admin-secret"


def _security(tmp_path: Path, *, auth: str = "on") -> tuple[Security, str]:
    """A guard over a real security document in ``tmp_path`` (tenants acme and globex, a token of globex's)."""
    store = SecurityStore(LocalFileSystem(), str(tmp_path))
    security = Security(ServerConfig(auth=auth, admin_token=ADMIN), store, ThreadPoolExecutor(1), None)  # type: ignore[arg-type]
    token, token_id, digest = new_token()
    state = SecurityState().create_tenant("acme", 1).create_tenant("globex", 1)
    security.state = store.change(lambda _: state.add_token(TokenRecord(token_id, "globex", digest, "", 1)))
    return security, token


def _refused(security: Security, headers: dict[str, str]) -> int:
    """The status :meth:`Security.authenticate` refuses ``headers`` with (after its one re-read of the state)."""
    with pytest.raises(ApiError) as refused:
        asyncio.run(security.authenticate(headers))
    return refused.value.status


def test_a_certificate_names_its_tenant_only_without_a_token_and_never_the_admin(tmp_path: Path) -> None:
    security, globex = _security(tmp_path)
    assert security.authenticate_now({CERTIFICATE_HEADER: "acme"}) == Principal("acme")
    # A token decides over the certificate.
    both = {CERTIFICATE_HEADER: "acme", "authorization": f"Bearer {globex}"}
    decided = security.authenticate_now(both)
    assert decided is not None and decided.tenant == "globex"
    for nobody in ("nobody", ""):
        assert security.authenticate_now({CERTIFICATE_HEADER: nobody}) is None  # unknown here: asked again
        assert _refused(security, {CERTIFICATE_HEADER: nobody}) == 401  # and then nobody's
    off, _ = _security(tmp_path / "off", auth="off")
    assert off.authenticate_now({CERTIFICATE_HEADER: "acme"}) == Principal("acme")  # still names it, for metering
    anyone = off.authenticate_now({CERTIFICATE_HEADER: "nobody"})
    assert anyone is not None and anyone.admin  # auth off: anyone is the admin


def test_a_tenant_made_on_another_server_is_found_by_reading_the_state_again(tmp_path: Path) -> None:
    """As a token made on another server since this one's last look: the state is read again, once."""
    security, _ = _security(tmp_path)
    SecurityStore(LocalFileSystem(), str(tmp_path)).change(lambda state: state.create_tenant("initech", 2))
    assert "initech" not in security.state.tenants
    for headers in (
        {CERTIFICATE_HEADER: "initech"},
        {"authorization": f"Bearer {ADMIN}", CERTIFIED_TENANT_HEADER: "initech"},  # passed on by another server
    ):
        assert asyncio.run(security.authenticate(headers)) == Principal("initech")


def test_another_servers_certified_tenant_counts_only_with_the_admin_token_and_as_that_tenant(tmp_path: Path) -> None:
    security, globex = _security(tmp_path)
    forwarded = {"authorization": f"Bearer {ADMIN}", CERTIFIED_TENANT_HEADER: "acme"}
    assert security.authenticate_now(forwarded) == Principal("acme")  # not the admin
    # A tenant naming another tenant this way is itself; without any token, it is nobody.
    claimed = {"authorization": f"Bearer {globex}", CERTIFIED_TENANT_HEADER: "acme"}
    itself = security.authenticate_now(claimed)
    assert itself is not None and itself.tenant == "globex"
    with pytest.raises(ApiError) as refused:
        security.authenticate_now({CERTIFIED_TENANT_HEADER: "acme"})
    assert refused.value.status == 401
    # A tenant that does not exist (or no longer does).
    assert _refused(security, {"authorization": f"Bearer {ADMIN}", CERTIFIED_TENANT_HEADER: "initech"}) == 401
    # "Certified <tenant>" sent by a client as its Authorization authenticates nobody.
    with pytest.raises(ApiError) as forged:
        security.authenticate_now({"authorization": certified_credentials("acme")})
    assert forged.value.status == 401


def test_forwards_pass_a_certificates_tenant_on_never_the_servers_token_alone() -> None:
    own = f"Bearer {ADMIN}"
    # An edge request a certificate authenticated: through caller_of (the services' forwards) or as it came
    # (a FastAPI route's relay); both reach the owner as the tenant.
    edge = {CERTIFICATE_HEADER: "acme", "x-talos-tenant": "acme", "content-type": "application/json"}
    caller = caller_of(edge)
    assert caller.credentials == certified_credentials("acme") and certified_tenant(caller.credentials) == "acme"
    for headers in (edge, {"authorization": caller.credentials}):
        out = outgoing_headers(headers, own)
        assert out["authorization"] == own and out[CERTIFIED_TENANT_HEADER] == "acme", out
        assert CERTIFICATE_HEADER not in out
    # A token goes as it is; the servers' own requests go as the admin.
    assert outgoing_headers({"authorization": "Bearer t"}, own) == {"authorization": "Bearer t"}
    assert outgoing_headers({}, own) == {"authorization": own}
    assert request_credentials({"authorization": "Bearer t", CERTIFICATE_HEADER: "acme"}) == "Bearer t"
    assert request_credentials({}) is None
