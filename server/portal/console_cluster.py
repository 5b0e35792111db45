"""The operations console's cluster page (``/portal/cluster``, issue 41), for the admin: the servers and their
state, the ring's members and virtual-node weights, which partitions each server owns, the partition moves
this server has seen, and each server's traffic.

Everything comes from what this server already holds: the cluster member's view (``ClusterMember``: the ring
it acts on, the registrations it reads), the topic catalog, and ``/metrics``. Nothing here writes, and nothing
asks ZooKeeper: the page is as cheap as the number of partitions it places on the ring.

**Recent moves.** The cluster member keeps no history of rings, so this module keeps one (:class:`RingWatch`,
one per app, the last changes): the app starts it as the server starts (:func:`watch_ring`), and from then on it
sees every ring this server adopts, through the broker's ``ownership_listeners`` (called after each ring change),
as well as on each view. It diffs the placement of every partition between consecutive rings it saw; what
happened before this server started, or on another server only, it cannot know (the page says since when it
watches).

**Traffic.** Counters of ``/metrics`` since each process started: this server's own registry in-process, the
others' ``/metrics`` through the broker's forwarder (its TLS and admin token) with a short timeout, concurrently;
a server that does not answer (killed, paused) is shown as such, and never holds the page up for long.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from starlette.responses import Response

from hashring import Ring, partition_key
from server import metrics
from server.broker import Broker
from server.cluster import Owner
from server.coordination import LiveServer
from server.errors import ApiError
from server.portal.pages import _broker, _render, _session, _to_login, router
from server.topics import TopicConfig

__all__ = ["Move", "RingChange", "RingWatch", "cluster_page", "traffic_of", "watch_ring"]

log = logging.getLogger("talos.portal")

_KEPT_CHANGES = 20  # ring changes listed
_KEPT_MOVES = 200  # partitions listed per change (all are counted)
_METRICS_TIMEOUT_S = 1.5  # per other server: a dead one costs the page this much at most
# /metrics samples shown (summed over their labels) → the field they fill.
_TRAFFIC = {
    "talos_bytes_in_total": "bytes_in",
    "talos_messages_in_total": "messages_in",
    "talos_bytes_out_total": "bytes_out",
    "talos_usage_messages_total": "messages_metered",
    "talos_loaded_partitions": "loaded",
    "talos_partition_takeovers_total": "takeovers",
}


# ---------------------------------------------------------------- the ring's history, as this server saw it


@dataclass(frozen=True, slots=True)
class Move:
    """A partition the ring gave to another server."""

    topic: str
    partition: int
    before: str
    after: str


@dataclass(frozen=True, slots=True)
class RingChange:
    """Two consecutive rings this server saw (versions ``before`` → ``after``; others may lie between)."""

    at_ms: int
    before: int
    after: int
    joined: tuple[str, ...]
    left: tuple[str, ...]
    reweighed: tuple[str, ...]
    moved: int  # partitions whose owner changed
    moves: tuple[Move, ...]  # the first _KEPT_MOVES of them


def _placement(ring: Ring, topics: Iterable[TopicConfig]) -> dict[tuple[str, int], str]:
    """Every partition's owner by ``ring`` ("" with an empty ring)."""
    placed: dict[tuple[str, int], str] = {}
    for topic in topics:
        for index in range(topic.partitions):
            placed[(topic.name, index)] = ring.owner(partition_key(topic.name, index)) if ring.members else ""
    return placed


def _signature(topics: list[TopicConfig]) -> tuple[tuple[str, int], ...]:
    return tuple((t.name, t.partitions) for t in topics)


