"""The operations console's topics pages (issue 41), on the portal's router: the topics a principal may see,
one topic's settings and partitions, and a partition's messages.

Every page asks the services what the REST API asks them, with the signed-in principal: the list keeps the
topics ``topic_service.visible`` lets it see (REST's list), a topic's page and its messages answer 404 as
for an unknown name unless ``topic_service.readable_topic`` gives the topic (REST's describe), reading
needs ``authorize_message(..., "fetch")`` and producing ``authorize_message(..., "produce")`` (REST's fetch
and produce), and creating, changing and deleting go through ``topic_service``, which checks and audits
them. Messages are read with the services' fetch (``fetch_batches``) and written with their produce
(``produce_records``), as the tenant: within its quotas and metered to it.

The list stays cheap with thousands of topics: the configurations the broker holds in memory, and rates
from this server's in-memory usage history (``broker.history``, fed every metering interval); no storage or
ZooKeeper call per topic. Offsets and sizes are only on a topic's own page.

The pages are server-rendered with no script: forms post with the session's CSRF nonce, and an error a
form meets is shown on the page it came from (``ApiError.message``).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from starlette.responses import RedirectResponse, Response

from fencing import OffsetOutOfRangeError
from metering.store import MINUTE_MS, Window
from server.broker import Broker, NotOwnerError
from server.errors import ApiError, out_of_range
from server.messaging import topics as topic_service
from server.messaging.authorization import authorize_message
from server.messaging.caller import SERVERS, Caller, for_tenant
from server.messaging.fetch import decompression_limit, fetch_batches
from server.messaging.offsets import offsets
from server.messaging.produce import produce_records
from server.portal.pages import _broker, _check_csrf, _form, _principal, _render, _sentence, _session, _to_login, router
from server.portal.session import Session
from server.schemas.coordinator import SchemaCoordinator
from server.schemas.state import Registry
from server.security.access import Principal, actions_on
from server.topic_configs import CLEANUP_POLICIES
from server.topics import TopicConfig
from talos import BatchError, Record, RecordData, decode_batches, partition_for_key

__all__ = [
    "DURATION_UNITS",
    "SIZE_UNITS",
    "Shown",
    "avro_json",
    "parse_amount",
    "parse_headers",
    "parse_time",
    "readable_duration",
    "readable_rate",
    "readable_size",
    "render_value",
    "schema_id_of",
    "split_amount",
]

PAGE = 50  # messages a page shows
KEY_SCAN = 5_000  # offsets a page with a key filter looks through at most
_FETCH_BYTES = 1024 * 1024  # one fetch's stored bytes
_PAGE_BYTES = 16 * 1024 * 1024  # one page's fetches in all: a key filter over large messages stops here
_DECOMPRESSED = 8 * 1024 * 1024  # a batch decompressed for a page at most (decompression_limit bounds it too)
_HEX_BYTES = 256
_RATE_SPAN_MS = 5 * MINUTE_MS

DURATION_UNITS: Mapping[str, int] = {"ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
SIZE_UNITS: Mapping[str, int] = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}
_DONE = {"created": "Topic created.", "updated": "Settings saved.", "deleted": "Topic deleted."}


# ---------------------------------------------------------------- pure helpers: what a person reads


def _figure(value: float) -> str:
    """``7``, ``1.5``, ``12.3``: at most one decimal, none when whole."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _largest_first(units: Mapping[str, int]) -> list[tuple[str, int]]:
    return sorted(units.items(), key=lambda unit: unit[1], reverse=True)


def _readable(amount: int | None, units: Mapping[str, int], none: str) -> str:
    if amount is None:
        return none
    unit = next((name for name, size in _largest_first(units) if amount >= size), next(iter(units)))
    return f"{_figure(amount / units[unit])} {unit}"


def readable_duration(ms: int | None) -> str:
    """A retention time as a person reads it: ``7 d``, ``1.5 h``, ``unlimited`` (None: records never expire)."""
    return _readable(ms, DURATION_UNITS, "unlimited")


