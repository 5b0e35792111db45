"""The operations console's consumer group and push subscription pages (issue 41), on the portal's router.

``/portal/groups`` lists the groups the signed-in principal may use (the REST list's rule: a tenant's own and
those granted to it; the admin: all); ``/portal/groups/{name}`` shows one (members and what each holds,
committed offset and lag per partition, a lag chart) and resets its offsets: a dry run (``GET …/reset``) shows
every partition's current → new offset and changes nothing, then the apply button posts the same reset
(``POST …/reset``, the session's CSRF nonce) to the group coordinator's ``reset``, the call behind
``POST /v1/groups/{g}/offsets/reset``. ``/portal/subscriptions`` and ``/portal/subscriptions/{name}`` show push
subscriptions: topic, messages in flight, dead letters, redeliveries, dead-letter topic.

Who may see what is decided as the REST API decides it, by the same calls: ``may_use_group`` for a group (a
group another tenant uses answers 404, as one that does not exist), the subscription's tenant for a
subscription. A group or subscription coordinated by another server is asked there, as REST relays it: one
forwarded call to the coordinator's REST route, as the signed-in principal (a tenant goes as the servers' own
token naming the tenant, which the coordinator takes as that tenant and never as the admin: the identity a
client certificate's forward has; the admin as the servers' own token), so the coordinator checks the rules
itself. The session holds no token to pass on: the portal never keeps the token typed in at sign-in.

No history of lag is kept anywhere (no metric, no metering column), so the chart is drawn from a small ring of
samples per group in this server's memory, taken whenever one of these pages computes the group's lag; it
starts empty after a restart and differs from server to server. No storage format is added for it.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, cast
from urllib.parse import quote, urlencode

import orjson
from fastapi import Request
from starlette.responses import RedirectResponse, Response

from server import internal_topics
from server.broker import Broker
from server.cluster import Owner
from server.errors import ApiError
from server.groups.coordinator import GroupCoordinator, validate_group_name
from server.messaging.authorization import Claim, may_use_group
from server.messaging.caller import SERVERS
from server.messaging.forwarder import JSON, answer_of
from server.messaging.offsets import offsets as partition_offsets
from server.portal.charts import caption, line_chart
from server.portal.pages import (
    _broker,
    _check_csrf,
    _form,
    _principal,
    _render,
    _sentence,
    _session,
    _to_login,
    router,
)
from server.security.access import Principal
from server.subscriptions.coordinator import SubscriptionCoordinator
from server.subscriptions.link import active_for
from server.subscriptions.records import STATE_PREFIX, dead_letter_topic, validate_subscription_name
from server.tls import certified_credentials

__all__ = [
    "GroupSummary",
    "LagHistory",
    "Move",
    "ResetSpec",
    "group_page",
    "lag_chart",
    "groups_page",
    "parse_time",
    "plan_moves",
    "reset_apply",
    "reset_preview",
    "subscription_page",
    "subscriptions_page",
    "target_offset",
    "topic_lags",
]

Target = Literal["earliest", "latest", "timestamp", "offset"]
_TARGETS: dict[str, str] = {
    "earliest": "the earliest offset",
    "latest": "the latest offset (skip everything)",
    "timestamp": "a time",
    "offset": "an offset",
}
_CHART_SPAN_MS = 3600_000
_LIST_CONCURRENCY = 8  # subscriptions described at once for the list


# ---------------------------------------------------------------- pure helpers


def parse_time(text: str) -> int:
    """Milliseconds since the epoch from what a person types: the milliseconds themselves, or an ISO 8601 date
    and time (UTC unless it names an offset: a console is read across time zones, the server's is no one's)."""
    raw = text.strip()
    if raw.isdigit():
        return int(raw)
    try:
        when = datetime.fromisoformat(raw.replace("z", "Z"))
    except ValueError:
        raise ApiError(
            400,
            "INVALID_REQUEST",
            f"{raw[:60]!r} is not a time: give milliseconds since the epoch or an ISO date and time, "
            "such as 2024-05-01T12:00:00Z",
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    ms = int(when.timestamp() * 1000)
    if ms < 0:
        raise ApiError(400, "INVALID_REQUEST", "the time is before 1970")
    return ms


@dataclass(frozen=True, slots=True)
class ResetSpec:
    """What the reset form asks: the same fields as the REST reset's body (``ResetRequest``)."""

    topic: str
    partition: int | None  # None: every partition of the topic
    to: Target
    offset: int | None = None
    timestamp: int | None = None
    value: str = ""  # as typed, for the form shown again

    @classmethod
    def from_form(cls, form: Mapping[str, str]) -> ResetSpec:
        """The spec of a submitted form; 400 with a sentence a person can act on if it is not one."""
        topic = form.get("topic", "").strip()
        if not topic:
            raise ApiError(400, "INVALID_REQUEST", "choose the topic whose offsets to reset")
        raw_partition = form.get("partition", "all").strip()
        if raw_partition in ("", "all"):
            partition = None
        elif raw_partition.isdigit():
            partition = int(raw_partition)
        else:
            raise ApiError(400, "INVALID_REQUEST", "the partition must be a number, or all")
        to = form.get("to", "")
        value = form.get("value", "").strip()
        if to in ("earliest", "latest"):
            return cls(topic, partition, cast(Target, to), value=value)
        if to == "timestamp":
            if not value:
                raise ApiError(400, "INVALID_REQUEST", "give the time to reset to")
            return cls(topic, partition, "timestamp", timestamp=parse_time(value), value=value)
        if to == "offset":
            if not value.isdigit():
                raise ApiError(400, "INVALID_REQUEST", "give the offset to reset to, a whole number")
            return cls(topic, partition, "offset", offset=int(value), value=value)
        raise ApiError(400, "INVALID_REQUEST", "choose where to reset to: earliest, latest, a time or an offset")

    def to_json(self) -> dict[str, object]:
        """The body of ``POST /v1/groups/{g}/offsets/reset``."""
        body: dict[str, object] = {"topic": self.topic, "to": self.to}
        if self.partition is not None:
            body["partition"] = self.partition
        if self.offset is not None:
            body["offset"] = self.offset
        if self.timestamp is not None:
            body["timestamp"] = self.timestamp
        return body

    def form(self) -> dict[str, str]:
        """The fields to post again (the apply button's hidden inputs)."""
        return {
            "topic": self.topic,
            "partition": "all" if self.partition is None else str(self.partition),
            "to": self.to,
            "value": self.value,
        }

    def words(self) -> str:
        """``"orders, all partitions, to the earliest offset"``: the dry run's heading."""
        where = "all partitions" if self.partition is None else f"partition {self.partition}"
        if self.to == "timestamp" and self.timestamp is not None:
            target = f"the first offset at or after {_utc(self.timestamp)}"
        elif self.to == "offset":
            target = f"offset {self.offset} (kept within each partition's range)"
        else:
            target = _TARGETS[self.to]
        return f"{self.topic}, {where}, to {target}"


