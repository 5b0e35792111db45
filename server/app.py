"""The app assembly: the one place that puts the edges together over the services.

:func:`create_app` is the FastAPI application the server runs: its lifespan starts the broker, the group and
subscription coordinators, the message trace, usage metering and the Kafka listener (``server.kafka``), and
closes them within the shutdown's deadline; its routes are the REST API (``server.http``), the WebSocket push
endpoint (``server.push``) and the portal (``server.portal``). :func:`create_asgi` puts the REST edge's raw
fast path for produce/fetch/offsets in front. The process entry (``server.__main__``) serves it.

The only module besides ``server.__main__`` that may import every edge; no edge imports it
(tests/unit/test_import_direction.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable

from fastapi import FastAPI, Request
from kazoo.exceptions import KazooException
from starlette.responses import Response

from fencing import LogError
from server import connect_offsets, portal, push
from server.bounded import until_deadline
from server.broker import Broker
from server.config import ServerConfig
from server.connect.coordinator import ConnectorCoordinator
from server.connect.service import ConnectService
from server.connect.workers import TaskWorkers
from server.errors import ApiError, error_response
from server.groups import GroupCoordinator
from server.http import app as rest
from server.http.fastpath import FastPath
from server.http.readiness import StorageCheck
from server.kafka.listener import KafkaListener
from server.loop_watchdog import LoopWatchdog
from server.portal import pages as portal_pages
from server.portal.console_cluster import watch_ring
from server.portal.headers import PortalHeaders
from server.schemas.coordinator import SchemaCoordinator
from server.schemas.validation import SchemaValidator
from server.subscriptions import SubscriptionCoordinator
from server.tls import ServerTLS
from server.trace.service import TraceService
from server.transactions.coordinator import TransactionCoordinator
from server.usage.emitter import UsageEmitter

__all__ = ["Shutdown", "StartupAborted", "create_app", "create_asgi"]

log = logging.getLogger("talos.server")


class Shutdown:
    """The process's stop, shared by the thread that takes its signals (server/__main__.py) and the lifespan below.

    The first SIGTERM or SIGINT starts the clock: the drain of open requests, flushing and sealing the partitions
    and leaving ZooKeeper are over by ``deadline`` (a ``time.monotonic()``), whatever the state the signal found
    (starting, serving, shutting down); a later signal changes nothing. ``phase`` and ``step`` say where the
    server is and ``abandoned`` what the deadline cut short: the report when the process has to be ended."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.deadline: float | None = None
        self.signal = ""
        self.phase = "starting"  # then serving, draining (open requests), closing (the lifespan), stopped
        self.step = ""
        self.abandoned: list[str] = []
        self.start_aborted = False  # the lifespan failed on purpose: uvicorn's "startup failed" is expected

    @property
    def begun(self) -> bool:
        return self.deadline is not None

    def begin(self, reason: str) -> bool:
        """Start the clock (from the signal-taking thread); False if it runs already: the deadline stays."""
        if self.deadline is not None:
            return False
        self.deadline = time.monotonic() + self.timeout_s
        self.signal = reason
        if self.phase == "serving":
            self.phase = "draining"
        return True

    def remaining(self) -> float:
        return math.inf if self.deadline is None else max(0.0, self.deadline - time.monotonic())


class StartupAborted(Exception):
    """A SIGTERM (or SIGINT) came during start-up: the server stopped before serving."""


def create_asgi(config: ServerConfig, shutdown: Shutdown | None = None, tls: ServerTLS | None = None) -> FastPath:
    """The application as served: the fast path for produce/fetch/offsets in front of FastAPI."""
    app = create_app(config, shutdown, tls)
    return FastPath(PortalHeaders(app), app.state.broker_of)  # not app.state.broker: a State lookup per call


