"""Who may do what to a topic. Pure.

- The admin (the configured admin token) may do everything.
- A tenant may do everything to the topics it owns (created), and what grants give it to others' topics.
- Internal topics (``__…``) are the servers' own: a tenant reaches ``__consumer_offsets``,
  ``__talos_metrics``, ``__talos_audit`` and ``__connect_offsets`` only through the API that owns them
  (group commits, usage, audit, ``/v1/connectors/{name}/offsets``). The exceptions: a group's retry and
  dead-letter topics, which the group's owner and the tenants it was granted to may use, and a push
  subscription's dead-letter topic (``__sub-dlq.<name>``), which its tenant may consume. A subscription's
  state topic (``__sub.<name>``) is reached only through ``/v1/subscriptions``.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.errors import ApiError
from server.security.state import ACTIONS, SecurityState

__all__ = ["ANONYMOUS", "Principal", "actions_on", "hidden", "require"]

_GROUP_TOPIC_PREFIXES = ("__retry.", "__dlq.")  # + the group's name: only its owner and grantees use them
_SUBSCRIPTION_DEAD_LETTERS = "__sub-dlq."  # + the subscription's name: its tenant consumes them


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
        if topic.startswith(_GROUP_TOPIC_PREFIXES):
            group = topic.partition(".")[2]
            return frozenset(("produce", "consume")) if state.may_use_group(principal.tenant, group) else frozenset()
        if topic.startswith(_SUBSCRIPTION_DEAD_LETTERS) and owner is not None and owner == principal.tenant:
            return frozenset(("consume",))
        return frozenset()  # the rest (offsets, metrics, audit, checkpoints): only through the API that owns it
    if owner is not None and owner == principal.tenant:
        return frozenset(ACTIONS)
    allowed: set[str] = set()
    for grant in state.grants:
        if grant.tenant == principal.tenant and grant.covers(topic, owner):
            allowed.update(grant.actions)
    return frozenset(allowed)


def hidden(topic: str, actions: frozenset[str]) -> bool:
    """Whether a caller with ``actions`` on ``topic`` is told it does not exist (404, as for a name nobody
    uses) rather than 403: so no tenant learns which names others use. The servers' own internal topics
    are known to all; for those it is 403."""
    if actions:
        return False
    return not topic.startswith("__") or topic.startswith((*_GROUP_TOPIC_PREFIXES, _SUBSCRIPTION_DEAD_LETTERS))


def require(principal: Principal, state: SecurityState, topic: str, owner: str | None, action: str) -> None:
    """Raise 403 unless ``principal`` may ``action`` the topic."""
    if action not in actions_on(principal, state, topic, owner):
        raise ApiError(
            403, "FORBIDDEN", f"tenant {principal.name!r} may not {action} topic {topic[:300]!r}", retriable=False
        )
