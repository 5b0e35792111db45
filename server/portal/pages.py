"""The portal's pages. Sign in with a token; a tenant sees its usage charts, quotas and requests and asks
for more; the admin decides what the model left pending; both read the audit log.

Forms post ``application/x-www-form-urlencoded`` with the session's CSRF nonce (sign-in, before there is a
session, with a nonce the sign-in page set in a cookie of its own), and a form whose ``Origin`` is another
site's is refused; the cookies are HttpOnly and SameSite=Strict. Signing out ends the session on every
server (``session``). The token typed in at sign-in is never stored or echoed: the cookie names its id.
Every response carries the headers of ``headers``.
"""

from __future__ import annotations

import hmac
import secrets
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

import jinja2
from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from metering.quota_model import RESOURCES, format_amount
from server.broker import Broker
from server.errors import ApiError
from server.portal.charts import caption, line_chart
from server.portal.headers import PAGE_POLICY
from server.portal.labels import choice, label
from server.portal.session import COOKIE, LIFETIME_MS, Session, SessionSigner
from server.security import audit
from server.security.access import Principal
from server.security.requests import decide_request, submit, usage_series
from server.web import read_body

__all__ = ["error_page", "router"]

router = APIRouter(prefix="/portal", include_in_schema=False)
_templates = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
_templates.filters["amount"] = lambda value, resource: "unlimited" if value is None else format_amount(resource, value)
_templates.filters["clock"] = lambda ms: time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(int(ms) / 1000))
# The pages name a quota field in words; the forms still post the field's name.
_templates.filters["label"] = label
_templates.filters["choice"] = choice
_RANGES = {"1h": 3600_000, "6h": 6 * 3600_000, "24h": 24 * 3600_000, "14d": 14 * 24 * 3600_000}
_MAX_FORM = 64 * 1024
_LOGIN_COOKIE = "talos_portal_login"  # the sign-in form's nonce, until there is a session to hold one


def _broker(request: Request) -> Broker:
    broker: Broker = request.app.state.broker
    return broker


def _signer(request: Request) -> SessionSigner:
    signer = getattr(request.app.state, "portal_signer", None)
    if signer is None:
        config = _broker(request).config
        signer = request.app.state.portal_signer = SessionSigner(config.portal_secret, config.admin_token)
    assert isinstance(signer, SessionSigner)
    return signer


def _render(name: str, http_status: int = 200, **context: Any) -> HTMLResponse:
    """A page whose inline style and script (ours, in the templates) run by this response's nonce."""
    nonce = secrets.token_urlsafe(16)
    page = _templates.get_template(name).render(csp_nonce=nonce, **context)
    response = HTMLResponse(page, status_code=http_status)
    response.headers["content-security-policy"] = PAGE_POLICY.format(nonce=nonce)
    return response


def _sentence(text: str) -> str:
    # The API's messages are clauses ("the admin view needs the admin token"); a page shows a sentence.
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".!?" else text + "."


def error_page(error: ApiError) -> HTMLResponse:
    """An API error met on a portal page, as a page."""
    message = _sentence(error.message)
    return _render("error.html", error.status, session=None, status=error.status, code=error.code, message=message)


def _check_origin(request: Request) -> None:
    """A browser names the page a form was posted from (``Origin``): it must be this server."""
    origin = request.headers.get("origin")
    if origin is None:
        return
    ours = {f"{request.url.scheme}://{request.headers.get('host', '')}", _broker(request).config.url}
    if origin.rstrip("/") not in ours:
        raise ApiError(403, "CSRF", "the form came from another site; open the portal on this server and try again")


async def _form(request: Request) -> dict[str, str]:
    _check_origin(request)
    raw = await read_body(request.receive, _MAX_FORM, request.headers.get("content-length"))
    return {k: v[0] for k, v in parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True).items()}


def _session(request: Request) -> Session | None:
    """The signed-in session, if its token is still valid."""
    session = _signer(request).read(request.cookies.get(COOKIE))
    if session is None:
        return None
    state = _broker(request).security.state
    if session.tenant is not None and session.token_id not in state.tokens:
        return None  # revoked since
    if session.ended(state.signed_out):
        return None  # signed out since (this session, or another of the same token)
    return session