def target_offset(
    to: Target, earliest: int, latest: int, *, offset: int | None = None, by_time: int | None = None
) -> int:
    """Where a reset moves one partition, as the coordinator's ``reset`` computes it: an explicit offset is kept
    within ``[earliest, latest]``; a time's offset is the partition's answer for it (its latest if none is later)."""
    if to == "earliest":
        return earliest
    if to == "latest":
        return latest
    if to == "timestamp":
        return latest if by_time is None else by_time
    return min(max(offset or 0, earliest), latest)


@dataclass(frozen=True, slots=True)
class Move:
    """One partition of a dry run: its committed offset now (None: none committed) and after the reset."""

    topic: str
    partition: int
    current: int | None
    new: int
    latest: int

    @property
    def change(self) -> str:
        """``"+5"``, ``"-12"``, ``"no change"``, ``"new"`` (nothing committed yet)."""
        if self.current is None:
            return "new"
        delta = self.new - self.current
        return "no change" if delta == 0 else f"{delta:+,}"

    @property
    def lag_after(self) -> int:
        return max(self.latest - self.new, 0)


def plan_moves(
    spec: ResetSpec,
    committed: Mapping[int, int],
    bounds: Mapping[int, tuple[int, int]],
    by_time: Mapping[int, int] | None = None,
) -> list[Move]:
    """The dry run: for every partition in ``bounds`` (earliest, latest), its committed offset → its target."""
    moves = []
    for partition in sorted(bounds):
        earliest, latest = bounds[partition]
        found = (by_time or {}).get(partition)
        new = target_offset(spec.to, earliest, latest, offset=spec.offset, by_time=found)
        moves.append(Move(spec.topic, partition, committed.get(partition), new, latest))
    return moves


