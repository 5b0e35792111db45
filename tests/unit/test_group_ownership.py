"""Group owners and grants in the security document (pure), who reaches a group's retry and dead-letter
topics, and which retry records the consumer treats as dead letters."""

from __future__ import annotations

import pytest

from server.errors import ApiError
from server.security.access import Principal, actions_on
from server.security.state import ADMIN_OWNER, MAX_GROUPS_PER_TENANT, SecurityState
from talos._consumer_state import ConsumerState as _State
from talos._fetcher import Message
from talos._group import dead_letter_record, hold_back, retry_problem, retry_record


def two_tenants() -> SecurityState:
    return SecurityState().create_tenant("alpha", 1).create_tenant("beta", 1).create_tenant("gamma", 1)


def test_the_first_claim_owns_a_group_and_another_tenants_claim_is_404() -> None:
    state = two_tenants().claim_group("orders", "alpha")
    assert state.group_owners == {"orders": "alpha"}
    assert state.claim_group("orders", "alpha") is state  # the owner again: nothing to change
    with pytest.raises(ApiError) as error:
        state.claim_group("orders", "beta")
    assert (error.value.status, error.value.code) == (404, "UNKNOWN_GROUP")


def test_a_tenant_owns_at_most_a_bounded_number_of_groups() -> None:
    """Each claim is a line of the security document every server holds: claims cannot grow it without end."""
    state = two_tenants()
    for index in range(MAX_GROUPS_PER_TENANT):
        state = state.claim_group(f"g{index}", "alpha")
    with pytest.raises(ApiError) as error:
        state.claim_group("one-more", "alpha")
    assert (error.value.status, error.value.code) == (409, "TOO_MANY_GROUPS")
    assert state.claim_group("one-more", "beta").group_owners["one-more"] == "beta"  # others are not limited


def test_only_the_owner_grantees_and_the_admin_may_use_a_group() -> None:
    state = two_tenants().claim_group("orders", "alpha").grant_group("orders", "beta")
    assert state.may_use_group("alpha", "orders")
    assert state.may_use_group("beta", "orders")
    assert state.claim_group("orders", "beta") is state  # a grantee's use claims nothing
    assert not state.may_use_group("gamma", "orders")
    assert state.may_use_group(None, "orders")
    assert not state.may_use_group("alpha", "unclaimed")  # a group from before: nobody's until claimed
    revoked = state.revoke_group("orders", "beta")
    assert not revoked.may_use_group("beta", "orders")
    with pytest.raises(ApiError):
        revoked.revoke_group("orders", "beta")


def test_the_admins_claim_closes_a_group_to_tenants() -> None:
    state = two_tenants().claim_group("ops", None)
    assert state.group_owners == {"ops": ADMIN_OWNER}
    assert not state.may_use_group("alpha", "ops")


def test_granting_needs_a_claimed_group_and_a_known_tenant() -> None:
    with pytest.raises(ApiError) as unclaimed:
        two_tenants().grant_group("orders", "beta")
    assert unclaimed.value.code == "UNKNOWN_GROUP"
    with pytest.raises(ApiError) as unknown:
        two_tenants().claim_group("orders", "alpha").grant_group("orders", "nobody")
    assert unknown.value.code == "UNKNOWN_TENANT"


def test_deleting_a_tenant_drops_its_group_grants_but_keeps_its_groups_claimed() -> None:
    state = (
        two_tenants()
        .claim_group("a", "alpha")
        .claim_group("b", "beta")
        .grant_group("a", "beta")
        .grant_group("b", "gamma")
        .grant_group("a", "gamma")
    )
    left = state.delete_tenant("beta")
    assert [(g.group, g.tenant) for g in left.group_grants] == [("a", "gamma")]
    assert left.group_owners["b"] == "beta"  # nobody inherits beta's offsets and retried messages
    assert not left.may_use_group("gamma", "b")


