"""Tokens, the security document, access rules, token buckets, portal sessions, charts and usage history:
the pure parts of tenants and quotas, without a server."""

from __future__ import annotations

import dataclasses

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metering.store import Window
from server.config import ServerConfig
from server.errors import ApiError
from server.portal.charts import line_chart, nice_ceiling
from server.portal.session import SessionSigner
from server.security.access import ANONYMOUS, Principal, actions_on, hidden, require
from server.security.buckets import TokenBucket, retry_after_header
from server.security.guard import Security
from server.security.state import (
    KEEP_DECIDED_REQUESTS_PER_TENANT,
    MAX_PENDING_REQUESTS_PER_TENANT,
    MAX_TOKENS_PER_TENANT,
    QuotaRequest,
    SecurityState,
    TokenRecord,
)
from server.security.tokens import hash_secret, new_token, parse_token, verify
from server.security.trim import trim_to_allowance
from server.topics import TopicConfig
from server.usage.history import UsageHistory
from server.usage.meter import Usage
from talos import RecordData, decode_records, encode_batch, read_header

# ---------------------------------------------------------------- tokens


def test_a_token_names_its_id_and_only_a_hash_of_the_secret_is_kept() -> None:
    token, token_id, digest = new_token()
    parsed = parse_token(token)
    assert parsed is not None and parsed[0] == token_id
    secret = parsed[1]
    assert secret not in digest and token not in digest
    assert verify(secret, digest)
    assert not verify(secret[:-1] + ("A" if secret[-1] != "A" else "B"), digest)
    assert new_token()[0] != token


@pytest.mark.parametrize("bad", ["", "talos_", "talos_abc_def", "Bearer x", "talos_0123456789ab_short", "x" * 500])
def test_malformed_tokens_do_not_parse(bad: str) -> None:
    assert parse_token(bad) is None


# ---------------------------------------------------------------- the security document


def state_with(*tenants: str) -> SecurityState:
    state = SecurityState()
    for name in tenants:
        state = state.create_tenant(name, 1)
    return state


def test_deleting_a_tenant_takes_its_tokens_and_grants_with_it() -> None:
    state = state_with("acme", "globex")
    state = state.add_token(TokenRecord("a1", "acme", hash_secret("s"), "ci", 1))
    state = state.add_token(TokenRecord("g1", "globex", hash_secret("t"), "", 1))
    state = state.grant("orders", "acme", ("consume",))
    state = state.delete_tenant("acme")
    assert set(state.tenants) == {"globex"}
    assert set(state.tokens) == {"g1"}
    assert state.grants == ()


@pytest.mark.parametrize("name", ["", "Acme", "a/b", "..", "admin", "-x", "a" * 64, "a b"])
def test_tenant_names_are_checked(name: str) -> None:
    with pytest.raises(ApiError) as error:
        SecurityState().create_tenant(name, 1)
    assert error.value.status == 400


def test_grants_merge_actions_and_revoke_some_or_all() -> None:
    state = state_with("acme").grant("orders", "acme", ("consume",)).grant("orders", "acme", ("produce",))
    assert [g.actions for g in state.grants] == [("produce", "consume")]
    state = state.revoke("orders", "acme", ("produce",))
    assert [g.actions for g in state.grants] == [("consume",)]
    assert state.revoke("orders", "acme").grants == ()
    with pytest.raises(ApiError):
        state.revoke("orders", "acme").revoke("orders", "acme")
    with pytest.raises(ApiError):
        state.grant("orders", "acme", ("delete",))
    with pytest.raises(ApiError):
        state.grant("../x", "acme", ("consume",))


def test_quotas_are_positive_and_an_approval_applies_the_limit_asked_for() -> None:
    state = state_with("acme").set_quota("acme", None, {"produce_bytes_per_s": 1000.0})
    assert state.tenant("acme").quota.produce_bytes_per_s == 1000.0
    with pytest.raises(ApiError):
        state.set_quota("acme", None, {"produce_bytes_per_s": -1})
    with pytest.raises(ApiError):
        state.set_quota("acme", None, {"bogus": 1})
    asked = QuotaRequest(0, "acme", "orders", "requests_per_s", None, 50.0, "", "pending", "", "", 1)
    state = state.add_request(asked)
    request_id = state.requests[-1].id
    state = state.decide(request_id, "approved", "fine", "admin", 2)
    assert state.topic_quota("orders").requests_per_s == 50.0
    assert state.request(request_id).status == "approved"
    with pytest.raises(ApiError) as error:
        state.decide(request_id, "rejected", "", "admin", 3)
    assert error.value.code == "ALREADY_DECIDED"
    assert state.set_quota(None, "orders", {"requests_per_s": None}).topic_quotas == {}  # no limits left: gone