def topic_lags(rows: Iterable[Mapping[str, object]]) -> dict[str, int]:
    """Total lag per topic of a group's describe rows (partitions with no committed offset or no known high
    watermark have no lag, as in the REST answer, and count for nothing)."""
    out: dict[str, int] = {}
    for row in rows:
        lag = row.get("lag")
        if isinstance(lag, int):
            topic = str(row["topic"])
            out[topic] = out.get(topic, 0) + lag
    return out


class LagHistory:
    """Per group, its lag per topic at the times a page computed it: the chart's points. In memory only (no lag
    history is stored anywhere), bounded: ``keep`` samples per group, ``groups`` groups (the least recently
    sampled forgotten first). A sample within ``min_gap_ms`` of the last replaces it (a reload is not a trend)."""

    def __init__(self, keep: int = 240, groups: int = 1000, min_gap_ms: int = 1000) -> None:
        self._keep = keep
        self._groups = groups
        self._min_gap_ms = min_gap_ms
        self._samples: OrderedDict[str, deque[tuple[int, dict[str, int]]]] = OrderedDict()

    def record(self, group: str, at_ms: int, lags: Mapping[str, int]) -> None:
        ring = self._samples.pop(group, None)
        if ring is None:
            ring = deque(maxlen=self._keep)
        if ring and at_ms - ring[-1][0] < self._min_gap_ms:
            ring.pop()
        ring.append((at_ms, dict(lags)))
        self._samples[group] = ring
        while len(self._samples) > self._groups:
            self._samples.popitem(last=False)

    def series(self, group: str) -> dict[str, list[tuple[int, float]]]:
        """One line per topic: (time ms, lag) points."""
        lines: dict[str, list[tuple[int, float]]] = {}
        for at, lags in self._samples.get(group, ()):
            for topic, lag in lags.items():
                lines.setdefault(topic, []).append((at, float(lag)))
        return lines