def _principal(session: Session) -> Principal:
    return Principal(session.tenant, None if session.admin else session.token_id)


def _to_login(reason: str = "") -> RedirectResponse:
    return RedirectResponse(f"/portal/login{'?m=' + quote(reason) if reason else ''}", status_code=303)


def _check_csrf(session: Session, form: dict[str, str]) -> None:
    if form.get("csrf") != session.csrf:
        raise ApiError(403, "CSRF", "the form is stale or came from another site; reload the page")


# ---------------------------------------------------------------- sign in and out


def _login_page(request: Request, message: str, http_status: int = 200) -> Response:
    """The sign-in form, with a fresh nonce in the form and in a cookie of its own (double submit)."""
    broker = _broker(request)
    open_admin = not broker.security.enabled and not broker.config.admin_token
    nonce = secrets.token_urlsafe(16)
    response = _render(
        "login.html", http_status, session=None, message=message, open_admin=open_admin, login_nonce=nonce
    )
    secure = request.url.scheme == "https"
    response.set_cookie(_LOGIN_COOKIE, nonce, httponly=True, samesite="strict", path="/portal", secure=secure)
    return response


@router.get("/login", response_class=HTMLResponse)
async def login_page(request: Request, m: str = "") -> Response:
    return _login_page(request, m)


@router.post("/login")
async def login(request: Request) -> Response:
    broker = _broker(request)
    form = await _form(request)
    expected = request.cookies.get(_LOGIN_COOKIE, "")
    if not expected or not hmac.compare_digest(form.get("csrf", "").encode(), expected.encode()):
        raise ApiError(403, "CSRF", "the sign-in form is stale or came from another site; reload the page")
    token = form.get("token", "").strip()
    if not token and not broker.security.enabled and not broker.config.admin_token:
        principal: Principal | None = Principal(None)  # auth is off: anyone is the admin
    else:
        principal = await broker.security.principal_of(token) if token else None
    if principal is None:
        return _login_page(request, "That token is not valid.", 401)
    cookie, _ = _signer(request).issue(principal.token_id or "admin", principal.tenant)
    response = RedirectResponse("/portal/admin" if principal.admin else "/portal", status_code=303)
    secure = request.url.scheme == "https"
    response.set_cookie(COOKIE, cookie, httponly=True, samesite="strict", path="/portal", secure=secure)
    response.delete_cookie(_LOGIN_COOKIE, path="/portal")
    await audit.record(broker, principal, "portal.sign_in", principal.name, tenant=principal.tenant)
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    """End the session on every server, not just in this browser: a copy of the cookie stops working."""
    session = _session(request)
    form = await _form(request)
    if session is not None:
        _check_csrf(session, form)
        broker = _broker(request)
        who = _principal(session)
        broker.security.limit_changes(who, "portal_sign_outs")
        now_ms = int(time.time() * 1000)
        await broker.security.change(lambda s: s.sign_out(session.token_id, now_ms, LIFETIME_MS))
        await audit.record(broker, who, "portal.sign_out", who.name, tenant=who.tenant)
    response = _to_login("Signed out.")
    response.delete_cookie(COOKIE, path="/portal")
    return response


# ---------------------------------------------------------------- tenant pages


async def _charts(broker: Broker, tenant: str, range_name: str) -> list[dict[str, str]]:
    span = _RANGES.get(range_name, _RANGES["24h"])
    rows, step, window = await usage_series(broker, tenant=tenant, topic=None, span_ms=span)
    seconds = step / 1000
    by_topic: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for row in rows:
        topic = str(row["topic"])
        at = int(str(row["time_ms"]))
        lines = by_topic.setdefault(topic, {"in": [], "out": []})
        lines["in"].append((at, int(str(row["bytes_in"])) / seconds))
        lines["out"].append((at, int(str(row["bytes_out"])) / seconds))
    owned = sorted({t.name for t in broker.list_topics() if t.tenant == tenant} | set(by_topic))
    charts = []
    for topic in owned:
        lines = by_topic.get(topic, {"in": [], "out": []})
        charts.append(
            {
                "topic": topic,
                "svg": line_chart(
                    lines, start_ms=window.start_ms, end_ms=window.end_ms, title=f"{topic}: bytes/s in and out"
                ),
                "caption": caption(lines, window.start_ms, window.end_ms),
            }
        )
    return charts