names = st.from_regex(r"[a-z][a-z0-9_-]{0,10}", fullmatch=True).filter(lambda n: n != "admin")


@settings(max_examples=50, deadline=None)
@given(tenants=st.sets(names, min_size=1, max_size=4), rate=st.floats(1000, 1e9), partitions=st.integers(1, 4096))
def test_the_document_survives_json(tenants: set[str], rate: float, partitions: int) -> None:
    state = state_with(*sorted(tenants))
    first = sorted(tenants)[0]
    state = state.set_quota(first, None, {"produce_bytes_per_s": rate, "partitions": partitions})
    state = state.add_token(TokenRecord("abc", first, hash_secret("x"), "n", 5)).grant("t*", first, ("produce",))
    assert SecurityState.from_json(state.to_json()) == state


# ---------------------------------------------------------------- access


def test_owners_have_everything_others_what_grants_give_internal_topics_are_the_servers() -> None:
    acme, globex = Principal("acme", "a1"), Principal("globex", "g1")
    state = state_with("acme", "globex").grant("logs.*", "globex", ("consume",))
    assert actions_on(acme, state, "orders", "acme") == {"produce", "consume", "admin"}
    assert actions_on(globex, state, "orders", "acme") == frozenset()
    assert actions_on(globex, state, "logs.web", "acme") == {"consume"}
    assert actions_on(globex, state, "logsweb", "acme") == frozenset()
    assert actions_on(acme, state, "legacy", None) == frozenset()  # no owner: the admin's
    assert actions_on(ANONYMOUS, state, "anything", "acme") == {"produce", "consume", "admin"}
    assert actions_on(acme, state, "__consumer_offsets", None) == frozenset()
    assert actions_on(acme, state, "__retry.g", None) == frozenset()  # an unclaimed group's: nobody's
    claimed = state.claim_group("g", "acme")
    assert actions_on(acme, claimed, "__retry.g", "acme") == {"produce", "consume"}
    assert actions_on(globex, claimed, "__retry.g", "acme") == frozenset()
    with pytest.raises(ApiError) as error:
        require(globex, state, "logs.web", "acme", "produce")
    assert error.value.status == 403


# ---------------------------------------------------------------- token buckets


def test_a_bucket_admits_until_in_debt_and_says_how_long_to_wait() -> None:
    bucket = TokenBucket.full(100.0, now=0.0)
    assert bucket.wait(0.0) == 0
    bucket.charge(150, 0.0)  # one request may overdraw
    assert bucket.wait(0.0) == pytest.approx(0.5)
    assert bucket.wait(0.25) == pytest.approx(0.25)
    assert bucket.wait(0.5) == 0
    bucket.retune(10.0)
    assert bucket.tokens <= 10.0
    assert retry_after_header(0.01) == "1" and retry_after_header(1.2) == "2"


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(rate=st.floats(1e3, 1e7), size_fraction=st.floats(0.001, 0.5), clients=st.integers(1, 16))
def test_a_greedy_client_that_obeys_retry_after_gets_the_rate_within_ten_percent(
    rate: float, size_fraction: float, clients: int
) -> None:
    """Simulated time: clients send as soon as the bucket lets them (each waiting the time it is told)."""
    bucket = TokenBucket.full(rate, now=0.0)
    size = rate * size_fraction
    ready = [0.0] * clients
    admitted = 0.0
    while True:
        index = min(range(clients), key=ready.__getitem__)
        now = ready[index]
        if now >= 30.0:
            break
        wait = bucket.wait(now)
        if wait > 0:
            ready[index] = now + wait
            continue
        bucket.charge(size, now)
        admitted += size
        ready[index] = now + 0.001  # the request's own time
    assert abs(admitted / 30.0 - rate) <= 0.1 * rate


# ---------------------------------------------------------------- portal sessions and charts


def test_sessions_are_signed_expire_and_do_not_cross_keys() -> None:
    signer = SessionSigner("", "admin-token")
    cookie, session = signer.issue("a1", "acme", now=1000.0)
    assert signer.read(cookie, now=1001.0) == session
    assert "admin-token" not in cookie
    assert signer.read(cookie, now=1000.0 + 9 * 3600) is None  # expired
    payload, signature = cookie.rsplit(".", 1)
    assert signer.read(payload + "." + signature[::-1], now=1001.0) is None
    assert signer.read(payload[:-2] + "." + signature, now=1001.0) is None
    assert SessionSigner("", "another-token").read(cookie, now=1001.0) is None
    assert SessionSigner("", "admin-token").read(cookie, now=1001.0) == session  # every server of a cluster
    assert signer.read(None) is None and signer.read("garbage") is None


