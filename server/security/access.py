"""Who may do what to a topic. Pure.

- The admin (the configured admin token) may do everything.
- A tenant may do everything to the topics it owns (created), and what grants give it to others' topics.
- Internal topics (``__…``) are the servers' own, except the few that clients keep their state in: the
  connector runner's checkpoints and a group's retry and dead-letter topics, which any tenant may use.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.errors import ApiError
from server.security.state import ACTIONS, SecurityState

__all__ = ["ANONYMOUS", "Principal", "actions_on", "require"]

_SHARED_INTERNAL = ("__connect_offsets",)
_SHARED_INTERNAL_PREFIXES = ("__retry.", "__dlq.")


@dataclass(frozen=True, slots=True)
class Principal:
    tenant: str | None  # None: the admin
    token_id: str | None = None  # which token authenticated it (None: the admin token, or auth is off)

    @property
    def admin(self) -> bool:
        return self.tenant is None

    @property
    def name(self) -> str:
        return self.tenant if self.tenant is not None else "admin"


ANONYMOUS = Principal(None)  # auth off: everything is allowed


def actions_on(principal: Principal, state: SecurityState, topic: str, owner: str | None) -> frozenset[str]:
    """The actions ``principal`` may take on ``topic`` (owned by tenant ``owner``; None: by nobody)."""
    if principal.admin:
        return frozenset(ACTIONS)
    if topic.startswith("__"):
        if topic in _SHARED_INTERNAL or topic.startswith(_SHARED_INTERNAL_PREFIXES):
            return frozenset(("produce", "consume"))
        return frozenset()
    if owner is not None and owner == principal.tenant:
        return frozenset(ACTIONS)
    allowed: set[str] = set()
    for grant in state.grants:
        if grant.tenant == principal.tenant and grant.matches(topic):
            allowed.update(grant.actions)
    return frozenset(allowed)


def require(principal: Principal, state: SecurityState, topic: str, owner: str | None, action: str) -> None:
    """Raise 403 unless ``principal`` may ``action`` the topic."""
    if action not in actions_on(principal, state, topic, owner):
        raise ApiError(
            403, "FORBIDDEN", f"tenant {principal.name!r} may not {action} topic {topic[:300]!r}", retriable=False
        )