def readable_size(size: int | None) -> str:
    """A size in binary units: ``1 GiB``, ``1.5 KiB``, ``unlimited`` (None: no size limit)."""
    return _readable(size, SIZE_UNITS, "unlimited")


def readable_rate(per_s: float | None, unit: str) -> str:
    """``1.5 KiB/s`` for bytes, ``12 msg/s`` for messages; ``—`` for no figure."""
    if per_s is None:
        return "—"
    if unit == "B":
        return f"{_readable(int(per_s), SIZE_UNITS, '')}/s"
    return f"{_figure(per_s)} {unit}/s"


def split_amount(amount: int | None, units: Mapping[str, int]) -> tuple[str, str]:
    """A form's number and unit for ``amount``: the largest unit it is a whole number of (``("7", "d")``);
    ``("", <largest unit>)`` for None (a blank field: unlimited)."""
    largest_first = _largest_first(units)
    if amount is None:
        return "", largest_first[0][0]
    for name, size in largest_first:
        if amount % size == 0 and amount >= size:
            return str(amount // size), name
    return str(amount), next(iter(units))


def parse_amount(number: str, unit: str, units: Mapping[str, int], what: str) -> int | None:
    """A form's number and unit as an integer of the smallest unit; None for a blank number (unlimited).
    ``1.5`` ``h`` is 5400000; 400 naming ``what`` for anything else."""
    text = number.strip().replace(",", "").replace("_", "")
    if not text:
        return None
    if unit not in units:
        raise ApiError(400, "INVALID_REQUEST", f"{what}: unknown unit {unit[:20]!r}")
    try:
        value = float(text)
    except ValueError:
        raise ApiError(400, "INVALID_REQUEST", f"{what} must be a number, not {text[:40]!r}") from None
    if not 0 <= value < 2**63 / units[unit]:
        raise ApiError(400, "INVALID_REQUEST", f"{what} must be zero or more")
    return round(value * units[unit])


def parse_headers(text: str) -> tuple[tuple[str, bytes], ...]:
    """Headers typed as ``name=value`` lines (blank lines skipped; the value may hold ``=`` and be empty)."""
    headers: list[tuple[str, bytes]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, equals, value = line.partition("=")
        if not equals or not name.strip():
            raise ApiError(400, "INVALID_REQUEST", f"header line {number}: write name=value")
        headers.append((name.strip(), value.encode()))
    return tuple(headers)


def parse_time(text: str) -> int:
    """A time typed in the browse form as ms since the epoch: ms as a number, or an ISO date and time
    (``2024-05-01 12:00:00``, ``2024-05-01T12:00Z``), in UTC unless it names its offset."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ApiError(400, "INVALID_REQUEST", "time: write it as 2024-05-01 12:00:00 (UTC) or in ms") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0, int(moment.timestamp() * 1000))


def clock(ms: int) -> str:
    """``2024-05-01 12:00:00.123 UTC``."""
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d} UTC"


@dataclass(frozen=True, slots=True)
class Shown:
    """A key, value or header as a page shows it: ``kind`` says how ``text`` was made (``null``, ``text``,
    ``json`` pretty-printed, ``avro`` decoded to JSON, or ``hex`` of the first bytes); ``length`` is the bytes'
    count; ``schema_id`` the id of Confluent's framing, when the bytes carry one."""

    kind: str
    text: str
    length: int
    schema_id: int | None = None

    @property
    def truncated(self) -> bool:
        return self.kind == "hex" and self.length > _HEX_BYTES


def schema_id_of(data: bytes | None) -> int | None:
    """The schema id of a value in Confluent's framing (magic byte 0, a 4-byte big-endian id, then the
    payload), or None. Any bytes that start so look framed: the registry decides whether the id is known."""
    if data is None or len(data) < 5 or data[0] != 0:
        return None
    return int.from_bytes(data[1:5], "big")


def _printable(text: str) -> bool:
    return all(c.isprintable() or c in "\n\r\t" for c in text)


def render_value(data: bytes | None) -> Shown:
    """How a page shows stored bytes, decided per value: a JSON object or array pretty-printed; other valid,
    printable UTF-8 as text; anything else as hex of at most 256 bytes (with the length, and the schema id
    if the bytes are in Confluent's framing)."""
    if data is None:
        return Shown("null", "null", 0)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and _printable(text):
        if text.lstrip()[:1] in ("{", "["):
            with contextlib.suppress(ValueError):
                parsed = json.loads(text)
                if isinstance(parsed, dict | list):
                    return Shown("json", json.dumps(parsed, indent=2, ensure_ascii=False), len(data))
        return Shown("text", text, len(data))
    return Shown("hex", data[:_HEX_BYTES].hex(" "), len(data), schema_id_of(data))


def _json_default(value: object) -> object:
    if isinstance(value, bytes | bytearray):
        return value.hex()
    return str(value)  # decimals, dates, UUIDs of Avro's logical types


def avro_json(schema_text: str, payload: bytes) -> str:
    """An Avro value (the payload after Confluent's 5-byte framing) decoded with the writer's schema, as
    pretty JSON; raises if the schema does not parse or the payload does not decode. fastavro is imported
    here: only a page that meets Avro needs it."""
    import fastavro

    schema = fastavro.parse_schema(json.loads(schema_text))
    reader = io.BytesIO(payload)
    value = fastavro.schemaless_reader(reader, schema, None)
    if reader.tell() != len(payload):
        raise ValueError(f"{len(payload) - reader.tell()} bytes left over after the value")
    return json.dumps(value, indent=2, ensure_ascii=False, default=_json_default)


def _header_text(value: bytes | None) -> str:
    shown = render_value(value)
    if shown.kind == "hex":
        return f"hex {shown.text}{' …' if shown.truncated else ''} ({shown.length} bytes)"
    return shown.text


# ---------------------------------------------------------------- shared by the pages


def _error_page(session: Session, error: ApiError) -> Response:
    """An error that ends a page (an unknown topic: 404, also for another tenant's), with the navigation."""
    message = _sentence(error.message)
    return _render("error.html", error.status, session=session, status=error.status, code=error.code, message=message)


def _actions(broker: Broker, who: Principal, config: TopicConfig) -> frozenset[str]:
    """What ``who`` may do with the topic (every action with auth off), to offer only the forms it may use."""
    if not broker.security.enabled:
        return frozenset(("produce", "consume", "admin"))
    return actions_on(who, broker.security.state, config.name, config.tenant)


def _caller(session: Session) -> Caller:
    """Reads and writes as the signed-in tenant (its quotas, its metering); the admin's as the servers'."""
    return for_tenant(session.tenant)


def _int(text: str, what: str, default: int | None = None) -> int:
    text = text.strip()
    if not text and default is not None:
        return default
    if not text.isdigit():
        raise ApiError(400, "INVALID_REQUEST", f"{what} must be a whole number")
    return int(text)


def _settings_of(form: Mapping[str, str]) -> dict[str, object]:
    """Retention and cleanup policy as the create and change forms post them (blank retention: unlimited)."""
    settings: dict[str, object] = {
        "retention_ms": parse_amount(
            form.get("retention_time", ""), form.get("retention_time_unit", "d"), DURATION_UNITS, "retention time"
        ),
        "retention_bytes": parse_amount(
            form.get("retention_size", ""), form.get("retention_size_unit", "GiB"), SIZE_UNITS, "retention size"
        ),
    }
    if form.get("cleanup_policy"):
        settings["cleanup_policy"] = form["cleanup_policy"]
    return settings


def _retention_fields(config: TopicConfig | None) -> dict[str, str]:
    """The retention fields of a form, filled in with the topic's values (blank: unlimited)."""
    time_value, time_unit = split_amount(config.retention_ms if config else None, DURATION_UNITS)
    size_value, size_unit = split_amount(config.retention_bytes if config else None, SIZE_UNITS)
    return {
        "retention_time": time_value,
        "retention_time_unit": time_unit,
        "retention_size": size_value,
        "retention_size_unit": size_unit if config and config.retention_bytes is not None else "GiB",
        "cleanup_policy": config.cleanup_policy if config else "delete",
    }


# ---------------------------------------------------------------- the topics


@dataclass(frozen=True, slots=True)
class _Rates:
    bytes_in: float = 0.0
    messages_in: float = 0.0
    bytes_out: float = 0.0
    messages_out: float = 0.0


async def _rates(broker: Broker) -> tuple[dict[str, _Rates], float]:
    """Each topic's produce and consume rates over the last few minutes as this server served them (its
    in-memory usage history, one pass over it, on the I/O threads), and the seconds they average over."""
    now = int(time.time() * 1000)
    start = now - now % MINUTE_MS - _RATE_SPAN_MS + MINUTE_MS
    window = Window(start, now - now % MINUTE_MS + MINUTE_MS)
    seconds = max(1.0, (now - start) / 1000)

    def read() -> list[dict[str, object]]:
        return broker.history.usage_series(window, step_ms=_RATE_SPAN_MS)

    totals: dict[str, list[int]] = {}
    for row in await asyncio.get_running_loop().run_in_executor(broker.executor, read):
        into = totals.setdefault(str(row["topic"]), [0, 0, 0, 0])
        for index, name in enumerate(("bytes_in", "messages_in", "bytes_out", "messages_out")):
            into[index] += int(str(row[name]))
    return {topic: _Rates(*(n / seconds for n in counts)) for topic, counts in totals.items()}, seconds


async def _topics_page(
    request: Request, session: Session, internal: bool, *, error: str = "", form: Mapping[str, str] | None = None
) -> Response:
    broker = _broker(request)
    who = _principal(session)
    shown = [
        t
        for t in broker.list_topics()
        if (internal or not t.name.startswith("__")) and topic_service.visible(broker, who, t)
    ]
    rates, seconds = await _rates(broker)
    rows = []
    for t in shown:
        rate = rates.get(t.name, _Rates())
        rows.append(
            {
                "name": t.name,
                "tenant": t.tenant or "",
                "partitions": t.partitions,
                "retention_time": readable_duration(t.retention_ms),
                "retention_size": readable_size(t.retention_bytes),
                "cleanup_policy": t.cleanup_policy,
                "rate_in": f"{readable_rate(rate.bytes_in, 'B')} · {readable_rate(rate.messages_in, 'msg')}",
                "rate_out": f"{readable_rate(rate.bytes_out, 'B')} · {readable_rate(rate.messages_out, 'msg')}",
            }
        )
    state = broker.security.state if broker.security.enabled else None
    metering = broker.config.metering_interval_s
    return _render(
        "topics.html",
        400 if error else 200,
        session=session,
        topics=rows,
        internal=internal,
        error=error,
        done=_DONE.get(request.query_params.get("done", ""), ""),
        form={"name": "", "partitions": "1", "tenant": "", **_retention_fields(None), **(form or {})},
        policies=CLEANUP_POLICIES,
        duration_units=list(DURATION_UNITS),
        size_units=list(SIZE_UNITS),
        tenants=sorted(state.tenants) if state is not None and session.admin else [],
        rate_note=(
            f"Rates: the last {round(seconds / 60)} minutes as this server served them (its usage history, "
            f"updated every {metering:g} s)."
            if metering
            else "Rates: none (metering is off on this server)."
        ),
    )


@router.get("/topics")
async def topics_page(request: Request, internal: str = "") -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    return await _topics_page(request, session, internal == "1")


@router.post("/topics")
async def create_topic(request: Request) -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    form = await _form(request)
    _check_csrf(session, form)
    name = form.get("name", "").strip()
    try:
        partitions = _int(form.get("partitions", ""), "partitions", 1)
        settings = _settings_of(form)
        owner = (form.get("tenant") or None) if session.admin else None
        await topic_service.create_topic(_broker(request), _principal(session), name, partitions, settings, owner)
    except ApiError as exc:
        return await _topics_page(request, session, False, error=_sentence(exc.message), form=form)
    return RedirectResponse(f"/portal/topics/{name}?done=created", status_code=303)


# ---------------------------------------------------------------- a topic


async def _partition_rows(broker: Broker, config: TopicConfig) -> list[dict[str, object]]:
    """Each partition's owner, offsets (the offsets service's, as REST's describe asks them) and size (known
    only where it is loaded here: the log's segments in memory)."""

    async def row(index: int) -> dict[str, object]:
        try:
            answer = await offsets(broker, SERVERS, config.name, index)
        except ApiError:
            if broker.owns(config.name, index):
                raise
            answer = {}
        owner = broker.owner(config.name, index)
        loaded = broker.loaded_now(config.name, index)
        return {
            "partition": index,
            "owner": owner.server_id,
            "owner_url": owner.url,
            "earliest": answer.get("earliest", "?"),
            "latest": answer.get("latest", "?"),
            "last_stable": answer.get("last_stable", "?"),
            "size": readable_size(loaded.log.size_bytes) if loaded is not None else "not loaded here",
        }

    return list(await asyncio.gather(*(row(index) for index in range(config.partitions))))


def _settings_rows(config: TopicConfig) -> list[tuple[str, str]]:
    """The topic's settings in words, for its page."""
    default = "the server's default"
    most_lag = "any" if config.max_compaction_lag_ms is None else readable_duration(config.max_compaction_lag_ms)
    roll = [readable_duration(config.segment_ms)] if config.segment_ms is not None else []
    roll += [readable_size(config.segment_bytes)] if config.segment_bytes is not None else []
    flags = (("values", config.value_schema_validation), ("keys", config.key_schema_validation))
    checked = [name for name, on in flags if on]
    return [
        ("Owner", config.tenant or "nobody (internal, or made with auth off)"),
        ("Partitions", str(config.partitions)),
        ("Retention time", readable_duration(config.retention_ms)),
        ("Retention size (per partition)", readable_size(config.retention_bytes)),
        ("Cleanup policy", config.cleanup_policy),
        ("Compaction lag", f"{readable_duration(config.min_compaction_lag_ms)} to {most_lag}"),
        ("Tombstones kept", readable_duration(config.delete_retention_ms)),
        ("Segments roll at", " or ".join(roll) or default),
        ("Schema ids checked", ", ".join(checked) or "no"),
        ("Message trace", "off" if not config.trace_sample else f"1 message in {config.trace_sample}"),
        ("Created", clock(config.created_ms) if config.created_ms else "—"),
        ("Version", str(config.version)),
    ]


async def _topic_page(
    request: Request, session: Session, name: str, *, error: str = "", form: Mapping[str, str] | None = None
) -> Response:
    broker = _broker(request)
    who = _principal(session)
    try:
        config = topic_service.readable_topic(broker, who, name)
        partitions = await _partition_rows(broker, config)
    except ApiError as exc:
        return _error_page(session, exc)
    return _render(
        "topic.html",
        400 if error else 200,
        session=session,
        topic=config,
        settings=_settings_rows(config),
        partitions=partitions,
        actions=_actions(broker, who, config),
        error=error,
        done=_DONE.get(request.query_params.get("done", ""), ""),
        form={"partitions": str(config.partitions), **_retention_fields(config), **(form or {})},
        policies=CLEANUP_POLICIES,
        duration_units=list(DURATION_UNITS),
        size_units=list(SIZE_UNITS),
    )


@router.get("/topics/{name}")
async def topic_page(request: Request, name: str) -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    return await _topic_page(request, session, name)


@router.post("/topics/{name}/settings")
async def change_topic(request: Request, name: str) -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    form = await _form(request)
    _check_csrf(session, form)
    broker = _broker(request)
    who = _principal(session)
    try:
        current = topic_service.readable_topic(broker, who, name)
    except ApiError as exc:
        return _error_page(session, exc)
    try:
        asked: dict[str, Any] = {"partitions": _int(form.get("partitions", ""), "partitions", current.partitions)}
        asked.update(_settings_of(form))
        # Only what differs: the audit log's entry names what changed, and an unchanged field is no change.
        changes = {k: v for k, v in asked.items() if getattr(current, k) != v}
        if changes:
            await topic_service.update_topic(broker, who, name, changes)
    except ApiError as exc:
        return await _topic_page(request, session, name, error=_sentence(exc.message), form=form)
    return RedirectResponse(f"/portal/topics/{name}?done=updated", status_code=303)


@router.post("/topics/{name}/delete")
async def delete_topic(request: Request, name: str) -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    form = await _form(request)
    _check_csrf(session, form)
    broker = _broker(request)
    who = _principal(session)
    try:
        topic_service.readable_topic(broker, who, name)
    except ApiError as exc:
        return _error_page(session, exc)
    try:
        if form.get("confirm", "").strip() != name:
            raise ApiError(400, "INVALID_REQUEST", f"type the topic's name, {name}, to confirm; nothing was deleted")
        await topic_service.delete_topic(broker, who, name)
    except ApiError as exc:
        return await _topic_page(request, session, name, error=_sentence(exc.message))
    return RedirectResponse("/portal/topics?done=deleted", status_code=303)


# ---------------------------------------------------------------- messages


@dataclass
class _Message:
    offset: int
    timestamp: str
    key: Shown
    value: Shown
    headers: list[tuple[str, str]]
    trace: str
    note: str = ""


@dataclass
class _Browse:
    """What the browse form asked, checked."""

    partition: int
    mode: str  # offset, time, end
    offset: str = ""
    time: str = ""
    key: str = ""
    key_partition: int | None = None  # the partition the key's messages go to, when the key chose it
    messages: list[_Message] = field(default_factory=list)
    earliest: int = 0
    latest: int = 0
    start: int = 0
    next_offset: int | None = None
    previous_offset: int | None = None
    skipped: int = 0


def _decode(body: bytes, offset: int, limit: int) -> tuple[list[Record], int, int]:
    """A fetch's records from ``offset``, where the next fetch goes on from, and how many stored batches did
    not decode (stepped over, as REST's fetch steps over them). Control batches hold no messages."""
    records: list[Record] = []
    next_offset, skipped = offset, 0
    with contextlib.suppress(BatchError):  # an unreadable header ends the buffer
        for decoded in decode_batches(body, verify=False, max_decompressed=limit):
            header = decoded.header
            if header.next_offset <= offset:
                continue
            next_offset = max(next_offset, header.next_offset)
            if header.control:
                continue
            if decoded.error is not None:
                skipped += 1
                continue
            records.extend(r for r in decoded.records if r.offset >= offset)
    return records, next_offset, skipped


async def _read(
    broker: Broker, caller: Caller, topic: str, browse: _Browse, stop: int, keep_last: bool
) -> tuple[list[Record], int]:
    """Records from ``browse.start`` up to ``stop`` through the services' fetch (as REST's), with the key
    filter; at most a page of them (the last page's worth with ``keep_last``), and where reading stopped."""
    key = browse.key.encode() if browse.key else None
    limit = min(_DECOMPRESSED, decompression_limit(broker.config))
    found: list[Record] = []
    offset, read_bytes = browse.start, 0
    loop = asyncio.get_running_loop()
    while offset < stop and read_bytes < _PAGE_BYTES:
        try:
            fetched = await fetch_batches(broker, caller, topic, browse.partition, offset, _FETCH_BYTES)
        except OffsetOutOfRangeError as exc:  # retention moved the start meanwhile
            raise out_of_range(exc) from None
        if not fetched.body:
            break
        read_bytes += len(fetched.body)
        records, next_offset, skipped = await loop.run_in_executor(
            broker.executor, _decode, fetched.body, offset, limit
        )
        browse.skipped += skipped
        for record in records:
            if record.offset >= stop:
                break
            if key is None or record.key == key:
                found.append(record)
                if not keep_last and len(found) == PAGE:
                    return found, record.offset + 1
        if next_offset <= offset:
            break
        offset = min(next_offset, stop)
    return (found[-PAGE:] if keep_last else found), offset


async def _schemas(
    request: Request, who: Principal, config: TopicConfig, ids: set[int]
) -> dict[int, tuple[str, str] | str]:
    """For each schema id met: its (type, text), if the registry on this server knows it and ``who`` may read
    it (a subject of its own, or of this topic); else why not, in words."""
    if not ids:
        return {}
    broker = _broker(request)
    open_to_all = not broker.security.enabled or who.admin
    subjects = (f"{config.name}-value", f"{config.name}-key")

    def look(registry: Registry) -> dict[int, tuple[str, str] | str]:
        out: dict[int, tuple[str, str] | str] = {}
        for schema_id in ids:
            found = registry.schemas.get(schema_id)
            readable = found is not None and (
                open_to_all
                or any(
                    tenant == who.tenant or (tenant == config.tenant and v.subject in subjects)
                    for tenant, v in registry.uses_of(schema_id, deleted=True)
                )
            )
            if found is None or not readable:
                out[schema_id] = "not known to the registry"
            else:
                out[schema_id] = (found.type, found.schema)
        return out

    coordinator: SchemaCoordinator = request.app.state.schemas
    try:
        return await coordinator.read(look)
    except (NotOwnerError, ApiError):
        return dict.fromkeys(ids, "the registry is on another server")


async def _shown_messages(
    request: Request, who: Principal, config: TopicConfig, partition: int, records: list[Record]
) -> list[_Message]:
    values = [render_value(r.value) for r in records]
    schemas = await _schemas(request, who, config, {v.schema_id for v in values if v.schema_id is not None})
    out = []
    for record, rendered in zip(records, values, strict=True):
        value, note = rendered, ""
        if value.schema_id is not None:
            known = schemas[value.schema_id]
            if isinstance(known, tuple) and known[0] == "AVRO":
                try:
                    decoded = avro_json(known[1], (record.value or b"")[5:])
                    value = Shown("avro", decoded, value.length, value.schema_id)
                except Exception as exc:  # any failure to decode shows the bytes instead
                    note = f"does not decode with it: {type(exc).__name__}"
            elif isinstance(known, tuple):
                note = f"a {known[0]} schema: shown as bytes"
            else:
                note = known
        query = urlencode({"topic": config.name, "partition": partition, "offset": record.offset})
        out.append(
            _Message(
                record.offset,
                clock(record.timestamp),
                render_value(record.key),
                value,
                [(name, _header_text(data)) for name, data in record.headers],
                f"/portal/trace?{query}",
                note,
            )
        )
    return out


def _browse_of(config: TopicConfig, query: Mapping[str, str]) -> _Browse:
    """The browse form's fields, checked: the partition (a key's own, if only the key is given), the mode."""
    key = query.get("key", "")
    mode = query.get("from", "end")
    if mode not in ("offset", "time", "end"):
        mode = "end"
    text = query.get("partition", "").strip()
    key_partition = partition_for_key(key.encode(), config.partitions) if key and not text else None
    browse = _Browse(0, mode, query.get("offset", ""), query.get("time", ""), key, key_partition)
    if key_partition is not None:
        browse.partition = key_partition
    elif text:
        browse.partition = _int(text, "partition")
    if not 0 <= browse.partition < config.partitions:
        raise ApiError(404, "UNKNOWN_PARTITION", f"topic {config.name!r} has partitions 0..{config.partitions - 1}")
    return browse


async def _browse(request: Request, session: Session, config: TopicConfig, browse: _Browse) -> None:
    """Fill ``browse`` with its page of messages and the offsets of the pages before and after it."""
    broker, caller, topic = _broker(request), _caller(session), config.name
    timestamp = parse_time(browse.time) if browse.mode == "time" else None
    bounds = await offsets(broker, caller, topic, browse.partition, timestamp=timestamp)
    browse.earliest, browse.latest = int(bounds["earliest"]), int(bounds["latest"])
    span = KEY_SCAN if browse.key else PAGE
    if browse.mode == "end":
        browse.start = max(browse.earliest, browse.latest - span)
    elif browse.mode == "time":
        browse.start = max(browse.earliest, int(bounds["offset"]))
    else:
        browse.start = max(browse.earliest, _int(browse.offset, "offset", browse.earliest))
    stop = min(browse.latest, browse.start + KEY_SCAN) if browse.key else browse.latest
    records, reached = await _read(broker, caller, topic, browse, stop, keep_last=browse.mode == "end")
    browse.messages = await _shown_messages(request, _principal(session), config, browse.partition, records)
    if reached < browse.latest:
        browse.next_offset = reached
    if browse.start > browse.earliest:
        browse.previous_offset = max(browse.earliest, browse.start - span)


def _page_link(topic: str, browse: _Browse, offset: int) -> str:
    query = {"partition": str(browse.partition), "from": "offset", "offset": str(offset)}
    if browse.key:
        query["key"] = browse.key
    return f"/portal/topics/{topic}/messages?{urlencode(query)}"


async def _messages_page(
    request: Request,
    session: Session,
    name: str,
    query: Mapping[str, str],
    *,
    error: str = "",
    form: Mapping[str, str] | None = None,
) -> Response:
    broker = _broker(request)
    who = _principal(session)
    try:
        config = topic_service.readable_topic(broker, who, name)  # 404 for another tenant's, as for no topic
        authorize_message(broker, who, name, "fetch")
    except ApiError as exc:
        return _error_page(session, exc)
    status = 400 if error else 200
    try:
        browse = _browse_of(config, query)
    except ApiError as exc:
        browse, error, status = _Browse(0, "end"), _sentence(exc.message), exc.status
    else:
        try:
            await _browse(request, session, config, browse)
        except ApiError as exc:
            error, status = _sentence(exc.message), exc.status
    stored = query.get("stored", "")
    return _render(
        "messages.html",
        status,
        session=session,
        topic=config,
        browse=browse,
        error=error,
        stored=int(stored) if stored.isdigit() else None,
        next_link=_page_link(name, browse, browse.next_offset) if browse.next_offset is not None else "",
        previous_link=_page_link(name, browse, browse.previous_offset) if browse.previous_offset is not None else "",
        can_produce="produce" in _actions(broker, who, config),
        form={"partition": "", "key": "", "value": "", "headers": "", **(form or {})},
        page_size=PAGE,
        key_scan=KEY_SCAN,
        default_time=time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() - 3600)),
    )