@dataclass
class RingWatch:
    """The rings one server adopted since the watch began, as changes with the partitions they moved.

    Fed from the event loop only (page views and the broker's ownership listeners), so it needs no lock. It
    also caches the placement of the last ring seen: a page view places no partition twice."""

    since_ms: int = 0
    ring: Ring | None = None
    changes: deque[RingChange] = field(default_factory=lambda: deque(maxlen=_KEPT_CHANGES))
    # Servers that left the ring (→ the version they left in) and have not come back; their last known URLs.
    departed: dict[str, int] = field(default_factory=dict)
    urls: dict[str, str] = field(default_factory=dict)
    _placed: dict[tuple[str, int], str] = field(default_factory=dict)
    _placed_for: tuple[int, tuple[tuple[str, int], ...]] | None = None

    def observe(self, ring: Ring, topics: list[TopicConfig], now_ms: int | None = None) -> dict[tuple[str, int], str]:
        """Note ``ring`` (a change, if it differs from the last one seen); the placement of ``topics`` on it."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        signature = _signature(topics)
        previous, before = self.ring, self._placed
        if previous is not None and ring is previous and self._placed_for == (ring.version, signature):
            return self._placed
        placed = _placement(ring, topics)
        self.ring, self._placed, self._placed_for = ring, placed, (ring.version, signature)
        if previous is None:
            self.since_ms = now_ms
            return placed
        if previous.version == ring.version and previous.members == ring.members:
            return placed  # the same ring (another copy of it), or only the topics changed
        moves = [
            Move(key[0], key[1], before[key], owner)
            for key, owner in placed.items()
            if key in before and before[key] != owner
        ]
        old, new = previous.members, ring.members
        joined, left = tuple(sorted(set(new) - set(old))), tuple(sorted(set(old) - set(new)))
        for server in joined:
            self.departed.pop(server, None)
        self.departed.update(dict.fromkeys(left, ring.version))
        self.changes.appendleft(
            RingChange(
                at_ms=now_ms,
                before=previous.version,
                after=ring.version,
                joined=joined,
                left=left,
                reweighed=tuple(sorted(m for m in set(old) & set(new) if old[m] != new[m])),
                moved=len(moves),
                moves=tuple(moves[:_KEPT_MOVES]),
            )
        )
        return placed

    def remember(self, servers: Mapping[str, LiveServer]) -> None:
        """The registered servers' URLs: a server that is gone is still shown with the one it had."""
        self.urls.update((server, live.url) for server, live in servers.items())


def watch_ring(state: Any, broker: Broker) -> RingWatch:
    """The app's watch (``state``: its ``app.state``); made by the first call, which also has the broker call it
    after every ring change from then on. The app calls it as it starts, so the watch sees every ring since."""
    watch = getattr(state, "console_ring_watch", None)
    if isinstance(watch, RingWatch):
        return watch
    watch = RingWatch()
    state.console_ring_watch = watch

    async def ring_changed() -> None:
        # One of the broker's listeners: it must not raise (the ones after it would not run).
        try:
            if broker.cluster is not None:
                watch.remember(broker.cluster.servers)
                watch.observe(broker.cluster.ring, broker.list_topics())
        except Exception:
            log.exception("the cluster page's ring watch failed")

    broker.ownership_listeners.append(ring_changed)
    if broker.cluster is not None:
        watch.remember(broker.cluster.servers)
        watch.observe(broker.cluster.ring, broker.list_topics())
    return watch


# ---------------------------------------------------------------- traffic from /metrics