def test_owners_and_grants_survive_the_json_round_trip() -> None:
    state = two_tenants().claim_group("orders", "alpha").grant_group("orders", "beta")
    again = SecurityState.from_json(state.to_json())
    assert again.group_owners == state.group_owners
    assert again.group_grants == state.group_grants
    assert SecurityState.from_json({}).group_owners == {}  # a document from before


@pytest.mark.parametrize("prefix", ["__retry.", "__dlq."])
def test_a_groups_retry_and_dead_letter_topics_are_its_users_only(prefix: str) -> None:
    state = two_tenants().claim_group("orders", "alpha").grant_group("orders", "beta")
    topic = prefix + "orders"
    assert actions_on(Principal("alpha"), state, topic, "alpha") == {"produce", "consume"}
    assert actions_on(Principal("beta"), state, topic, "alpha") == {"produce", "consume"}
    assert actions_on(Principal("gamma"), state, topic, "alpha") == frozenset()
    assert actions_on(Principal("alpha"), state, prefix + "unclaimed", None) == frozenset()
    assert "consume" in actions_on(Principal(None), state, topic, "alpha")


def message(headers: dict[str, str], offset: int = 7) -> Message:
    encoded = tuple((k, v.encode()) for k, v in headers.items())
    return Message("__retry.g", 0, offset, 0, b"k", b"v", encoded)


GOOD = {
    "talos-origin-topic": "orders",
    "talos-origin-partition": "0",
    "talos-origin-offset": "3",
    "talos-attempt": "1",
    "talos-not-before": "1000",
}


def test_what_retry_record_writes_is_well_formed() -> None:
    first = Message("orders", 0, 3, 0, b"k", b"v")
    _, record = retry_record(first, group="g", delay_s=1, reason="busy", max_retries=3, now_ms=0)
    retried = Message("__retry.g", 0, 0, 0, record.key, record.value, tuple(record.headers))
    assert retry_problem(retried) is None
    assert retry_problem(message(GOOD)) is None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("talos-not-before", "not-a-number"),
        ("talos-not-before", "-5"),
        ("talos-not-before", "9" * 40),
        ("talos-attempt", "x"),
        ("talos-attempt", "0"),
        ("talos-origin-partition", "²"),
        ("talos-origin-offset", ""),
        ("talos-origin-topic", ""),
    ],
)
def test_malformed_retry_headers_are_a_problem_and_never_raise(name: str, value: str) -> None:
    bad = message({**GOOD, name: value})
    assert retry_problem(bad) is not None
    assert bad.attempt >= 0
    due, resume, _ = hold_back([bad], now_ms=10**6)
    assert (due, resume) == ([bad], None)  # due at once: to the dead letters
    topic, record = dead_letter_record(bad, group="g", reason="why")
    assert topic == "__dlq.g" and dict(record.headers)["talos-reason"] == b"why"


def test_a_missing_retry_header_is_a_problem() -> None:
    for name in GOOD:
        assert retry_problem(message({k: v for k, v in GOOD.items() if k != name})) is not None, name


def test_the_consumer_hands_a_malformed_retry_record_to_the_dead_letters_not_the_caller() -> None:
    state = _State(
        start="earliest",
        partitions=[("__retry.g", 0)],
        membership=None,
        auto_commit=True,
        auto_commit_interval_s=5,
        on_assign=None,
        on_revoke=None,
        on_lost=None,
        max_retries=3,
    )
    good = message({**GOOD, "talos-not-before": "0"}, offset=1)
    bad = message({**GOOD, "talos-not-before": "not-a-number"}, offset=2)
    state.received(("__retry.g", 0), [good, bad])
    assert state.hand_out(10) == [good]
    assert state.consumed[("__retry.g", 0)] == 3  # commits move past it
    assert [(m.offset, "talos-not-before" in why) for m, why in state.take_dead_letters()] == [(2, True)]
    state.received(("__retry.g", 0), [bad])  # the iterators: handed out unmarked, dropped by deliver()
    assert state.hand_out(10, mark=False) == [bad]
    assert not state.deliver(bad)
    assert len(state.take_dead_letters()) == 1