@router.get("/topics/{name}/messages")
async def messages_page(request: Request, name: str) -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    return await _messages_page(request, session, name, request.query_params)


@router.post("/topics/{name}/messages")
async def produce_message(request: Request, name: str) -> Response:
    """A test message, stored through the services' produce as REST's produce stores it: to the partition
    chosen, else the key's, else the next in turn."""
    session = _session(request)
    if session is None:
        return _to_login()
    form = await _form(request)
    _check_csrf(session, form)
    broker = _broker(request)
    who = _principal(session)
    try:
        config = topic_service.readable_topic(broker, who, name)
    except ApiError as exc:
        return _error_page(session, exc)
    try:
        authorize_message(broker, who, name, "produce")
        key = form.get("key", "").encode() or None
        record = RecordData(form.get("value", "").encode(), key, parse_headers(form.get("headers", "")))
        if len(record.value or b"") + len(key or b"") > broker.config.max_message_bytes:
            raise ApiError(413, "MESSAGE_TOO_LARGE", f"a message holds {broker.config.max_message_bytes} bytes at most")
        if form.get("partition", "").strip():
            partition = _int(form["partition"], "partition")
            if not 0 <= partition < config.partitions:
                raise ApiError(404, "UNKNOWN_PARTITION", f"topic {name!r} has partitions 0..{config.partitions - 1}")
        elif key is not None:
            partition = partition_for_key(key, config.partitions)
        else:
            partition = broker.next_partition(config)
        answers = await produce_records(
            broker, _caller(session), name, {partition: [(0, record)]}, producer={}, durable=True
        )
    except ApiError as exc:
        query = {"partition": form.get("browse_partition", ""), "from": "end"}
        return await _messages_page(request, session, name, query, error=_sentence(exc.message), form=form)
    offset = answers[0].base_offset
    query = {"partition": str(partition), "from": "offset", "offset": str(offset), "stored": str(offset)}
    return RedirectResponse(f"/portal/topics/{name}/messages?{urlencode(query)}", status_code=303)