@router.get("", response_class=HTMLResponse)
async def dashboard(request: Request, period: str = "24h") -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    if session.admin:
        return RedirectResponse("/portal/admin", status_code=303)
    broker = _broker(request)
    tenant = session.tenant
    assert tenant is not None
    state = broker.security.state
    if tenant not in state.tenants:
        return _to_login("The tenant no longer exists.")
    topics = sorted((t for t in broker.list_topics() if t.tenant == tenant), key=lambda t: t.name)
    return _render(
        "dashboard.html",
        session=session,
        tenant=tenant,
        quota=state.tenants[tenant].quota,
        topics=topics,
        topic_quotas={t.name: state.topic_quota(t.name) for t in topics},
        partitions_used=sum(t.partitions for t in topics),
        charts=await _charts(broker, tenant, period),
        ranges=list(_RANGES),
        period=period if period in _RANGES else "24h",
        resources=RESOURCES,
        requests=[r for r in reversed(state.requests) if r.tenant == tenant][:50],
        usage_source="the metering store" if broker.config.metering_store else "this server's recent history",
    )


@router.post("/requests")
async def new_request(request: Request) -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    form = await _form(request)
    _check_csrf(session, form)
    broker = _broker(request)
    tenant = session.tenant if session.tenant is not None else form.get("tenant", "")
    try:
        requested = float(form.get("requested", "").replace(",", ""))
    except ValueError:
        raise ApiError(400, "INVALID_REQUEST", "requested must be a number") from None
    scale = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}.get(form.get("unit", "B"), 1)
    made = await submit(
        broker,
        _principal(session),
        tenant=tenant,
        topic=form.get("topic") or None,
        resource=form.get("resource", ""),
        requested=requested * (scale if form.get("resource", "").endswith("bytes_per_s") else 1),
        justification=form.get("justification", ""),
    )
    return RedirectResponse(f"/portal/requests/{made.id}", status_code=303)


@router.get("/requests/{request_id}", response_class=HTMLResponse)
async def request_page(request: Request, request_id: int) -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    found = _broker(request).security.state.request(request_id)
    if not session.admin and found.tenant != session.tenant:
        raise ApiError(404, "UNKNOWN_REQUEST", f"unknown quota request {request_id}")
    return _render("request.html", session=session, r=found)


# ---------------------------------------------------------------- the admin


@router.get("/admin", response_class=HTMLResponse)
async def admin_page(request: Request) -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    if not session.admin:
        raise ApiError(403, "FORBIDDEN", "the admin view needs the admin token")
    state = _broker(request).security.state
    requests = list(reversed(state.requests))
    return _render(
        "admin.html",
        session=session,
        pending=[r for r in requests if r.status == "pending"],
        decided=[r for r in requests if r.status != "pending"][:100],
        tenants=[state.tenants[name] for name in sorted(state.tenants)],
    )


@router.post("/admin/requests/{request_id}")
async def admin_decide(request: Request, request_id: int) -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    if not session.admin:
        raise ApiError(403, "FORBIDDEN", "the admin view needs the admin token")
    form = await _form(request)
    _check_csrf(session, form)
    approve = form.get("decision") == "approve"
    await decide_request(_broker(request), _principal(session), request_id, approve, form.get("reason", ""))
    return RedirectResponse("/portal/admin", status_code=303)


@router.get("/audit", response_class=HTMLResponse)
async def audit_page(request: Request) -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    entries = await audit.recent(_broker(request), limit=500, tenant=session.tenant)
    return _render("audit.html", session=session, entries=entries)
