"""The transaction APIs: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit, WriteTxnMarkers and the
admin views (DescribeTransactions, ListTransactions, DescribeProducers), on the transaction coordinator
(``server.transactions.coordinator``) that REST's ``/v1/transactions`` uses too.

A transactional id belongs to the connection's tenant (the coordinator keeps ids per tenant), and this server
answers only for the ids whose ``__transaction_state`` partition it owns: any other gets NOT_COORDINATOR, and the
client asks FindCoordinator again (rather than this server forwarding, which REST does: a Kafka client already
routes by coordinator). A transaction may take only partitions its tenant may produce to, and the offsets of a
group its tenant may use, exactly as on REST.

What a client sees depends on its request's version: a client older than Kafka 2.7's protocol does not know
PRODUCER_FENCED (90) and is told INVALID_PRODUCER_EPOCH (47), which it treats as fenced too. EndTxn ends a
transaction without bumping the epoch (TV1: we serve no EndTxn v5, so no client expects a new epoch back).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from server.broker import NotOwnerError
from server.errors import ApiError
from server.groups.coordinator import validate_group_name
from server.groups.offsets import OFFSETS_TOPIC, offsets_partition
from server.kafka.context import Context
from server.kafka.failures import error_code
from server.kafka.groups import CommitItems, commit_offsets, commit_refused, group_here
from server.kafka.protocol.errors import ErrorCode
from server.messaging.authorization import authorize_message, may_use_group
from server.messaging.caller import SERVERS
from server.messaging.markers import write_marker
from server.transactions.coordinator import validate_transactional_id
from server.transactions.state import TxnStatus
from talos._control import ControlType, Marker

__all__ = [
    "add_offsets_to_txn",
    "add_partitions_to_txn",
    "describe_producers",
    "describe_transactions",
    "end_txn",
    "list_transactions",
    "transaction_error",
    "txn_offset_commit",
    "write_txn_markers",
]

# The first version of each API whose clients know PRODUCER_FENCED (KIP-588); older ones get INVALID_PRODUCER_EPOCH.
FENCED_FROM: dict[int, int] = {22: 4, 24: 2, 25: 2, 26: 2}
_STATES = frozenset(status.value for status in TxnStatus)


def transaction_error(error: Exception, api_key: int, version: int) -> ErrorCode:
    """The Kafka code of a transaction coordinator's refusal for this request's version."""
    if isinstance(error, NotOwnerError):  # the id's state partition moved away since we looked
        return ErrorCode.NOT_COORDINATOR
    code = error_code(error, denied=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if isinstance(error, ApiError) and error.code == "PRODUCER_FENCED":
        fenced_from = FENCED_FROM.get(api_key)
        return ErrorCode.PRODUCER_FENCED if fenced_from is not None and version >= fenced_from else code
    if isinstance(error, ApiError) and error.code == "NOT_REGISTERED":
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return code


def _tenant(ctx: Context) -> str | None:
    """Whose ids the connection names (the coordinator keeps everyone's under no tenant with auth off)."""
    return ctx.session.principal.tenant


async def coordinator_here(ctx: Context, transactional_id: str) -> ErrorCode:
    """NONE when this server coordinates the id now; else what to answer (the client finds it again)."""
    try:
        validate_transactional_id(transactional_id)
    except ApiError:
        return ErrorCode.INVALID_REQUEST
    try:
        owner = await ctx.transactions.owner(_tenant(ctx), transactional_id)
    except ApiError:  # no server in the ring yet, or the state topic cannot be made yet
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return ErrorCode.NONE if owner.local else ErrorCode.NOT_COORDINATOR


def _partition_refusal(ctx: Context, topic: str, index: int) -> ErrorCode:
    """NONE if the connection may put the partition in a transaction (it exists, and it may produce to it)."""
    try:
        authorize_message(ctx.broker, ctx.session.principal, topic, "produce")
        ctx.broker.check_partition(topic, index)
    except ApiError as exc:
        return error_code(exc)
    return ErrorCode.NONE


def _topic_results(partitions: Iterable[tuple[str, int, int]]) -> list[dict[str, Any]]:
    """(topic, partition, code) → AddPartitionsToTxn's per-topic results."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, index, code in partitions:
        topics.setdefault(topic, []).append({"partition_index": index, "partition_error_code": code})
    return [{"name": name, "results_by_partition": parts} for name, parts in topics.items()]


def _wanted(topics: list[dict[str, Any]] | None) -> list[tuple[str, int]]:
    return list(dict.fromkeys((t["name"], p) for t in topics or [] for p in t.get("partitions") or []))


# ---------------------------------------------------------------------------------------------------- the producer's


async def add_partitions_to_txn(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """v0-3: a producer adds partitions before it writes to them, all or nothing. v4: a broker asks whether
    partitions are in a transaction (``verify_only``; the KIP-890 part 1 check), which only the admin may."""
    version = ctx.header.api_version
    if version >= 4:
        return await _add_partitions_batched(ctx, body)
    codes = await _add_partitions(
        ctx,
        body["v3_and_below_transactional_id"],
        body["v3_and_below_producer_id"],
        body["v3_and_below_producer_epoch"],
        _wanted(body.get("v3_and_below_topics")),
    )
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _topic_results(codes)}


async def _add_partitions(
    ctx: Context,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    wanted: list[tuple[str, int]],
) -> list[tuple[str, int, int]]:
    """Add ``wanted`` to the transaction; each partition's code. Kafka's rule: an unknown or forbidden
    partition fails the request, the others answer OPERATION_NOT_ATTEMPTED and nothing is added; a
    coordinator's refusal applies to every partition."""
    here = await coordinator_here(ctx, transactional_id)
    if here != ErrorCode.NONE:
        return [(t, p, here) for t, p in wanted]
    refusals: dict[tuple[str, int], ErrorCode] = {}
    for topic, index in wanted:
        code = _partition_refusal(ctx, topic, index)
        if code != ErrorCode.NONE:
            refusals[(topic, index)] = code
    if refusals:
        return [(t, p, refusals.get((t, p), ErrorCode.OPERATION_NOT_ATTEMPTED)) for t, p in wanted]
    try:
        await ctx.transactions.add_partitions(_tenant(ctx), transactional_id, producer_id, producer_epoch, wanted)
    except (ApiError, NotOwnerError) as exc:
        code = transaction_error(exc, ctx.header.api_key, ctx.header.api_version)
        return [(t, p, code) for t, p in wanted]
    return [(t, p, ErrorCode.NONE) for t, p in wanted]


async def _add_partitions_batched(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """The broker-to-coordinator form (v4): Kafka authorizes it as a cluster action, so only the admin (with
    auth on) may; ids are then the admin's. A verification answers per partition whether it is in the open
    transaction (TRANSACTION_ABORTABLE if not); an add is as v0-3's."""
    transactions = body.get("transactions") or []
    if ctx.broker.security.enabled and not ctx.session.principal.admin:
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "results_by_transaction": [],
        }
    results = []
    for txn in transactions:
        transactional_id = txn["transactional_id"]
        wanted = _wanted(txn.get("topics"))
        if txn.get("verify_only"):
            codes = await _verify(ctx, transactional_id, txn["producer_id"], txn["producer_epoch"], wanted)
        else:
            codes = await _add_partitions(ctx, transactional_id, txn["producer_id"], txn["producer_epoch"], wanted)
        results.append({"transactional_id": transactional_id, "topic_results": _topic_results(codes)})
    return {"throttle_time_ms": 0, "error_code": 0, "results_by_transaction": results}


async def _verify(
    ctx: Context, transactional_id: str, producer_id: int, producer_epoch: int, wanted: list[tuple[str, int]]
) -> list[tuple[str, int, int]]:
    here = await coordinator_here(ctx, transactional_id)
    if here != ErrorCode.NONE:
        return [(t, p, here) for t, p in wanted]
    out: list[tuple[str, int, int]] = []
    for topic, index in wanted:
        try:
            found = await ctx.transactions.verify(
                _tenant(ctx), transactional_id, producer_id, producer_epoch, (topic, index)
            )
            code = ErrorCode.NONE if found else ErrorCode.TRANSACTION_ABORTABLE
        except (ApiError, NotOwnerError) as exc:
            code = transaction_error(exc, ctx.header.api_key, ctx.header.api_version)
        out.append((topic, index, code))
    return out


async def add_offsets_to_txn(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """A producer will commit a group's offsets in its transaction: the group's ``__consumer_offsets``
    partition joins the transaction, so the transaction's marker settles the offsets committed in it."""
    transactional_id, group = body["transactional_id"], body["group_id"]
    code = await coordinator_here(ctx, transactional_id)
    if code == ErrorCode.NONE:
        code = await _add_group(ctx, transactional_id, body["producer_id"], body["producer_epoch"], group)
    return {"throttle_time_ms": 0, "error_code": code}


async def _add_group(
    ctx: Context, transactional_id: str, producer_id: int, producer_epoch: int, group: str
) -> ErrorCode:
    try:
        validate_group_name(group)
    except ApiError:
        return ErrorCode.INVALID_GROUP_ID
    broker = ctx.broker
    try:
        await may_use_group(broker.security, ctx.session.principal, group, "tenant")
    except ApiError:
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    offsets = (OFFSETS_TOPIC, offsets_partition(group, broker.config.group_offsets_partitions))
    try:
        await ctx.transactions.add_partitions(_tenant(ctx), transactional_id, producer_id, producer_epoch, [offsets])
    except (ApiError, NotOwnerError) as exc:
        return transaction_error(exc, ctx.header.api_key, ctx.header.api_version)
    return ErrorCode.NONE


async def end_txn(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """Commit or abort: answered once the decision is durable (its markers written, or being written: the id
    answers CONCURRENT_TRANSACTIONS until they are). The epoch stays (TV1); a retry finding its transaction
    complete is answered as done."""
    transactional_id = body["transactional_id"]
    code = await coordinator_here(ctx, transactional_id)
    if code == ErrorCode.NONE:
        try:
            await ctx.transactions.end(
                _tenant(ctx),
                transactional_id,
                body["producer_id"],
                body["producer_epoch"],
                commit=bool(body["committed"]),
                bump=False,
            )
        except (ApiError, NotOwnerError) as exc:
            code = transaction_error(exc, ctx.header.api_key, ctx.header.api_version)
    return {"throttle_time_ms": 0, "error_code": code}


async def txn_offset_commit(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """Offsets committed in a transaction, at the group's coordinator: held pending until the transaction's
    marker reaches the group's offsets partition (then committed, or dropped on abort). v3+ carries the
    member's generation, checked as for OffsetCommit (a zombie member of an older generation is refused)."""
    topics = body.get("topics") or []
    try:
        validate_transactional_id(body["transactional_id"])
    except ApiError:
        return commit_refused(topics, ErrorCode.INVALID_REQUEST)
    group = await group_here(ctx, body["group_id"])
    if isinstance(group, ErrorCode):
        return commit_refused(topics, group)
    if ctx.header.api_version >= 3:
        member_id, generation = body.get("member_id") or "", body.get("generation_id", -1)
        check = group.check_commit(time.monotonic(), member_id, generation)
        if check:
            return commit_refused(topics, check)

    async def in_transaction(items: CommitItems) -> object:
        return await ctx.coordinator.commit_in_transaction(
            group.name,
            None,
            items,
            producer_id=body["producer_id"],
            producer_epoch=body["producer_epoch"],
            transactional_id=body["transactional_id"],
            tenant=_tenant(ctx),
        )

    return await commit_offsets(ctx, group, topics, in_transaction)


# ---------------------------------------------------------------------------------------------------- the coordinator's


async def write_txn_markers(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """Markers written by an administrator (``kafka-transactions.sh abort`` closes a hanging transaction with
    one). Our own coordinators write theirs through the services, never through this API, so with auth on it
    is the admin's alone; a partition still refuses a marker from an older epoch or coordinator than it has
    seen, so a stale one cannot decide a newer transaction."""
    admin = not ctx.broker.security.enabled or ctx.session.principal.admin
    results = []
    for entry in body.get("markers") or []:
        kind = ControlType.COMMIT if entry["transaction_result"] else ControlType.ABORT
        marker = Marker(entry["producer_id"], entry["producer_epoch"], kind, entry["coordinator_epoch"])
        topics = []
        for topic in entry.get("topics") or []:
            parts = []
            for index in topic.get("partition_indexes") or []:
                code = (
                    await _write_marker(ctx, topic["name"], index, marker)
                    if admin
                    else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                )
                parts.append({"partition_index": index, "error_code": code})
            topics.append({"name": topic["name"], "partitions": parts})
        results.append({"producer_id": entry["producer_id"], "topics": topics})
    return {"markers": results}


async def _write_marker(ctx: Context, topic: str, index: int, marker: Marker) -> ErrorCode:
    try:
        ctx.broker.check_partition(topic, index)
        await write_marker(ctx.broker, SERVERS, topic, index, marker)
    except ApiError as exc:
        return error_code(exc)
    return ErrorCode.NONE


# ---------------------------------------------------------------------------------------------------- admin views


async def describe_transactions(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """The connection's tenant's ids that this server coordinates: state, producer, partitions."""
    answers = []
    for transactional_id in body.get("transactional_ids") or []:
        answer: dict[str, Any] = {
            "error_code": ErrorCode.NONE,
            "transactional_id": transactional_id,
            "transaction_state": "",
            "transaction_timeout_ms": 0,
            "transaction_start_time_ms": -1,
            "producer_id": -1,
            "producer_epoch": -1,
            "topics": [],
        }
        code = await coordinator_here(ctx, transactional_id)
        if code == ErrorCode.NONE:
            try:
                state = await ctx.transactions.describe(_tenant(ctx), transactional_id)
            except (ApiError, NotOwnerError) as exc:
                code = transaction_error(exc, ctx.header.api_key, ctx.header.api_version)
            else:
                partitions: dict[str, list[int]] = {}
                for part in state["partitions"]:
                    partitions.setdefault(part["topic"], []).append(part["partition"])
                answer.update(
                    transaction_state=state["state"],
                    transaction_timeout_ms=state["timeout_ms"],
                    transaction_start_time_ms=state["start_ms"],
                    producer_id=state["producer_id"],
                    producer_epoch=state["producer_epoch"],
                    topics=[{"topic": t, "partitions": p} for t, p in partitions.items()],
                )
        answer["error_code"] = code
        answers.append(answer)
    return {"throttle_time_ms": 0, "transaction_states": answers}


async def list_transactions(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """The ids this server coordinates (the admin client asks every broker): the connection's tenant's, or
    everyone's for the admin; filtered by state, producer id and (v1) how long the transaction has run."""
    wanted_states = set(body.get("state_filters") or [])
    unknown = sorted(wanted_states - _STATES)
    producer_ids = set(body.get("producer_id_filters") or [])
    duration = body.get("duration_filter", -1)
    now_ms = int(time.time() * 1000)
    tenant = _tenant(ctx) if ctx.broker.security.enabled else None
    found = []
    for state in ctx.transactions.coordinated(tenant):
        if wanted_states and state["state"] not in wanted_states:
            continue
        if producer_ids and state["producer_id"] not in producer_ids:
            continue
        if duration >= 0 and (state["start_ms"] < 0 or now_ms - state["start_ms"] <= duration):
            continue
        found.append(
            {
                "transactional_id": state["transactional_id"],
                "producer_id": state["producer_id"],
                "transaction_state": state["state"],
            }
        )
    return {"throttle_time_ms": 0, "error_code": 0, "unknown_state_filters": unknown, "transaction_states": found}


async def describe_producers(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """The producers a partition knows (its owner answers): epoch, last sequence, the coordinator epoch of its
    last marker, and where its open transaction starts (-1: none; otherwise, if no coordinator knows of it, a
    hanging transaction that WriteTxnMarkers can close)."""
    topics = []
    for topic in body.get("topics") or []:
        parts = [await _producers_of(ctx, topic["name"], index) for index in topic.get("partition_indexes") or []]
        topics.append({"name": topic["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


async def _producers_of(ctx: Context, topic: str, index: int) -> dict[str, Any]:
    answer: dict[str, Any] = {"partition_index": index, "error_code": 0, "error_message": None, "active_producers": []}
    try:
        authorize_message(ctx.broker, ctx.session.principal, topic, "fetch")
        loaded = await ctx.broker.partition(topic, index)
    except NotOwnerError as exc:
        answer.update(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, error_message=f"served by {exc.owner.server_id}")
        return answer
    except ApiError as exc:
        answer.update(error_code=error_code(exc), error_message=exc.message)
        return answer
    transactions = loaded.transactions
    answer["active_producers"] = [
        {
            "producer_id": producer_id,
            "producer_epoch": epoch,
            "last_sequence": last_sequence,
            "last_timestamp": -1,  # not kept per producer
            "coordinator_epoch": transactions.coordinator_epochs.get(producer_id, -1),
            "current_txn_start_offset": transactions.open.get(producer_id, -1),
        }
        for producer_id, epoch, last_sequence in loaded.producers.described()
    ]
    return answer