def lag_chart(series: Mapping[str, Sequence[tuple[int, float]]], *, start_ms: int, end_ms: int, title: str) -> str:
    """:func:`line_chart` of lag in messages, in thousands or millions once the peak is that large: the axis's
    labels have the room of about "2.5 k msg", and a lag of millions is read in millions."""
    peak = max((v for points in series.values() for _, v in points), default=0.0)
    scale, unit = next(((s, u) for s, u in ((1e6, "M msg"), (1e3, "k msg")) if peak >= s), (1.0, "msg"))
    scaled = {topic: [(ms, v / scale) for ms, v in points] for topic, points in series.items()}
    return line_chart(scaled, start_ms=start_ms, end_ms=end_ms, unit=unit, title=title)


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def _count(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else "—"


# ---------------------------------------------------------------- reaching a coordinator as the caller


def _history(request: Request) -> LagHistory:
    history = getattr(request.app.state, "portal_lag_history", None)
    if history is None:
        history = request.app.state.portal_lag_history = LagHistory()
    assert isinstance(history, LagHistory)
    return history


def _groups(request: Request) -> GroupCoordinator:
    coordinator: GroupCoordinator = request.app.state.coordinator
    return coordinator


def _subscriptions(request: Request) -> SubscriptionCoordinator:
    coordinator: SubscriptionCoordinator = request.app.state.subscriptions
    return coordinator


async def _at_owner(
    broker: Broker, owner: Owner, who: Principal, method: str, path: str, body: dict[str, object] | None = None
) -> dict[str, Any]:
    """A REST call at the coordinator that owns the group or subscription, as ``who``: a tenant as the servers'
    own token naming the tenant (the coordinator takes it as that tenant, never as the admin, and applies the
    tenant rules itself), the admin as the servers' own token. The answer's error as an :class:`ApiError`."""
    headers: dict[str, str] = {}
    if who.tenant is not None:
        headers["authorization"] = certified_credentials(who.tenant)
    if body is not None:
        headers["content-type"] = JSON
    reply = await broker.forwarder.send(
        owner, method, path, query={}, headers=headers, body=None if body is None else orjson.dumps(body)
    )
    return answer_of(reply)


async def _may_use(broker: Broker, who: Principal, group: str, claim: Claim) -> None:
    if broker.security.enabled:
        await may_use_group(broker.security, who, group, claim)


async def _describe_group(request: Request, who: Principal, name: str) -> dict[str, Any]:
    """``GET /v1/groups/{name}``'s answer: here if this server coordinates the group, else its coordinator's."""
    validate_group_name(name)
    broker, coordinator = _broker(request), _groups(request)
    owner = coordinator.owner(name)
    if owner.local:
        await _may_use(broker, who, name, "never")
        return await coordinator.describe(name)
    return await _at_owner(broker, owner, who, "GET", f"/v1/groups/{quote(name, safe='')}")


def _readable_refusal(exc: ApiError, group: str) -> ApiError:
    """The coordinator's 409 for a group with members, as what to do about it (Kafka's rule: an empty group)."""
    if exc.code == "GROUP_ACTIVE":
        return ApiError(
            409,
            "GROUP_ACTIVE",
            f"group {group!r} has live members, so its offsets cannot be reset: a reset needs an empty group "
            "(as in Kafka). Stop its consumers, or wait until their sessions expire, and try again",
        )
    return exc


async def _reset(request: Request, who: Principal, name: str, spec: ResetSpec) -> list[dict[str, Any]]:
    """The coordinator's ``reset``, authorised as REST's ``POST /v1/groups/{g}/offsets/reset``: the group must
    be the caller's to use (a tenant's first use claims an unclaimed name, as there) and its topic the caller's
    to consume."""
    broker, coordinator = _broker(request), _groups(request)
    owner = coordinator.owner(name)
    try:
        if owner.local:
            await _may_use(broker, who, name, "tenant")
            if broker.security.enabled:
                broker.security.authorize(who, broker.topic(spec.topic), "consume")
            answer: dict[str, Any] = await coordinator.reset(
                name,
                topic=spec.topic,
                partition=spec.partition,
                to=spec.to,
                offset=spec.offset,
                timestamp=spec.timestamp,
            )
        else:
            path = f"/v1/groups/{quote(name, safe='')}/offsets/reset"
            answer = await _at_owner(broker, owner, who, "POST", path, spec.to_json())
    except ApiError as exc:
        raise _readable_refusal(exc, name) from None
    return list(answer.get("offsets", []))


async def _plan(request: Request, who: Principal, spec: ResetSpec, described: Mapping[str, Any]) -> list[Move]:
    """The dry run: each partition's committed offset (from the describe) and where the reset would move it,
    computed by the same reads the coordinator's ``reset`` makes. Nothing is written."""
    broker = _broker(request)
    config = broker.topic(spec.topic)
    if broker.security.enabled:
        broker.security.authorize(who, config, "consume")
    if spec.partition is not None:
        broker.check_partition(spec.topic, spec.partition)
    indexes = list(range(config.partitions)) if spec.partition is None else [spec.partition]
    found = await asyncio.gather(*(internal_topics.bounds(broker, spec.topic, index) for index in indexes))
    bounds = dict(zip(indexes, found, strict=True))
    by_time: dict[int, int] = {}
    if spec.to == "timestamp":
        answers = await asyncio.gather(
            *(partition_offsets(broker, SERVERS, spec.topic, i, timestamp=spec.timestamp) for i in indexes)
        )
        by_time = {i: int(a["offset"]) for i, a in zip(indexes, answers, strict=True)}
    committed = {
        int(row["partition"]): int(row["committed"])
        for row in described.get("partitions", [])
        if row.get("topic") == spec.topic and not row.get("instance") and isinstance(row.get("committed"), int)
    }
    return plan_moves(spec, committed, bounds, by_time)


# ---------------------------------------------------------------- consumer groups


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """A row of the groups list. ``state``/``members``/``lag`` are None when this server cannot tell without
    asking another (the group page asks): the list makes no call per group."""

    name: str
    owner: str | None  # the tenant that claimed it
    coordinator: str  # "" when this server coordinates it
    state: str | None
    members: int | None
    lag: int | None
    lag_partial: bool = False  # some committed partitions are on other servers: lag counts only those here

    @property
    def lag_text(self) -> str:
        if self.lag is None:
            return "—"
        return f"≥ {self.lag:,}" if self.lag_partial else f"{self.lag:,}"


def _summary(broker: Broker, coordinator: GroupCoordinator, name: str, owner_tenant: str | None) -> GroupSummary:
    """A group's row from what this server knows, without an await: a group it coordinates and has loaded, its
    live members and the lag of its committed offsets against the high watermarks of partitions loaded here;
    one it coordinates but has not loaded has no members (a join would have loaded it); another's, nothing."""
    try:
        owner = coordinator.owner(name)
    except ApiError:
        return GroupSummary(name, owner_tenant, "unknown", None, None, None)
    if not owner.local:
        return GroupSummary(name, owner_tenant, owner.server_id, None, None, None)
    state = coordinator.loaded(name)
    if state is None:
        return GroupSummary(name, owner_tenant, "", "empty", 0, None)
    now = time.monotonic()
    live = sum(1 for m in state.members.values() if m.deadline > now)
    lag, partial = 0, False
    for (_instance, topic, partition), committed in list(state.offsets.items()):
        loaded = broker.loaded_now(topic, partition)
        if loaded is None:
            partial = True
            continue
        lag += max(loaded.log.durable_offset - committed, 0)
    shown = None if partial and lag == 0 else lag
    return GroupSummary(name, owner_tenant, "", state.state(now) if live else "empty", live, shown, partial)


@router.get("/groups")
async def groups_page(request: Request) -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    broker, coordinator = _broker(request), _groups(request)
    names = await coordinator.list()
    owners: Mapping[str, str] = {}
    if broker.security.enabled:
        security = broker.security.state
        names = [g for g in names if security.may_use_group(session.tenant, g)]
        owners = security.group_owners
    rows = [_summary(broker, coordinator, name, owners.get(name)) for name in sorted(names)]
    return _render("groups.html", session=session, groups=rows)


def _members(described: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "member_id": str(m.get("member_id", "")),
            "instance": str(m.get("instance", "")),
            "holds": ", ".join(f"{a['topic']}/{a['partition']}" for a in m.get("assignment", [])) or "nothing yet",
            "revoking": ", ".join(f"{a['topic']}/{a['partition']}" for a in m.get("revoking", [])),
            "expires_s": int(m.get("expires_in_ms", 0)) / 1000,
        }
        for m in described.get("members", [])
    ]