@pytest.mark.parametrize(("value", "top"), [(0, 1), (0.7, 1), (1, 1), (1.2, 2), (2.1, 2.5), (3, 5), (7, 10), (12, 20)])
def test_the_axis_top_is_a_round_number_at_or_above_the_peak(value: float, top: float) -> None:
    assert nice_ceiling(value) == pytest.approx(top)


def test_a_chart_draws_one_line_per_series_with_tooltips_and_escapes_names() -> None:
    svg = line_chart(
        {"in": [(0, 10.0), (60_000, 2048.0)], "<b>out</b>": [(0, 5.0)]}, start_ms=0, end_ms=120_000, title="t & u"
    )
    assert svg.count("<polyline") == 2
    assert "<b>" not in svg and "&lt;b&gt;out&lt;/b&gt;" in svg and "t &amp; u" in svg
    assert "2 KiB/s" in svg
    empty = line_chart({}, start_ms=0, end_ms=1, title="x")
    assert "no traffic" in empty and "<polyline" not in empty


# ---------------------------------------------------------------- usage history


def test_history_sums_per_tenant_topic_and_step_and_forgets_after_a_day() -> None:
    history = UsageHistory()
    minute = 60_000
    history.add({("acme", "orders", 0): Usage(bytes_in=100, requests=1), ("acme", "orders", 1): Usage(bytes_in=50)}, 0)
    history.add({("acme", "orders", 0): Usage(bytes_in=10), ("globex", "x", 0): Usage(bytes_out=7)}, 3 * minute)
    rows = history.usage_series(Window(0, 10 * minute), tenant="acme")
    assert [(r["time_ms"], r["bytes_in"]) for r in rows] == [(0, 150), (3 * minute, 10)]
    assert history.usage_series(Window(0, 10 * minute), tenant="acme", step_ms=5 * minute)[0]["bytes_in"] == 160
    assert [r["topic"] for r in history.usage_series(Window(0, 10 * minute))] == ["orders", "orders", "x"]
    history.add({("acme", "orders", 0): Usage(bytes_in=1)}, 25 * 3600 * 1000)
    assert history.usage_series(Window(0, 10 * minute)) == []
    with pytest.raises(ValueError, match="step_ms"):
        history.usage_series(Window(0, 1), step_ms=1000)


# ---------------------------------------------------------------- fetch answers cut to a quota's allowance


def offsets_of(batches: list[bytes | bytearray]) -> list[int]:
    return [r.offset for b in batches for r in decode_records(b)]


def test_an_answer_over_the_allowance_keeps_whole_batches_then_the_records_that_fit() -> None:
    small = encode_batch([RecordData(b"a" * 100)] * 3, base_offset=0)  # offsets 0..2
    big = encode_batch([RecordData(b"b" * 1000, b"k")] * 50, base_offset=3)  # 3..52, ~50 KB
    assert trim_to_allowance([small, big], 0, 10**9, 1 << 30) == [small, big]
    cut = trim_to_allowance([small, big], 0, len(small) + 5000, 1 << 30)
    assert cut[0] == small
    assert offsets_of(cut) == list(range(0, 3 + 4))  # four ~1 KB records of the big batch fit in 5000
    assert sum(len(b) for b in cut) <= len(small) + 5000 + 200
    assert [r.value for r in decode_records(cut[1])] == [b"b" * 1000] * 4  # re-encoded, CRC valid
    from_middle = trim_to_allowance([big], 10, 0, 1 << 30)  # nothing left: still one record, from the asked offset
    assert offsets_of(from_middle) == [10]


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=40),
    per_batch=st.integers(1, 10),
    allowance=st.integers(0, 60_000),
    start=st.integers(0, 39),
)
def test_trimmed_answers_start_at_the_offset_stay_contiguous_and_within_the_allowance(
    sizes: list[int], per_batch: int, allowance: int, start: int
) -> None:
    batches: list[bytes | bytearray] = []
    for first in range(0, len(sizes), per_batch):
        chunk = [RecordData(b"x" * n) for n in sizes[first : first + per_batch]]
        batches.append(encode_batch(chunk, base_offset=first))
    start = min(start, len(sizes) - 1)
    holding = [b for b in batches if read_header(b).base_offset + read_header(b).record_count > start]
    cut = trim_to_allowance(holding, start, allowance, 1 << 30)
    wanted = [o for o in offsets_of(cut) if o >= start]
    assert wanted and wanted[0] == start and wanted == list(range(start, start + len(wanted)))
    total = sum(len(b) for b in cut)
    assert total <= allowance + 100 or len(wanted) == 1 or total == len(holding[0])


