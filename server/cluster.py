"""This server's membership in a cluster: its ZooKeeper session, registration, the ring it acts on.

Ownership comes from ``/talos/ring`` alone (watched, so every server acts on the ring within a round trip
of its change); a background thread runs the leaderless :class:`RingKeeper` every ``ring_check_s``. When
the ZooKeeper session is lost (a pause longer than the session timeout, a partition from ZooKeeper), the
server stops acting as owner at once: the broker drops every partition, and the server registers again
with its new session. Fencing in the storage makes that safe even before the server notices.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry

from hashring import Ring, partition_key
from server.config import ServerConfig
from server.coordination import LiveServer, RingKeeper, RingStore, ServerRegistry, paths
from server.coordination.kazoo_logs import EXPECTED_ZOOKEEPER_ERRORS
from server.coordination.registry import registration
from server.coordination.stepdown import PeerStorage, writers_besides
from server.errors import ApiError
from server.storage_health import STALLED_AFTER_S, StorageHealth

__all__ = ["ClusterMember", "Owner"]

log = logging.getLogger("talos.cluster")


@dataclass(frozen=True, slots=True)
class Owner:
    """Who serves a partition: this server (``local``), or another at ``url`` (None: not registered now)."""

    server_id: str
    url: str | None
    local: bool


class ClusterMember:
    def __init__(
        self,
        config: ServerConfig,
        *,
        on_ring: Callable[[Ring], None],
        on_session_lost: Callable[[], None],
        health: StorageHealth | None = None,
    ) -> None:
        self.config = config
        self.server_id = config.member_id
        self.url = config.url
        self._on_ring = on_ring
        self._on_session_lost = on_session_lost
        self.health = health or StorageHealth()
        # Stepped down (docs/cluster.md, "Storage failure"): out of the ring by our own choice, until the
        # ring keepers take us back; ``_writable`` is what our registration says.
        self.stepped_down = False
        self._writable = True
        self._writable_since_ms = 0
        self._published_ok_ms = 0
        self._staying_logged = False
        self._foreign_logged = False
        self._last_check = (0.0, False)  # (when, whether storage had failed for storage_step_down_s then)
        retry = KazooRetry(max_tries=-1, delay=0.2, max_delay=2.0)
        self.zk = KazooClient(
            hosts=config.zk,
            timeout=config.zk_session_timeout_s,
            connection_retry=retry,
            command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1.0),
        )
        self.ring = Ring({}, 0)
        self.servers: dict[str, LiveServer] = {}
        self.registered = False
        self._stop = threading.Event()
        self._keeper_thread: threading.Thread | None = None
        self._reregister = threading.Event()
        self._ring_lock = threading.Lock()

    # ---------------------------------------------------------------- lifecycle (blocking: run in a thread)

    def start(self, timeout: float = 30.0) -> None:
        """Connect, register (waiting, if need be, for our id to fall free), watch the ring. :meth:`stop` from
        another thread (a SIGTERM during start-up) ends the wait: the client closes, and this raises."""
        try:
            _ensure_chroot(self.config.zk, timeout)
        except KazooTimeoutError:
            raise RuntimeError(f"cannot reach ZooKeeper at {self.config.zk} within {timeout:.0f}s") from None
        connected = self.zk.start_async()
        give_up = time.monotonic() + timeout
        while not connected.wait(0.1) or self._stop.is_set():
            if self._stop.is_set() or time.monotonic() > give_up:
                self._close_client()
                if self._stop.is_set():
                    raise RuntimeError("stopped while connecting to ZooKeeper")
                raise RuntimeError(f"cannot reach ZooKeeper at {self.config.zk} within {timeout:.0f}s")
        self.zk.add_listener(self._state_changed)
        self._registry = ServerRegistry(self.zk)
        self._ring_store = RingStore(self.zk)
        self._register(deadline=time.monotonic() + 3 * self.config.zk_session_timeout_s)
        DataWatch(self.zk, paths.RING, self._ring_changed)
        ChildrenWatch(self.zk, paths.SERVERS, self._servers_changed)
        self._keeper_thread = threading.Thread(target=self._keep_ring, name="talos-ring", daemon=True)
        self._keeper_thread.start()

    def _register(self, *, deadline: float) -> None:
        """Create this server's ephemeral registration.

        After a kill -9 the old registration lives until its session expires: wait for it, up to
        ``deadline``. With ``adopt_vacant_id`` the server may instead register as a ring member whose
        server is gone (the pod it replaces), waiting up to ``adopt_wait_s`` for one to appear, so a
        replacement changes no ring and moves no partition."""
        adopt_until = time.monotonic() + self.config.adopt_wait_s if self.config.adopt_vacant_id else 0.0
        deadline = max(deadline, adopt_until)
        logged = False
        while True:
            for candidate in self._identities(waiting=time.monotonic() < adopt_until):
                try:
                    self.zk.create(f"{paths.SERVERS}/{candidate}", self._registration(), ephemeral=True, makepath=True)
                except NodeExistsError:
                    continue
                if candidate != self.server_id:
                    log.info("adopted the vacant ring member %s (was %s)", candidate, self.server_id)
                self.server_id = candidate
                self.registered = True
                log.info("registered as %s at %s", self.server_id, self.url)
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"server id {self.server_id!r} is registered by another live server (or a crashed one "
                    "whose ZooKeeper session has not expired yet)"
                )
            if not logged:
                logged = True
                what = "a vacant ring member or " if self.config.adopt_vacant_id else ""
                log.warning("waiting for %sserver id %s (held by an earlier session?)", what, self.server_id)
            time.sleep(0.5)

    def _registration(self) -> bytes:
        state = self.health.state()
        self._published_ok_ms = state.last_ok_ms
        storage = PeerStorage(self._writable, state.last_ok_ms, state.ok_since_ms)
        return registration(
            self.url,
            self.config.kafka_address,
            writable=self._writable,
            since_ms=self._writable_since_ms,
            storage=storage,
            kafka_listeners={spec.name: spec.advertised for spec in self.config.kafka_listener_specs},
        )

    def _identities(self, *, waiting: bool) -> list[str]:
        """Ids to try registering under, best first: ours if the ring has it (a restart); then ring members
        nobody serves (with adoption on); then, once done ``waiting`` for those, ``server_id`` as new."""
        if not self.config.adopt_vacant_id:
            return [self.server_id]
        members = self._ring_store.read()[0].members
        live = self._registry.live()
        vacant = sorted(m for m in members if m not in live and m != self.server_id)
        ours = [self.server_id] if self.server_id in members else []
        fresh = [] if waiting or self.config.member_id in members else [self.config.member_id]
        return list(dict.fromkeys([*ours, *vacant, *fresh]))

    def stop(self, *, leave: bool) -> None:
        """Deregister (after the broker released its partitions); with ``leave``, also take this server off
        the ring so its partitions move now instead of after ``reassign_delay``."""
        self._stop.set()
        if self._keeper_thread is not None:  # else stopped during start-up: closing the session is all there is
            self._keeper_thread.join(timeout=5)
            with contextlib.suppress(KazooException, KazooTimeoutError):
                # Deregister first: a registered server missing from the ring is one the other servers' ring
                # keepers add back, so leaving first would race them (and the ring would take us back).
                if self.registered:  # never the node of another server that holds our id
                    self._registry.deregister(self.server_id)
                if leave:
                    self._leave_ring()
        self.registered = False
        self._close_client()

    def _close_client(self) -> None:
        """Close the ZooKeeper session (its ephemeral nodes go with it); from start() or stop(), even both at once."""
        with contextlib.suppress(KazooException, KazooTimeoutError):
            self.zk.stop()
        with contextlib.suppress(Exception):  # "cannot close connection until it is stopped": the other caller's
            self.zk.close()

    def _leave_ring(self, *, stepping_down: bool = False) -> None:
        """Take this server off the ring: after deregistering (a shutdown), or, ``stepping_down``, while still
        registered as unable to write (the ring keepers would remove it as well; this is sooner)."""
        for _attempt in range(10):
            ring, version = self._ring_store.read()
            if self.server_id not in ring.members:
                return
            if stepping_down:
                if len(ring.members) < 2:
                    return  # never the last member: an empty ring serves nothing
            elif self.server_id in self._registry.live():
                return  # adopted by a replacement since we deregistered: it is theirs now
            members = {m: v for m, v in ring.members.items() if m != self.server_id}
            proposal = ring.with_members(members)
            if self._ring_store.publish(proposal, version):
                log.info("left the ring (version %d)", proposal.version)
                if stepping_down:
                    self._adopt(proposal, "the step-down")
                return

    # ---------------------------------------------------------------- ZooKeeper callbacks (kazoo's thread)

    def _state_changed(self, state: str) -> None:
        if self._stop.is_set():
            return  # our own stop() closes the session
        if state == KazooState.LOST:
            log.warning("ZooKeeper session lost: releasing every partition; registering again once connected")
            self.registered = False
            self._on_session_lost()
            self._reregister.set()
        elif state == KazooState.SUSPENDED:
            log.warning("ZooKeeper connection suspended")
        elif state == KazooState.CONNECTED:
            log.info("ZooKeeper connected")

    def _ring_changed(self, data: bytes | None, _stat: ZnodeStat | None) -> None:
        if data:
            self._adopt(Ring.from_json(orjson.loads(data)), "its watch")
        else:  # the ring's node deleted: nothing is owned, whatever was
            self._adopt(Ring({}, 0), "its watch", even_older=True)

    def _adopt(self, ring: Ring, source: str, *, even_older: bool = False) -> None:
        """Act on ``ring`` if it is newer than the one in force. From the ring's watch (kazoo's thread) and from
        the ring keeper's own reads: the watch is one-shot, set again by a read that kazoo retries only a few
        times, so on a flapping link it can miss a change for good (a deposed owner then went on serving its
        stale copy of a partition to consumers)."""
        with self._ring_lock:
            if ring.version <= self.ring.version and not even_older:
                return
            self.ring = ring
        log.info("ring version %d: %s (from %s)", ring.version, sorted(ring.members), source)
        self._on_ring(ring)

    def _servers_changed(self, _children: list[str]) -> None:
        # Resolve URLs off kazoo's event thread: a synchronous read here would deadlock the callbacks.
        self._refresh_servers = True

    _refresh_servers = True

    # ---------------------------------------------------------------- ring keeper thread

    def _keep_ring(self) -> None:
        keeper = RingKeeper(
            self.zk,
            join_delay=self.config.join_delay_s,
            reassign_delay=self.config.reassign_delay_s,
            traffic=daily_traffic(self.config.metering_store) if self.config.metering_store else None,
            reweigh_every_s=self.config.reweigh_every_s,
        )
        while not self._stop.is_set():
            try:
                if self._reregister.is_set() and self.zk.connected:
                    self._reregister.clear()
                    self._register(deadline=time.monotonic() + 3 * self.config.zk_session_timeout_s)
                if self._refresh_servers:
                    self._refresh_servers = False
                    self.servers = self._registry.live()
                if self.registered:
                    self._keep_registration()
                if self.registered:
                    self._adopt(keeper.tick(), "the ring keeper")
                    self.servers = keeper.live  # read by the tick anyway: storage health is in it too
                    self._consider_storage()
            except (KazooException, KazooTimeoutError, RuntimeError) as exc:
                # A lost connection or session is said once, by _state_changed; this tick is simply retried.
                expected = isinstance(exc, EXPECTED_ZOOKEEPER_ERRORS) or not self.zk.connected
                log.log(logging.INFO if expected else logging.WARNING, "ring maintenance: %r", exc)
                if not self.registered:
                    self._reregister.set()
            self._stop.wait(self.config.ring_check_s)

    def _keep_registration(self) -> None:
        """Publish how our storage does (peers decide their step-downs on it), and register again if our node
        is gone while our session lives (deleted by hand, say): a server missing from the registrations is
        one the ring keepers remove."""
        path = f"{paths.SERVERS}/{self.server_id}"
        try:
            if self.health.last_ok_ms() - self._published_ok_ms >= 1000:
                self.zk.set(path, self._registration())
                return
            stat = self.zk.exists(path)
            if stat is None:
                raise NoNodeError(path)
        except NoNodeError:
            log.warning("registration %s is gone although our ZooKeeper session lives: registering again", path)
            self.registered = False
            self._register(deadline=time.monotonic() + 3 * self.config.zk_session_timeout_s)
            return
        foreign = stat.ephemeralOwner != self.zk.client_id[0]
        if foreign and not self._foreign_logged:  # once, not every tick
            log.error("registration %s belongs to another ZooKeeper session: another server uses our id", path)
        self._foreign_logged = foreign

    def _consider_storage(self) -> None:
        """Step down when our storage has failed for ``storage_step_down_s`` and another ring member can write;
        once stepped down, tell the ring keepers when our storage works again (they take us back after
        join_delay). The rule and its failure modes: docs/cluster.md, "Storage failure"."""
        step_down_s = self.config.storage_step_down_s
        if step_down_s <= 0:
            return
        state = self.health.state(stall_s=min(STALLED_AFTER_S, step_down_s))
        if self.stepped_down:
            if self._writable and self.server_id in self.ring.members:
                self.stepped_down = False
                log.warning("storage works again: back in the ring (version %d)", self.ring.version)
                return
            works = state.failing_s == 0 and state.ok_for_s > 0
            if works != self._writable:
                self._set_writable(works)
                if works:
                    log.warning(
                        "storage works again: rejoining the ring after join_delay (%g s)", self.config.join_delay_s
                    )
            return
        # Two checks in a row must see the failure, the first not long before: a process paused whole (SIGSTOP)
        # wakes with a flush "running" for the length of the pause, which ends a moment later.
        now = time.monotonic()
        previous, self._last_check = self._last_check, (now, state.failing_s >= step_down_s)
        if state.failing_s < step_down_s or self.server_id not in self.ring.members:
            self._staying_logged = False
            return
        if not previous[1] or now - previous[0] > 3 * self.config.ring_check_s + 1:
            return
        now_ms = int(time.time() * 1000)
        peers = {server: info.storage for server, info in self.servers.items()}
        writers = writers_besides(
            self.server_id,
            self.ring.members,
            peers,
            now_ms=now_ms,
            failing_since_ms=now_ms - int(state.failing_s * 1000),
            fresh_ms=int(1000 * (2 * self.config.storage_probe_s + 2 * self.config.ring_check_s + 1)),
            margin_ms=int(1000 * STALLED_AFTER_S),
            sustained_ms=int(1000 * step_down_s),
        )
        if not writers:
            if not self._staying_logged:
                self._staying_logged = True
                log.warning(
                    "storage failing for %.1f s (%s), and no other server has written since: staying in the ring "
                    "(the storage may be down for everybody)",
                    state.failing_s,
                    state.problem,
                )
            return
        log.warning(
            "storage failing for %.1f s (%s); %s wrote since: stepping down, the partitions move to servers "
            "that can write",
            state.failing_s,
            state.problem,
            ", ".join(writers),
        )
        self.stepped_down = True
        self._set_writable(False)
        self._leave_ring(stepping_down=True)

    def _set_writable(self, writable: bool) -> None:
        self._writable = writable
        self._writable_since_ms = int(time.time() * 1000) if writable else 0
        self.zk.set(f"{paths.SERVERS}/{self.server_id}", self._registration())

    def storage_problem(self) -> str | None:
        """Why this server does not serve partitions because of its storage (for readiness), or None."""
        if not self.stepped_down:
            return None
        state = self.health.state()
        if self._writable:
            return "stepped down after a storage failure; storage works again, rejoining the ring after join_delay"
        return f"stepped down: storage failing for {state.failing_s:.1f} s ({state.problem})"

    # ---------------------------------------------------------------- ownership

    def owner(self, topic: str, partition: int) -> Owner:
        return self.owner_of(partition_key(topic, partition))

    def owner_of(self, key: str) -> Owner:
        """The server the ring gives ``key`` (a partition's ``topic:p``, or ``__group:<name>``)."""
        ring = self.ring
        if not ring.members:
            raise ApiError(
                503,
                "NO_SERVERS",
                "no server has joined the ring yet (join_delay); retry",
                retriable=True,
                headers={"Retry-After": "1"},
            )
        member = ring.owner(key)
        if member == self.server_id:
            return Owner(member, self.url, True)
        live = self.servers.get(member)
        return Owner(member, live.url if live else None, False)

    def describe(self) -> dict[str, object]:
        ring = self.ring
        ids = sorted(set(ring.members) | set(self.servers))
        return {
            "mode": "cluster",
            "server_id": self.server_id,
            "url": self.url,
            "zookeeper": {"state": str(self.zk.state), "session_timeout_s": self.config.zk_session_timeout_s},
            "ring": {"version": ring.version, "members": dict(sorted(ring.members.items()))},
            "join_delay_s": self.config.join_delay_s,
            "reassign_delay_s": self.config.reassign_delay_s,
            "stepped_down": self.stepped_down,
            "servers": [
                {
                    "id": server,
                    "url": self.servers[server].url if server in self.servers else None,
                    "registered": server in self.servers,
                    "registered_at": self.servers[server].since if server in self.servers else None,
                    "in_ring": server in ring.members,
                    "vnodes": ring.members.get(server),
                    "writable": self.servers[server].storage.writable if server in self.servers else None,
                }
                for server in ids
            ],
        }


def _ensure_chroot(hosts: str, timeout: float) -> None:
    """Create the chroot of ``host:port,.../chroot`` (kazoo does not, and nothing works without it)."""
    servers, slash, chroot = hosts.partition("/")
    if not slash or not chroot.strip("/"):
        return
    client = KazooClient(hosts=servers, timeout=timeout)
    client.start(timeout=timeout)
    try:
        client.ensure_path("/" + chroot.strip("/"))
    finally:
        client.stop()
        client.close()


def daily_traffic(store_spec: str) -> Callable[[], dict[str, float]]:
    """Per ring key, the average bytes/s over the last day, from the metering store (read when called)."""

    def read() -> dict[str, float]:
        from metering import Window, open_store  # the metering extra; only when a store is configured

        if store_spec.startswith("druid:"):
            store = open_store(druid_url=store_spec.removeprefix("druid:"))
        else:
            store = open_store(duckdb_path=store_spec)
        now_ms = int(time.time() * 1000)
        try:
            return store.partition_rates(Window(now_ms - 86_400_000, now_ms))
        except Exception as exc:  # a store we cannot read must not stop ring maintenance
            log.warning("ring weights: cannot read the metering store %s: %r", store_spec, exc)
            return {}

    return read