def _partitions(described: Mapping[str, Any]) -> list[dict[str, str]]:
    return [
        {
            "topic": str(row["topic"]),
            "partition": str(row["partition"]),
            "instance": str(row.get("instance") or ""),
            "member": str(row.get("member") or "—"),
            "committed": _count(row.get("committed")) if row.get("committed") is not None else "none",
            "high": _count(row.get("high_watermark")),
            "lag": _count(row.get("lag")),
        }
        for row in described.get("partitions", [])
    ]


async def _group_view(
    request: Request,
    name: str,
    *,
    described: dict[str, Any] | None = None,
    spec: ResetSpec | None = None,
    moves: list[Move] | None = None,
    error: str = "",
    applied: str = "",
    http_status: int = 200,
) -> Response:
    """The group's page (and the reset form, a dry run's moves, or why a reset was refused)."""
    session = _session(request)
    if session is None:
        return _to_login()
    if described is None:
        described = await _describe_group(request, _principal(session), name)
    now = int(time.time() * 1000)
    history = _history(request)
    history.record(name, now, topic_lags(described.get("partitions", [])))
    series = history.series(name)
    start = now - _CHART_SPAN_MS
    chart = lag_chart(series, start_ms=start, end_ms=now, title=f"{name}: lag per topic (messages)")
    # The group's own topics first: its retry topic (``__retry.<group>``) is rarely the one to reset.
    topics = sorted({str(row["topic"]) for row in described.get("partitions", [])}, key=lambda t: (t[:2] == "__", t))
    return _render(
        "group.html",
        http_status,
        session=session,
        group_name=name,
        g=described,
        members=_members(described),
        partitions=_partitions(described),
        total_lag=_count(sum(topic_lags(described.get("partitions", [])).values())),
        chart=chart,
        chart_caption=caption(series, start, now),
        topics=topics,
        targets=_TARGETS,
        spec=spec,
        moves=moves,
        error=_sentence(error),
        applied=applied,
    )


