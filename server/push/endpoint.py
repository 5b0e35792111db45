"""``GET /v1/subscribe``: a subscriber's WebSocket, authenticated, its subscription made if it asks for one
(``topic=``), then served by a :class:`~server.push.session.Session`."""

from __future__ import annotations

import orjson
from fastapi import APIRouter, WebSocket
from pydantic import ValidationError

from server.broker import Broker
from server.errors import ApiError
from server.messaging.caller import Caller
from server.push.session import Session, error_frame
from server.security.access import Principal
from server.subscriptions.coordinator import SubscriptionCoordinator, new_holder
from server.subscriptions.link import CoordinatorLink, authorize
from server.subscriptions.making import MAX_WINDOW, SubscriptionCreate, create_at_coordinator
from server.subscriptions.records import validate_subscription_name
from server.tls import request_credentials
from server.web import caller_of, int_param

__all__ = ["router"]

router = APIRouter(tags=["subscriptions"])


@router.websocket("/v1/subscribe")
async def subscribe(ws: WebSocket) -> None:
    """``GET /v1/subscribe?subscription=S[&window=N][&token=T]`` as a WebSocket; with ``topic=`` (and the
    settings of ``POST /v1/subscriptions`` as parameters) the subscription is made if it does not exist."""
    broker: Broker = ws.app.state.broker
    coordinator: SubscriptionCoordinator = ws.app.state.subscriptions
    params = ws.query_params
    headers = {k.lower(): v for k, v in ws.headers.items()}
    token = params.get("token")
    if token and "authorization" not in headers:  # browsers cannot set headers on a WebSocket
        headers["authorization"] = f"Bearer {token}"
    await ws.accept()
    try:
        who = await broker.security.authenticate(headers)
        name = validate_subscription_name(params.get("subscription") or "")
        window = int_param(params, "window", 100, low=1, high=MAX_WINDOW)
        link = CoordinatorLink(broker, coordinator, name, who, request_credentials(headers), headers.get("traceparent"))
        if params.get("topic"):
            await _made(broker, coordinator, who, name, dict(params), caller_of(headers))
        authorize(broker, coordinator, who, name)  # the right to consume its topic: checked by every pull
    except ApiError as exc:
        await ws.send_text(error_frame(exc).decode())
        await ws.close(code=4000 + exc.status if 400 <= exc.status < 600 else 1011)
        return
    holder = new_holder()
    owner = coordinator.owner(name)
    # Who coordinates it: a client that can reach that server may connect there instead and save a hop.
    hello = {"type": "hello", "subscriber": holder, "coordinator": owner.server_id, "coordinator_url": owner.url}
    await ws.send_text(orjson.dumps({**hello, "local": owner.local}).decode())
    await Session(ws, link, holder, window).run()


async def _made(
    broker: Broker,
    coordinator: SubscriptionCoordinator,
    who: Principal,
    name: str,
    params: dict[str, str],
    caller: Caller,
) -> None:
    """Make the subscription from the WebSocket's parameters unless it exists."""
    try:
        coordinator.config_of(name)
        return
    except ApiError as exc:
        if exc.status != 404:
            raise
    fields: dict[str, object] = {"name": name, "topic": params["topic"]}
    for key in ("ack_timeout_ms", "max_deliveries", "max_in_flight"):
        if key in params:
            fields[key] = int_param(params, key, 0)
    if "key_ordered" in params:
        fields["key_ordered"] = params["key_ordered"].lower() in ("1", "true", "yes")
    if "start" in params:
        fields["start"] = params["start"]
    try:
        body = SubscriptionCreate.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ApiError(400, "INVALID_REQUEST", f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    try:
        await create_at_coordinator(broker, coordinator, who, body, caller)
    except ApiError as exc:
        if exc.code != "SUBSCRIPTION_EXISTS":  # made by a racing subscriber: fine
            raise