async def _start_broker(config: ServerConfig, shutdown: Shutdown | None, tls: ServerTLS | None) -> Broker:
    """``Broker.start``, unless a signal comes first (``shutdown`` begun): then the start-up is cancelled, what it
    opened is closed within the deadline, and the lifespan fails with :class:`StartupAborted` (uvicorn exits
    without serving). Start-up may wait long: for ZooKeeper, for our server id, for the storage."""
    peer_tls = tls.client_context if tls is not None else None
    if shutdown is None:
        return await Broker.start(config, peer_tls=peer_tls)
    if not shutdown.begun:
        starting = asyncio.ensure_future(Broker.start(config, deadline=lambda: shutdown.deadline, peer_tls=peer_tls))
        while not shutdown.begun:  # polled: the signal comes on another thread, maybe while the loop is stuck
            done, _ = await asyncio.wait({starting}, timeout=0.1)
            if done:
                return starting.result()
        shutdown.step = "cancelling the start-up"
        starting.cancel()
        await asyncio.wait({starting}, timeout=shutdown.remaining())
        if not starting.done():
            shutdown.abandoned.append("the cancelled start-up (closing what it had opened)")
        elif not starting.cancelled() and starting.exception() is None:  # it was done as the signal came
            shutdown.abandoned.extend(await starting.result().close(shutdown.deadline))
    shutdown.start_aborted = True
    log.info("%s during start-up: stopped before serving", shutdown.signal)
    raise StartupAborted(f"{shutdown.signal} during start-up")


def create_app(config: ServerConfig, shutdown: Shutdown | None = None, tls: ServerTLS | None = None) -> FastAPI:
    """The FastAPI application; ``shutdown`` (``python -m server``) bounds its start-up and shutdown by the
    signals' deadline (else the shutdown gets ``shutdown_timeout_s`` from its start); ``tls``: the server's TLS
    (``python -m server`` gives its HTTP listener the context), for the Kafka listener, the calls to the other
    servers and the reload of the files."""
    broker_holder: dict[str, Broker] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        watchdog = LoopWatchdog().start()  # logs what blocks the event loop, with its stack (issue 35)
        try:
            broker = await _start_broker(config, shutdown, tls)
        except BaseException:  # a failed or cancelled start-up: no lifespan shutdown follows
            watchdog.stop()
            raise
        broker_holder["broker"] = broker
        app.state.broker = broker
        app.state.storage_check = StorageCheck(lambda: broker.fs.exists(broker.root))
        app.state.coordinator = coordinator = GroupCoordinator(broker)
        app.state.subscriptions = subscriptions = SubscriptionCoordinator(broker)
        app.state.transactions = transactions = TransactionCoordinator(broker)
        broker.transaction_verifier = transactions  # partitions ask it before opening a transaction
        app.state.schemas = schemas = SchemaCoordinator(broker)
        broker.schema_validator = SchemaValidator(broker, schemas)  # topics that validate schema ids ask it
        watch_ring(app.state, broker)  # the console's recent ring changes: every one from now on
        workers = TaskWorkers(broker)
        app.state.connect = ConnectService(broker, ConnectorCoordinator(broker), workers)
        supervising = asyncio.get_running_loop().create_task(workers.run())
        maintaining = _maintain(broker, coordinator, subscriptions)
        maintenance = asyncio.get_running_loop().create_task(maintaining)
        sweeping = asyncio.get_running_loop().create_task(_sweep_transactions(broker, transactions))
        refreshing = asyncio.get_running_loop().create_task(broker.security.run())
        emitter = UsageEmitter(broker, broker.usage)
        emitting = asyncio.get_running_loop().create_task(emitter.run()) if config.metering_interval_s > 0 else None
        app.state.trace = tracing = TraceService(broker)
        tracing.start()
        kafka = KafkaListener(broker, coordinator, transactions) if config.kafka_listener_specs else None
        if kafka is not None:
            await kafka.start(ssl=tls.listening_context if tls is not None else None)
        reloading = asyncio.get_running_loop().create_task(tls.watch(config.tls_reload_s)) if tls else None
        gc.collect()
        gc.freeze()  # start-up objects never move again: far fewer long GC pauses (p99)
        if config.gc_threshold > 0:
            gc.set_threshold(config.gc_threshold, *gc.get_threshold()[1:])
        if broker.cluster is not None:
            log.info("server %s at %s: storage %s, zk %s", config.member_id, config.url, config.storage, config.zk)
        else:
            log.info("talos serving storage %s", config.storage)
        if shutdown is not None:
            shutdown.phase = "draining" if shutdown.begun else "serving"
        try:
            yield
        finally:
            # Every step is over by the deadline; one still running then (storage or ZooKeeper hung) is given up.
            end = shutdown.deadline if shutdown is not None and shutdown.deadline is not None else None
            if end is None:
                end = time.monotonic() + config.shutdown_timeout_s
            end -= min(1.0, 0.1 * config.shutdown_timeout_s)  # left for uvicorn and the process to end
            services_end = time.monotonic() + max(0.0, end - time.monotonic()) * 0.3  # the broker gets the rest
            abandoned: list[str] = []
            if shutdown is not None:
                shutdown.phase = "closing"

            async def step(what: str, closing: Awaitable[object]) -> None:
                if shutdown is not None:
                    shutdown.step = what
                await until_deadline(what, closing, services_end, abandoned)

            if kafka is not None:
                await step("closing the Kafka listener", kafka.close())
            supervising.cancel()
            await step("stopping the connector tasks", workers.close())
            maintenance.cancel()
            if reloading is not None:
                reloading.cancel()
            sweeping.cancel()
            refreshing.cancel()
            if emitting is not None:
                emitting.cancel()
                await step("writing the last usage records", emitter.close())
            await step("closing push subscriptions", subscriptions.close())
            await step("writing the last trace events", tracing.close())
            if shutdown is not None:
                shutdown.step = "closing the broker (partitions, ZooKeeper, I/O threads)"
            abandoned += await broker.close(end)
            if shutdown is not None:
                shutdown.abandoned += abandoned
                shutdown.phase, shutdown.step = "stopped", ""
            watchdog.stop()

    app = FastAPI(
        title="Talos",
        version="0.1.0",
        summary="A message queue with compute separated from storage.",
        lifespan=lifespan,
    )

    def broker() -> Broker:
        return broker_holder["broker"]

    app.state.broker_of = broker
    rest.install(app, config, broker)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> Response:
        if request.url.path.startswith("/portal"):
            return portal_pages.error_page(exc)
        return error_response(exc)

    app.include_router(push.router)
    app.include_router(portal.router)
    return app