@router.get("/groups/{name}")
async def group_page(request: Request, name: str, applied: str = "") -> Response:
    return await _group_view(request, name, applied=applied)


@router.get("/groups/{name}/reset")
async def reset_preview(request: Request, name: str) -> Response:
    """The dry run: where each partition would move. Reads only: a GET, and the apply button posts."""
    session = _session(request)
    if session is None:
        return _to_login()
    who = _principal(session)
    described = await _describe_group(request, who, name)  # 404 first for a group the caller may not use
    try:
        spec = ResetSpec.from_form(dict(request.query_params))
    except ApiError as exc:
        return await _group_view(request, name, described=described, error=exc.message, http_status=exc.status)
    if described.get("members"):
        refusal = _readable_refusal(ApiError(409, "GROUP_ACTIVE", ""), name)
        return await _group_view(request, name, described=described, spec=spec, error=refusal.message, http_status=409)
    try:
        moves = await _plan(request, who, spec, described)
    except ApiError as exc:
        return await _group_view(
            request, name, described=described, spec=spec, error=exc.message, http_status=exc.status
        )
    return await _group_view(request, name, described=described, spec=spec, moves=moves)


@router.post("/groups/{name}/reset")
async def reset_apply(request: Request, name: str) -> Response:
    """Apply a reset the dry run showed (the coordinator computes it again, as Kafka's tool does on execute:
    ``latest`` and a time may have moved since). Refused while the group has live members."""
    session = _session(request)
    if session is None:
        return _to_login()
    form = await _form(request)
    _check_csrf(session, form)
    who = _principal(session)
    validate_group_name(name)
    try:
        spec = ResetSpec.from_form(form)
        await _reset(request, who, name, spec)
    except ApiError as exc:
        if exc.status == 404:
            raise  # a group the caller may not use: the 404 page, as for one that does not exist
        kept = ResetSpec.from_form(form) if exc.code == "GROUP_ACTIVE" else None  # the form as it was sent
        return await _group_view(request, name, spec=kept, error=exc.message, http_status=exc.status)
    query = urlencode({"applied": spec.words()})
    return RedirectResponse(f"/portal/groups/{quote(name, safe='')}?{query}", status_code=303)


# ---------------------------------------------------------------- push subscriptions


def _visible_subscriptions(broker: Broker, who: Principal) -> list[tuple[str, str | None]]:
    """The subscriptions ``who`` may use, as REST's list decides (the subscription's tenant, or the admin), with
    their tenants."""
    return sorted(
        (t.name[len(STATE_PREFIX) :], t.tenant)
        for t in broker.list_topics()
        if t.name.startswith(STATE_PREFIX) and (not broker.security.enabled or who.admin or t.tenant == who.tenant)
    )