# ---------------------------------------------------------------- tenant isolation: grants, caps, pruning, sign-out


def test_a_tenants_grant_covers_only_its_own_topics_and_dies_with_the_topic() -> None:
    acme, globex = Principal("acme", "a1"), Principal("globex", "g1")
    state = state_with("acme", "globex", "initech").grant("orders", "globex", ("consume",), grantor="acme")
    state = state.grant("logs.*", "globex", ("consume",))  # the admin's pattern: no grantor
    assert actions_on(globex, state, "orders", "acme") == {"consume"}
    # The name re-created by another tenant (a deletion that did not get to the grant): the grant is acme's.
    assert actions_on(globex, state, "orders", "initech") == frozenset()
    assert hidden("orders", actions_on(globex, state, "orders", "initech"))
    assert not hidden("orders", actions_on(globex, state, "orders", "acme"))
    assert not hidden("__talos_audit", actions_on(acme, state, "__talos_audit", None))  # no secret: 403
    forgotten = state.forget_topic_grants("orders")
    assert [g.topic for g in forgotten.grants] == ["logs.*"]  # the pattern names no one topic: it stays
    assert forgotten.forget_topic_grants("orders") is forgotten
    assert [g.grantor for g in state.revoke("orders", "globex", ("admin",)).grants] == ["acme", None]
    assert SecurityState.from_json(state.to_json()) == state
    legacy = state.to_json()
    for entry in legacy["grants"]:  # type: ignore[attr-defined]
        del entry["grantor"]
    assert all(g.grantor is None for g in SecurityState.from_json(legacy).grants)
    assert state.delete_tenant("acme").grants == tuple(g for g in state.grants if g.grantor is None)


def test_authorization_answers_follow_every_change_of_the_state() -> None:
    """The answers kept per (principal, topic) are dropped with the state they were read from: a revocation
    refuses the next request, a new grant allows it, the topic's owner is still told by the topic."""
    security = Security(ServerConfig(auth="on", admin_token="admin-secret"), None, None, None)  # type: ignore[arg-type]
    globex = Principal("globex", "g1")
    orders = TopicConfig(name="orders", partitions=1, tenant="acme")
    security.state = state_with("acme", "globex").grant("orders", "globex", ("produce",), grantor="acme")
    security.authorize(globex, orders, "produce")
    security.authorize(globex, orders, "produce")  # the kept answer
    with pytest.raises(ApiError) as refused:
        security.authorize(globex, orders, "consume")
    assert refused.value.status == 403
    security.state = security.state.revoke("orders", "globex")
    with pytest.raises(ApiError) as hidden_now:
        security.authorize(globex, orders, "produce")
    assert hidden_now.value.status == 404  # may do nothing: told the topic does not exist
    security.state = security.state.grant("orders", "globex", ("consume",), grantor="acme")
    security.authorize(globex, orders, "consume")
    with pytest.raises(ApiError):
        security.authorize(globex, dataclasses.replace(orders, tenant="initech"), "consume")  # the name re-created


def test_a_verified_token_is_known_until_the_state_changes_and_only_the_whole_token() -> None:
    """A token's hash is checked once per security state: the same token is then known without it, a revocation
    (a new state) makes it unknown at once, and a token with the same id but another secret is never taken for
    it."""
    security = Security(ServerConfig(auth="on", admin_token="admin-secret"), None, None, None)  # type: ignore[arg-type]
    token, token_id, digest = new_token()
    security.state = state_with("acme").add_token(TokenRecord(token_id, "acme", digest, "", 1))
    bearer = {"authorization": f"Bearer {token}"}
    first = security.authenticate_now(bearer)
    assert first == Principal("acme", token_id)
    assert security.authenticate_now(bearer) is first  # from what was verified
    parsed = parse_token(token)
    assert parsed is not None
    secret = parsed[1]
    forged = token[: -len(secret)] + "x" * len(secret)  # the same id, another secret
    assert parse_token(forged) == (token_id, "x" * len(secret))
    with pytest.raises(ApiError) as refused:
        security.authenticate_now({"authorization": f"Bearer {forged}"})
    assert refused.value.status == 401
    security.state = security.state.revoke_token(token_id)
    assert security.authenticate_now(bearer) is None  # unknown to this state: the full path re-reads, then 401


