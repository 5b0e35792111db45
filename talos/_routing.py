"""Client-side addressing: send each partition's requests straight to its owner.

Any server answers ``GET /v1/routes?topic=T`` with partition → owner URL. Requests then go to the owner
with ``x-talos-route: direct``; a server that is not (or no longer) the owner answers ``421`` with the
owner's URL, which is taken at once. On ``503`` or a connection failure the topic's routes are looked
up again (at most once per ``refresh_interval_s``). When the owner is unknown the request goes to the
entry point, which forwards it: the bootstrap URL, or after it failed a lookup, another server the
routes named. A standalone server owns everything: the table is not used at all.

An owner this client could not reach (a connection failure, not an error answer) is avoided for
``avoid_s`` even when the next lookup names it again: the servers still see it (a network cut between
this client and that server only), so the entry point forwards to it meanwhile, instead of every
request waiting out a timeout on the direct path.

The table is pure state; :func:`refresh_steps` is the lookup as steps (``talos._steps``), which the producer
and consumer run with their own transports.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from talos._errors import MisdirectedError, TalosError, TransportError, UnavailableError
from talos._steps import Request, Steps, http
from talos._transport import check

__all__ = ["DIRECT", "RouteTable", "refresh_steps"]

DIRECT = {"x-talos-route": "direct"}


class RouteTable:
    def __init__(
        self, bootstrap: str, *, direct: bool = True, refresh_interval_s: float = 1.0, avoid_s: float = 10.0
    ) -> None:
        # Where lookups (and requests without a known owner) go: the bootstrap URL first, then every server
        # the routes named, so the client outlives the death of the server it was given.
        self._entry_points = [bootstrap]
        self._entry = 0
        self.direct = direct  # False: everything goes to the bootstrap URL, which forwards
        self._interval = refresh_interval_s
        self._owners: dict[tuple[str, int], str] = {}
        self._checked: dict[str, float] = {}  # topic → when its routes were last fetched (monotonic)
        self._stale: set[str] = set()
        self.partitions: dict[str, int] = {}  # topic → partition count, as the last lookup said
        self._lock = threading.Lock()
        self.clustered: bool | None = None  # unknown until the first answer
        self._avoid_s = avoid_s
        self._unreachable: dict[str, float] = {}  # owner URL → until when requests go through the entry point

    def needs_refresh(self, topic: str) -> bool:
        if self.clustered is False and topic in self.partitions:
            return False
        checked = self._checked.get(topic)
        if checked is None:
            return True
        return topic in self._stale and time.monotonic() - checked >= self._interval

    @property
    def entry_point(self) -> str:
        """The server that answers lookups and forwards requests whose owner is unknown."""
        return self._entry_points[self._entry % len(self._entry_points)]

    @property
    def lookup_url(self) -> str:
        """``GET`` it with ``params={"topic": topic}``."""
        return f"{self.entry_point}/v1/routes"

    def update(self, topic: str, document: object) -> None:
        """Take the answer of ``GET /v1/routes?topic=``."""
        with self._lock:
            self._checked[topic] = time.monotonic()
            self._stale.discard(topic)
            if not isinstance(document, Mapping):
                return
            self.clustered = document.get("mode") == "cluster"
            topics = document.get("topics")
            entries = topics.get(topic, []) if isinstance(topics, Mapping) else []
            self.partitions[topic] = len(entries)
            for key in [k for k in self._owners if k[0] == topic]:
                del self._owners[key]
            for entry in entries:
                if isinstance(entry, Mapping) and isinstance(entry.get("url"), str):
                    url = str(entry["url"]).rstrip("/")
                    self._owners[(topic, int(entry["partition"]))] = url
                    if self.clustered and url not in self._entry_points:
                        self._entry_points.append(url)

    def rotate(self) -> None:
        """The entry point did not answer: the next request without an owner goes to another server."""
        with self._lock:
            self._entry += 1

    def lookup_failed(self, topic: str) -> None:
        with self._lock:
            self._checked[topic] = time.monotonic()
            self._stale.add(topic)
            self._entry += 1  # the next lookup asks another server

    def target(self, topic: str, partition: int) -> tuple[str, Mapping[str, str]]:
        """Base URL and extra headers for a request to the partition."""
        if self.clustered and self.direct:
            owner = self._owners.get((topic, partition))
            if owner is not None and not self._avoided(owner):
                return owner, DIRECT
        return self.entry_point, {}

    def _avoided(self, owner: str) -> bool:
        until = self._unreachable.get(owner)
        if until is None:
            return False
        if time.monotonic() < until:
            return True
        with self._lock:
            self._unreachable.pop(owner, None)
        return False

    def learn(self, topic: str, partition: int, error: BaseException) -> bool:
        """Adjust to a failed request; True if it should be retried at once (a 421 named the owner)."""
        if isinstance(error, MisdirectedError) and error.owner_url:
            with self._lock:
                self._owners[(topic, partition)] = error.owner_url.rstrip("/")
            return True
        if isinstance(error, (UnavailableError, TransportError)):
            with self._lock:
                self._stale.add(topic)
                if isinstance(error, TransportError):
                    owner = self._owners.pop((topic, partition), None)  # the entry point forwards meanwhile
                    if owner is not None and self.direct:
                        self._unreachable[owner] = time.monotonic() + self._avoid_s
        return False


def refresh_steps(table: RouteTable, topic: str, *, strict: bool = False) -> Steps[None]:
    """Look the topic's routes up if they are missing or stale. ``strict``: raise a failed lookup's error
    (else the bootstrap URL is used until the next try)."""
    if not strict and not table.needs_refresh(topic):
        return
    try:
        answer = yield from http(Request("GET", table.lookup_url, params={"topic": topic}))
        table.update(topic, check(answer).json())
    except TalosError:
        table.lookup_failed(topic)
        if strict:
            raise