async def _describe_subscription(request: Request, who: Principal, name: str) -> dict[str, Any]:
    """``GET /v1/subscriptions/{name}``'s answer, authorised as there (the subscription's tenant or the admin,
    and the right to consume its topic), plus ``redelivered`` (messages in flight delivered more than once) when
    this server coordinates it, and ``dead_lettered`` (what its dead-letter topic holds)."""
    validate_subscription_name(name)
    broker, coordinator = _broker(request), _subscriptions(request)
    owner = coordinator.owner(name)
    if owner.local:
        active = await active_for(broker, coordinator, who, name)
        described = await coordinator.describe(name)
        described["redelivered"] = sum(
            1 for ledger in active.ledgers.values() for entry in ledger.entries.values() if entry.deliveries > 1
        )
    else:
        described = await _at_owner(broker, owner, who, "GET", f"/v1/subscriptions/{quote(name, safe='')}")
        described["redelivered"] = None  # the REST answer does not say
    try:
        earliest, latest = await internal_topics.bounds(broker, dead_letter_topic(name), 0)
        described["dead_lettered"], described["dead_letters_kept"] = latest, latest - earliest
    except ApiError:
        described["dead_lettered"] = described["dead_letters_kept"] = None
    return described


def _subscription_row(name: str, tenant: str | None, described: Mapping[str, Any], error: str) -> dict[str, Any]:
    rows: Sequence[Mapping[str, Any]] = described.get("partitions", [])
    return {
        "name": name,
        "tenant": tenant or "",
        "topic": str(described.get("topic", "—")),
        "subscribers": _count(described.get("subscribers")),
        "in_flight": _count(sum(int(r.get("leased", 0)) for r in rows)) if rows else _count(None),
        "unsettled": _count(sum(int(r.get("unsettled", 0)) for r in rows)) if rows else _count(None),
        "redelivered": _count(described.get("redelivered")),
        "dead_lettered": _count(described.get("dead_lettered")),
        "dead_letters_kept": _count(described.get("dead_letters_kept")),
        "dead_letter_topic": dead_letter_topic(name),
        "dead_letter_href": f"/portal/topics/{quote(dead_letter_topic(name), safe='')}",
        "error": error,
    }


@router.get("/subscriptions")
async def subscriptions_page(request: Request) -> Response:
    """Every visible subscription described (a few at once): subscriptions are few, and their counts are what
    the list is for. One that cannot be described now says why on its row."""
    session = _session(request)
    if session is None:
        return _to_login()
    who = _principal(session)
    limit = asyncio.Semaphore(_LIST_CONCURRENCY)

    async def row(name: str, tenant: str | None) -> dict[str, Any]:
        async with limit:
            try:
                return _subscription_row(name, tenant, await _describe_subscription(request, who, name), "")
            except ApiError as exc:
                return _subscription_row(name, tenant, {}, exc.message)

    visible = _visible_subscriptions(_broker(request), who)
    rows = await asyncio.gather(*(row(name, tenant) for name, tenant in visible))
    return _render("subscriptions.html", session=session, subscriptions=rows)


@router.get("/subscriptions/{name}")
async def subscription_page(request: Request, name: str) -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    who = _principal(session)
    described = await _describe_subscription(request, who, name)
    tenant = described.get("tenant")
    return _render(
        "subscription.html",
        session=session,
        s=_subscription_row(name, tenant if isinstance(tenant, str) else None, described, ""),
        settings={
            "Acknowledgement timeout": f"{int(described.get('ack_timeout_ms', 0)) / 1000:g} s",
            "Deliveries before dead-lettering": "no limit (never dead-lettered)"
            if described.get("max_deliveries") == 0
            else str(described.get("max_deliveries", "—")),
            "Key order": "kept" if described.get("key_ordered") else "not kept",
            "Most in flight per partition": _count(described.get("max_in_flight")),
            "A new subscription starts at": str(described.get("start", "—")),
            "Coordinator": str(described.get("coordinator", "—")),
        },
        partitions=[
            {
                "partition": str(r.get("partition")),
                "floor": _count(r.get("floor")),
                "read_to": _count(r.get("read_to")),
                "unsettled": _count(r.get("unsettled")),
                "leased": _count(r.get("leased")),
            }
            for r in described.get("partitions", [])
        ],
    )
