"""Quota requests: a tenant asks for a new limit; the decision model (``metering.quota_model``) approves it,
rejects it with the reason, or leaves it to an admin. Usage comes from the metering store when one is
configured (``metering_store``: cluster-wide, two weeks, hourly), else from this server's own recent
history (a day, per minute)."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

from metering.quota_model import RESOURCES, Demand, Policy, decide
from metering.store import Window
from server.broker import Broker
from server.errors import ApiError
from server.security import audit
from server.security.access import Principal
from server.security.state import QuotaRequest, SecurityState, check_quota_value

__all__ = ["UsageSource", "decide_request", "submit", "usage_series", "usage_source"]

_STORE_SPAN_MS = 14 * 24 * 3600 * 1000
_STORE_STEP_MS = 3600 * 1000
_HISTORY_SPAN_MS = 24 * 3600 * 1000
_HISTORY_STEP_MS = 60 * 1000
_COUNTERS = {
    "produce_bytes_per_s": ("bytes_in",),
    "fetch_bytes_per_s": ("bytes_out",),
    "requests_per_s": ("requests",),
    "partitions": ("bytes_in", "bytes_out"),  # partitions are sized from throughput
}


class UsageSource(Protocol):
    def usage_series(
        self, window: Window, *, tenant: str | None = None, topic: str | None = None, step_ms: int = ...
    ) -> list[dict[str, object]]: ...


def usage_source(broker: Broker) -> tuple[UsageSource, int, int]:
    """Where usage is read from, with the span and step that source is good for."""
    spec = broker.config.metering_store
    if not spec:
        return broker.history, _HISTORY_SPAN_MS, _HISTORY_STEP_MS
    from metering import open_store  # the metering extra; only when a store is configured

    if spec.startswith("druid:"):
        return open_store(druid_url=spec.removeprefix("druid:")), _STORE_SPAN_MS, _STORE_STEP_MS
    return open_store(duckdb_path=spec), _STORE_SPAN_MS, _STORE_STEP_MS


async def usage_series(
    broker: Broker, *, tenant: str, topic: str | None, span_ms: int | None = None
) -> tuple[list[dict[str, object]], int, Window]:
    """Usage rows of the tenant (one topic, or all), the step they are in, and the window they cover."""
    source, default_span, step = usage_source(broker)
    if span_ms is not None and span_ms <= 2 * 24 * 3600 * 1000:
        step = min(step, 5 * 60 * 1000)  # a chart of hours wants finer steps than the model's hourly peaks
    now_ms = int(time.time() * 1000)
    end = now_ms - now_ms % step + step
    window = Window(end - (span_ms or default_span), end)

    def read() -> list[dict[str, object]]:
        return source.usage_series(window, tenant=tenant, topic=topic, step_ms=step)

    rows = await asyncio.get_running_loop().run_in_executor(broker.executor, read)
    return rows, step, window


def samples(rows: list[dict[str, object]], resource: str, step_ms: int, window: Window) -> list[float]:
    """One rate per step (summed over topics) from the first step with traffic to the window's end; a step
    without rows had no traffic (0)."""
    per_step: dict[int, float] = {}
    for row in rows:
        time_ms = int(str(row["time_ms"]))
        per_step[time_ms] = per_step.get(time_ms, 0.0) + sum(float(str(row[c])) for c in _COUNTERS[resource])
    if not per_step:
        return []
    seconds = step_ms / 1000
    last = window.end_ms - step_ms
    # The step in progress is partial: leave it out, it would read as a drop.
    return [per_step.get(t, 0.0) / seconds for t in range(min(per_step), last, step_ms)]


def _partitions_of(broker: Broker, tenant: str, topic: str | None) -> int:
    if topic is not None:
        return broker.topic(topic).partitions
    return sum(t.partitions for t in broker.list_topics() if t.tenant == tenant)


async def submit(
    broker: Broker,
    actor: Principal,
    *,
    tenant: str,
    topic: str | None,
    resource: str,
    requested: float,
    justification: str,
) -> QuotaRequest:
    """Record the request with the model's decision (an approval applies the new limit at once)."""
    security = broker.security
    if resource not in RESOURCES:
        raise ApiError(400, "INVALID_REQUEST", f"resource must be one of {RESOURCES}")
    check_quota_value(resource, requested)
    if resource == "partitions":
        requested = float(int(requested))
    state = security.state
    state.tenant(tenant)
    if topic is not None:
        config = broker.topic(topic)
        if security.enabled:
            security.authorize(Principal(tenant), config, "admin")
        current = state.topic_quota(topic).get(resource)
    else:
        current = state.tenant(tenant).quota.get(resource)
    security.limit_changes(actor, "quota_requests")  # what follows reads usage and writes the document
    rows, step, window = await usage_series(broker, tenant=tenant, topic=topic)
    demand = Demand(
        resource=resource,
        requested=requested,
        current=current,
        usage=samples(rows, resource, step, window),
        partitions_now=_partitions_of(broker, tenant, topic),
    )
    decision = decide(demand, Policy())
    now_ms = int(time.time() * 1000)
    request = QuotaRequest(
        id=0,
        tenant=tenant,
        topic=topic,
        resource=resource,
        current=current,
        requested=requested,
        justification=justification[:2000],
        status=decision.outcome,
        reason=" ".join((decision.reason, *decision.problems)),  # the tenant sees every problem found
        decided_by="" if decision.outcome == "pending" else "model",
        created_ms=now_ms,
        decided_ms=None if decision.outcome == "pending" else now_ms,
        threshold=decision.threshold,
    )

    def apply(current_state: SecurityState) -> SecurityState:
        changed = current_state.add_request(request)
        if decision.outcome == "approved":
            changed = changed.set_quota(tenant, topic, {resource: requested})
        return changed

    stored = (await security.change(apply)).requests[-1]
    target = f"{topic or tenant} {resource} {requested:g}"
    await audit.record(broker, actor, "quota_request.submit", target, tenant=tenant, detail=f"#{stored.id}")
    if stored.status != "pending":
        await audit.record(
            broker,
            actor,
            f"quota_request.{stored.status}",
            target,
            tenant=tenant,
            detail=f"#{stored.id} by the model",
            record_of=stored.to_json(),  # the document keeps only the newest decided requests
        )
    return stored


async def decide_request(broker: Broker, actor: Principal, request_id: int, approve: bool, reason: str) -> QuotaRequest:
    """An admin settles a pending request."""
    status = "approved" if approve else "rejected"
    text = reason.strip()[:2000] or ("approved by an admin" if approve else "rejected by an admin")
    now_ms = int(time.time() * 1000)
    state = await broker.security.change(lambda s: s.decide(request_id, status, text, "admin", now_ms))
    decided = state.request(request_id)
    target = f"{decided.topic or decided.tenant} {decided.resource} {decided.requested:g}"
    await audit.record(
        broker,
        actor,
        f"quota_request.{status}",
        target,
        tenant=decided.tenant,
        detail=f"#{request_id}: {text}",
        record_of=decided.to_json(),  # the document keeps only the newest decided requests
    )
    return decided
