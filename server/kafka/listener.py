"""The Kafka listener: an asyncio TCP server speaking Kafka's protocol beside the HTTP one.

Each connection reads size-prefixed requests and answers them in the order they came, as Kafka requires,
while working on several at once: a client pipelines requests (librdkafka keeps up to five produces in
flight per connection), and each request runs as its own task; a writer sends the answers in order.
Produce requests to one partition also reach the log in order (``Session.claim_appends``), or an
idempotent producer's sequences would arrive out of order.

With auth on, a connection must authenticate (SASL) before anything but ApiVersions and the SASL exchange;
a failed authentication or a malformed request closes it, as a Kafka broker does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from ssl import SSLContext
from typing import Any

from server import metrics
from server.broker import Broker
from server.errors import ApiError
from server.groups.coordinator import GroupCoordinator
from server.kafka import admin, configs, fetch, groups, produce, topics, txn
from server.kafka.context import Context
from server.kafka.frames import frame_reader_protocol
from server.kafka.group_state import Memberships
from server.kafka.protocol import (
    API_NAMES,
    ProtocolError,
    RequestHeader,
    UnsupportedVersion,
    api_versions_fallback,
    read_request,
    response_parts,
    write_response,
)
from server.kafka.protocol.errors import ErrorCode
from server.kafka.protocol.primitives import Buffer
from server.kafka.session import MECHANISMS, Session, bearer_token
from server.tls import certificate_name
from server.transactions.coordinator import TransactionCoordinator

__all__ = ["KafkaListener"]

log = logging.getLogger("talos.kafka")

_Frame = bytes | list[Buffer]  # a response frame, whole or in parts (a Fetch answer's records not copied)

Handler = Callable[[Context, dict[str, Any]], Awaitable[dict[str, Any] | None]]
_PRODUCE, _SASL_HANDSHAKE, _API_VERSIONS, _SASL_AUTHENTICATE = 0, 17, 18, 36
_HANDLERS: dict[int, Handler] = {
    1: fetch.fetch,
    2: fetch.list_offsets,
    3: topics.metadata,
    8: groups.offset_commit,
    9: groups.offset_fetch,
    10: groups.find_coordinator,
    11: groups.join_group,
    12: groups.heartbeat,
    13: groups.leave_group,
    14: groups.sync_group,
    15: groups.describe_groups,
    16: groups.list_groups,
    18: topics.api_versions,
    19: topics.create_topics,
    20: topics.delete_topics,
    21: admin.delete_records,
    22: produce.init_producer_id,
    24: txn.add_partitions_to_txn,
    25: txn.add_offsets_to_txn,
    26: txn.end_txn,
    27: txn.write_txn_markers,
    28: txn.txn_offset_commit,
    32: configs.describe_configs,
    33: configs.alter_configs,
    37: admin.create_partitions,
    42: groups.delete_groups,
    44: configs.incremental_alter_configs,
    47: groups.offset_delete,
    60: admin.describe_cluster,
    61: txn.describe_producers,
    65: txn.describe_transactions,
    66: txn.list_transactions,
}
_MAX_IN_FLIGHT = 64  # requests of one connection being worked on; the next waits to be read
_TICK_S = 0.25  # how often group sessions, rebalance deadlines and stalled connections are checked
_IDLE_S = 600.0  # a connection sending no request this long is closed (Kafka's connections.max.idle.ms: 9 min)
_MAX_CONNECTIONS = 10_000  # when max_connections is 0 (from the fd limit, on the HTTP side)


class _Connection:
    """What the listener watches of one connection: whether it stalls, and how many request bytes it has in
    flight (a client pipelining large produces waits, on TCP, once that is past the limit)."""

    __slots__ = ("in_flight", "reading", "since", "under_limit", "writer")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.reading = False  # between a request's size and its last byte
        self.since = time.monotonic()  # when it started waiting for a request, or for the rest of one
        self.in_flight = 0
        self.under_limit = asyncio.Event()
        self.under_limit.set()


class KafkaListener:
    def __init__(self, broker: Broker, coordinator: GroupCoordinator, transactions: TransactionCoordinator) -> None:
        self._broker = broker
        self._coordinator = coordinator
        self._transactions = transactions
        self.memberships = Memberships()
        self._recording: set[asyncio.Future[None]] = set()  # memberships being recorded after an expiry
        self._servers: list[asyncio.Server] = []
        self._ticker: asyncio.Task[None] | None = None
        self._connections: dict[asyncio.Task[Any], _Connection] = {}
        config = broker.config
        self._max_connections = config.max_connections or _MAX_CONNECTIONS
        self._max_in_flight_bytes = 4 * config.max_request_bytes

    async def start(self, *, ssl: Callable[[], SSLContext] | None = None) -> None:
        """Open every listener the configuration names (``server.kafka_listeners``); the TLS ones with a context
        of ``ssl``: Kafka clients connect with ``security.protocol`` SSL, or SASL_SSL when auth is on (SASL inside
        the TLS session)."""
        loop = asyncio.get_running_loop()
        for spec in self._broker.config.kafka_listener_specs:
            context = ssl() if spec.tls and ssl is not None else None
            if spec.tls and context is None:
                raise ValueError(f"the Kafka listener {spec.name} needs TLS: no certificate is configured")
            serve = functools.partial(self._serve, spec.name)
            server = await loop.create_server(
                lambda serve=serve: frame_reader_protocol(serve, limit=1 << 20), spec.host, spec.port, ssl=context
            )
            self._servers.append(server)
            log.info("kafka listener %s on %s:%d (advertised %s)", spec.name, spec.host, spec.port, spec.advertised)
        self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        for server in self._servers:
            server.close()
        for task in list(self._connections):
            task.cancel()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(_TICK_S)
            try:
                self.memberships.tick(time.monotonic())
                local = {name for name in self.memberships.groups if self._coordinator.owner(name).local}
                self.memberships.forget(local)
                for group in self.memberships.changed():  # members expired: the group rebalances or empties
                    self._recording.add(asyncio.ensure_future(groups.record_membership(self._coordinator, group)))
                    self._recording = {task for task in self._recording if not task.done()}
            except ApiError:  # no server in the ring yet: nothing moves
                pass
            except Exception:
                log.exception("kafka group maintenance")
            self._close_stalled(time.monotonic())

    def _close_stalled(self, now: float) -> None:
        """Close connections idle past ``_IDLE_S``, or stuck in the middle of a request past the body timeout
        (a client that sends a size and then trickles or nothing would hold its buffers forever)."""
        body_timeout = self._broker.config.body_timeout_s
        for connection in list(self._connections.values()):
            limit = body_timeout if connection.reading else _IDLE_S
            if now - connection.since > limit:
                connection.since = now  # closed once
                connection.writer.transport.abort()

    # ---------------------------------------------------------------- one connection

    async def _serve(self, listener: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = writer.get_extra_info("peername")
        address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "unknown"
        if len(self._connections) >= self._max_connections:
            log.warning("kafka client %s: %d connections open, closing it", address, len(self._connections))
            writer.transport.abort()
            return
        connection = self._connections[task] = _Connection(writer)
        session = Session(address, self._broker.security, listener)
        certified = certificate_name(writer.transport)
        if certified is not None:
            try:
                await session.authenticate_certificate(certified)
            except ApiError as exc:  # with auth on, it may still authenticate by SASL
                log.info("kafka client %s: %s", address, exc.message)
        answers: asyncio.Queue[tuple[asyncio.Future[_Frame | None], int] | None] = asyncio.Queue(_MAX_IN_FLIGHT)
        sender = asyncio.get_running_loop().create_task(self._send(answers, connection))
        try:
            await self._read(reader, session, answers, connection)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except ProtocolError as exc:
            log.info("kafka client %s: malformed request, closing: %s", address, exc)
        except asyncio.CancelledError:
            sender.cancel()
            raise
        finally:
            self._connections.pop(task, None)
            with contextlib.suppress(asyncio.QueueFull):
                answers.put_nowait(None)
            if not sender.done():
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.wait_for(sender, 30)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _read(
        self,
        reader: asyncio.StreamReader,
        session: Session,
        answers: asyncio.Queue[tuple[asyncio.Future[_Frame | None], int] | None],
        connection: _Connection,
    ) -> None:
        config = self._broker.config
        limit = config.max_request_bytes + 64 * 1024  # a produce of max_request_bytes of records, and framing
        loop = asyncio.get_running_loop()
        while True:
            if not connection.under_limit.is_set():
                await connection.under_limit.wait()
            connection.since = time.monotonic()
            size = int.from_bytes(await reader.readexactly(4), "big", signed=True)
            if not 0 < size <= limit:
                log.info("kafka client %s: request of %d bytes (limit %d), closing", session.peer, size, limit)
                return
            connection.reading, connection.since = True, time.monotonic()
            frame = await reader.readexactly(size)
            connection.reading = False
            connection.in_flight += size
            if connection.in_flight > self._max_in_flight_bytes:
                connection.under_limit.clear()
            try:
                header, body = read_request(frame)
            except UnsupportedVersion as exc:
                if exc.header.api_key != _API_VERSIONS:
                    log.info("kafka client %s: %s, closing", session.peer, exc)
                    return
                done: asyncio.Future[_Frame | None] = loop.create_future()
                done.set_result(api_versions_fallback(exc.header))
                await answers.put((done, size))
                continue
            if not session.may_call(header.api_key):
                log.info(
                    "kafka client %s: %s before authenticating, closing", session.peer, API_NAMES.get(header.api_key)
                )
                return
            if not await session.still_valid(config.security_refresh_s):
                log.info("kafka client %s: its token is no longer valid, closing", session.peer)
                return
            if header.api_key in (_SASL_HANDSHAKE, _SASL_AUTHENTICATE):
                frame_out, ok = await self._sasl(session, header, body)
                done = loop.create_future()
                done.set_result(frame_out)
                await answers.put((done, size))
                if not ok:
                    return
                continue
            turns = session.claim_appends(produce.partitions_of(body)) if header.api_key == _PRODUCE else []
            await answers.put((loop.create_task(self._answer(session, header, body, turns)), size))

    async def _answer(
        self,
        session: Session,
        header: RequestHeader,
        body: dict[str, Any],
        turns: list[tuple[asyncio.Future[None] | None, asyncio.Future[None]]],
    ) -> list[Buffer] | None:
        ctx = Context(self._broker, self._coordinator, self.memberships, self._transactions, session, header)
        name = API_NAMES.get(header.api_key, str(header.api_key))
        try:
            if header.api_key == _PRODUCE:
                answer = await produce.produce(ctx, body, turns)
            else:
                answer = await _HANDLERS[header.api_key](ctx, body)
        except Exception:
            for _, mine in turns:
                if not mine.done():
                    mine.set_result(None)
            log.exception("kafka client %s: %s v%d failed", session.peer, name, header.api_version)
            raise
        error = _first_error(answer)
        metrics.kafka_request(name, error)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("kafka client %s: %s v%d answered (error %d)", session.peer, name, header.api_version, error)
        return None if answer is None else response_parts(header, answer)

    async def _sasl(self, session: Session, header: RequestHeader, body: dict[str, Any]) -> tuple[bytes, bool]:
        """The SASL exchange, one request at a time: (the answer, whether the connection goes on)."""
        if header.api_key == _SASL_HANDSHAKE:
            mechanism = body.get("mechanism", "")
            if mechanism not in MECHANISMS:
                answer = {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": list(MECHANISMS)}
                return write_response(header, answer), False
            session.mechanism = mechanism
            return write_response(header, {"error_code": 0, "mechanisms": list(MECHANISMS)}), True
        if session.mechanism is None or session.token is not None:
            answer = {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "error_message": "SaslHandshake first, once"}
            return write_response(header, answer), False
        token = bearer_token(session.mechanism, bytes(body.get("auth_bytes") or b""))
        if token is None or not await session.authenticate(token):
            metrics.denied(401)
            message = "authentication failed: the token is not valid (unknown, revoked or malformed)"
            answer = {"error_code": ErrorCode.SASL_AUTHENTICATION_FAILED, "error_message": message, "auth_bytes": b""}
            return write_response(header, answer), False
        log.info("kafka client %s authenticated as %s", session.peer, session.principal.name)
        return write_response(
            header, {"error_code": 0, "error_message": None, "auth_bytes": b"", "session_lifetime_ms": 0}
        ), True

    async def _send(
        self, answers: asyncio.Queue[tuple[asyncio.Future[_Frame | None], int] | None], connection: _Connection
    ) -> None:
        writer = connection.writer
        while True:
            item = await answers.get()
            if item is None:
                return
            pending, size = item
            try:
                frame = await pending
            except Exception:
                writer.close()  # the request failed unexpectedly: the client reconnects and resends
                return
            if isinstance(frame, list):
                writer.writelines(frame)
                await writer.drain()
            elif frame is not None:
                writer.write(frame)
                await writer.drain()
            connection.in_flight -= size
            if connection.in_flight <= self._max_in_flight_bytes:
                connection.under_limit.set()


def _first_error(answer: object) -> int:
    """The first non-zero ``error_code`` in an answer (for the request metric)."""
    if isinstance(answer, dict):
        code = answer.get("error_code")
        if isinstance(code, int) and code:
            return code
        for value in answer.values():
            if isinstance(value, list):
                for item in value:
                    found = _first_error(item)
                    if found:
                        return found
    return 0