def test_a_tenant_has_at_most_50_tokens_and_20_pending_requests() -> None:
    state = state_with("acme", "globex")
    for index in range(MAX_TOKENS_PER_TENANT):
        state = state.add_token(TokenRecord(f"a{index}", "acme", "h", "", 1))
    with pytest.raises(ApiError) as error:
        state.add_token(TokenRecord("one-more", "acme", "h", "", 1))
    assert (error.value.status, error.value.code) == (409, "TOO_MANY_TOKENS")
    state = state.add_token(TokenRecord("g", "globex", "h", "", 1))  # another tenant's count is its own
    state = state.revoke_token("a0").add_token(TokenRecord("again", "acme", "h", "", 1))  # room after a revoke

    def ask(tenant: str, status: str = "pending") -> QuotaRequest:
        return QuotaRequest(0, tenant, None, "partitions", None, 10, "", status, "", "", 1)

    for _ in range(MAX_PENDING_REQUESTS_PER_TENANT):
        state = state.add_request(ask("acme"))
    with pytest.raises(ApiError) as error:
        state.add_request(ask("acme"))
    assert (error.value.status, error.value.code) == (409, "TOO_MANY_PENDING_REQUESTS")
    state = state.add_request(ask("acme", "rejected")).add_request(ask("globex"))  # decided ones and others'
    state = state.decide(1, "rejected", "no", "admin", 2).add_request(ask("acme"))  # a decision makes room


def test_decided_requests_beyond_the_newest_20_of_a_tenant_leave_the_document() -> None:
    state = state_with("acme", "globex")
    pending = QuotaRequest(0, "acme", None, "partitions", None, 10, "", "pending", "", "", 1)
    state = state.add_request(pending).add_request(dataclasses.replace(pending, tenant="globex", status="approved"))
    for index in range(400):
        state = state.add_request(dataclasses.replace(pending, status="rejected", decided_ms=10 + index))
    keep = KEEP_DECIDED_REQUESTS_PER_TENANT
    acme = [r for r in state.requests if r.tenant == "acme"]
    assert [r.id for r in acme] == [1, *range(403 - keep, 403)]  # the pending one stays, and the newest
    assert [r.id for r in state.requests if r.tenant == "globex"] == [2]  # others' are untouched
    decided = state.decide(1, "approved", "ok", "admin", 10_000)  # the oldest id, decided last: it stays
    assert decided.request(1).status == "approved"
    assert [r.id for r in decided.requests if r.tenant == "acme"] == [1, *range(404 - keep, 403)]
    # Ids are never reused: the newest request is kept whatever its decision time.
    late = state.add_request(dataclasses.replace(pending, tenant="globex", status="rejected", decided_ms=0))
    assert max(r.id for r in late.requests) == 403
    assert len(orjson.dumps(state.to_json())) < 20_000


def test_signing_out_voids_the_sessions_of_that_token_issued_until_then() -> None:
    signer = SessionSigner("key", "")
    cookie, session = signer.issue("a1", "acme", now=1000.0)
    other_cookie, _ = signer.issue("b1", "acme", now=1000.0)
    read = signer.read(cookie, now=1001.0)
    assert read is not None and read.issued_ms == 1_000_000
    state = state_with("acme").sign_out("a1", 1_000_500, 8 * 3600_000)
    assert read.ended(state.signed_out)
    other = signer.read(other_cookie, now=1001.0)
    assert other is not None and not other.ended(state.signed_out)
    _, later = signer.issue("a1", "acme", now=1001.0)  # signing in again starts a new session
    assert not later.ended(state.signed_out)
    # Entries older than a session's lifetime void nothing alive: dropped as others sign out.
    assert set(state.sign_out("b1", 1_000_500 + 8 * 3600_000, 8 * 3600_000).signed_out) == {"b1"}
    assert SecurityState.from_json(state.to_json()) == state
    assert "a1" not in state.add_token(TokenRecord("a1", "acme", "h", "", 1)).revoke_token("a1").signed_out
    assert session.issued_ms == 1_000_000


@pytest.mark.parametrize(
    ("resource", "value"),
    [("produce_bytes_per_s", 999.0), ("fetch_bytes_per_s", 1e-3), ("requests_per_s", 5e-324), ("partitions", 0)],
)
def test_a_quota_below_its_bound_is_refused(resource: str, value: float) -> None:
    """A byte bucket holds a request for debt / rate: a rate near zero is an outage, not a limit."""
    with pytest.raises(ApiError) as raised:
        state_with("acme").set_quota("acme", None, {resource: value})
    assert raised.value.status == 400