async def _sweep_transactions(broker: Broker, transactions: TransactionCoordinator) -> None:
    """Transactions open past their timeout aborted (and idle ids forgotten) about every 10 s, as Kafka does:
    an abandoned one holds its partitions' read-committed readers back until then."""
    interval = min(10.0, broker.config.maintenance_interval_s)
    while True:
        await asyncio.sleep(interval)
        try:
            await transactions.maintain()
        except (KazooException, ApiError, LogError) as exc:
            log.warning("transaction sweep stopped early, retried in %g s: %r", interval, exc)
        except Exception:
            log.exception("transaction sweep failed")


async def _maintain(broker: Broker, coordinator: GroupCoordinator, subscriptions: SubscriptionCoordinator) -> None:
    while True:
        await asyncio.sleep(broker.config.maintenance_interval_s)
        started = time.monotonic()
        try:
            await connect_offsets.index_of(broker).maintain()  # indexes caught up; old topics compacted
            await broker.maintain()
            await coordinator.maintain()
            await subscriptions.maintain()
        except (KazooException, ApiError, LogError) as exc:  # ZooKeeper or the storage away: next time
            log.warning("maintenance stopped early, retried in %g s: %r", broker.config.maintenance_interval_s, exc)
        except Exception:
            log.exception("maintenance failed")
        log.debug("maintenance took %.3fs", time.monotonic() - started)