def traffic_of(exposition: str) -> dict[str, float]:
    """The samples of :data:`_TRAFFIC` in a Prometheus text exposition, each summed over its labels."""
    sums = dict.fromkeys(_TRAFFIC.values(), 0.0)
    for line in exposition.splitlines():
        if not line.startswith("talos_"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        kind = _TRAFFIC.get(name)
        if kind is not None:
            try:
                sums[kind] += float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                continue
    return sums


async def _remote_traffic(broker: Broker, server_id: str, url: str) -> dict[str, Any]:
    try:
        reply = await asyncio.wait_for(
            broker.forwarder.send(Owner(server_id, url, False), "GET", "/metrics", query={}, headers={}, body=None),
            _METRICS_TIMEOUT_S,
        )
    except TimeoutError:
        return {"error": f"no answer within {_METRICS_TIMEOUT_S:g} s"}
    except ApiError as exc:
        return {"error": exc.message}
    if reply.status != 200:
        return {"error": f"/metrics answered {reply.status}"}
    return {"figures": traffic_of(reply.body.decode("utf-8", "replace")), "source": f"{url}/metrics"}


async def _traffic(broker: Broker, servers: list[dict[str, Any]]) -> None:
    """Each server's ``traffic``: ours in-process, the others' over HTTP at once (registered ones only)."""

    async def one(server: dict[str, Any]) -> None:
        if server["me"]:
            figures = traffic_of(metrics.render(labelled=False).decode())
            server["traffic"] = {"figures": figures, "source": "this server, in-process"}
        elif server["registered"] and server["url"]:
            server["traffic"] = await _remote_traffic(broker, server["id"], server["url"])
        else:
            server["traffic"] = {"error": "not registered: nobody to ask"}

    await asyncio.gather(*(one(s) for s in servers))


# ---------------------------------------------------------------- the page


def _state(server: dict[str, Any]) -> tuple[str, str]:
    """In words, and a CSS class."""
    if not server["registered"]:
        return ("gone: in the ring until reassign_delay", "down") if server["in_ring"] else ("gone", "down")
    if server["writable"] is False:
        return "stepped down (storage failing)", "warn"
    if not server["in_ring"]:
        return "registered, joining the ring", "warn"
    return "serving", "ok"


def _servers(broker: Broker, watch: RingWatch | None) -> list[dict[str, Any]]:
    """The servers as the cluster member sees them (one, standalone), and those the watch saw leave the ring."""
    cluster = broker.cluster
    if cluster is None:
        me = {
            "id": broker.config.member_id,
            "url": broker.config.url,
            "me": True,
            "registered": True,
            "registered_at_ms": None,
            "in_ring": True,
            "vnodes": None,
            "writable": True,
            "state": "standalone: serves every partition",
            "state_class": "ok",
        }
        return [me]
    described = cluster.describe()["servers"]
    assert isinstance(described, list)
    servers = []
    for entry in described:
        server = dict(entry)
        server["me"] = server["id"] == cluster.server_id
        since = server.pop("registered_at")
        server["registered_at_ms"] = int(since * 1000) if since else None
        if server["me"] and cluster.stepped_down:
            server["writable"] = False
        server["state"], server["state_class"] = _state(server)
        servers.append(server)
    if watch is not None:
        listed = {s["id"] for s in servers}
        for server_id, version in sorted(watch.departed.items()):
            if server_id not in listed:
                gone = {"id": server_id, "url": watch.urls.get(server_id), "me": False, "registered": False}
                gone.update(registered_at_ms=None, in_ring=False, vnodes=None, writable=None)
                gone.update(state=f"gone: left the ring in version {version}", state_class="down")
                servers.append(gone)
    return servers


def _owned(placed: dict[tuple[str, int], str]) -> dict[str, list[tuple[str, list[int]]]]:
    """Per server: its partitions, by topic (topics in name order, partitions ascending)."""
    by_server: dict[str, dict[str, list[int]]] = {}
    for (topic, index), owner in placed.items():
        by_server.setdefault(owner, {}).setdefault(topic, []).append(index)
    return {owner: sorted((t, sorted(p)) for t, p in topics.items()) for owner, topics in by_server.items()}


@router.get("/cluster")
async def cluster_page(request: Request) -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    if not session.admin:
        raise ApiError(403, "FORBIDDEN", "the cluster page is the admin's: sign in with the admin token")
    broker = _broker(request)
    topics = broker.list_topics()
    cluster = broker.cluster
    ring: Ring | None = None
    watch: RingWatch | None = None
    if cluster is None:
        placed = {(t.name, index): broker.config.member_id for t in topics for index in range(t.partitions)}
    else:
        ring, watch = cluster.ring, watch_ring(request.app.state, broker)
        watch.remember(cluster.servers)
        placed = watch.observe(ring, topics)  # before listing the servers: one that just left is listed as gone
    servers = _servers(broker, watch)
    owned = _owned(placed)
    for server in servers:
        server["owned"] = owned.get(server["id"], [])
        server["partitions"] = sum(len(p) for _t, p in server["owned"])
    await _traffic(broker, servers)
    total_vnodes = sum(ring.members.values()) if ring is not None else 0
    return _render(
        "cluster.html",
        session=session,
        standalone=ring is None,
        servers=servers,
        ring=ring,
        members=sorted(ring.members.items()) if ring is not None else [],
        total_vnodes=total_vnodes,
        partitions=len(placed),
        unowned=sum(len(p) for _t, p in owned.get("", [])),
        watch=watch,
        fields=list(_TRAFFIC.values()),
    )
