"""Waits for the I/O threads are bounded. A token this server does not know makes it re-read the security
document: a storage that does not answer makes that request 503 within RELOAD_WAIT_S (waiting behind others
included), and the stuck read is not sent again for every request that waits (one I/O thread stays stuck, not one
per request). A join registers its group in the catalog under the group's lock: a catalog that does not answer
does not hold the join."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from server.config import ServerConfig
from server.errors import ApiError
from server.security import guard
from server.security.guard import Security
from server.security.state import SecurityState
from server.security.tokens import new_token
from server.topics import TopicConfig


class _NoTopics:
    def list_topics(self) -> list[TopicConfig]:
        return []

    def owns(self, topic: str, index: int) -> bool:
        return False


class _HangingStore:
    """The first load answers; the next ones wait until released (a storage that stopped answering)."""

    def __init__(self) -> None:
        self.loads = 0
        self.release = threading.Event()

    def load(self) -> SecurityState:
        self.loads += 1
        if self.loads > 1:
            self.release.wait(10)
        return SecurityState()


def test_a_reread_that_hangs_answers_503_in_time_and_is_not_repeated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guard, "RELOAD_WAIT_S", 0.5)
    config = ServerConfig(auth="on", admin_token="admin-secret", security_refresh_s=60)
    store = _HangingStore()

    async def scenario() -> None:
        with ThreadPoolExecutor(4) as executor:
            security = Security(config, store, executor, _NoTopics())  # type: ignore[arg-type]
            await security.reload()
            await asyncio.sleep(1.1)  # past the gap between re-reads
            began = time.monotonic()
            asks = [security.principal_of(new_token()[0]) for _ in range(3)]
            outcomes = await asyncio.gather(*asks, return_exceptions=True)
            assert time.monotonic() - began < 1.5, "each request waits at most RELOAD_WAIT_S, queueing included"
            for outcome in outcomes:
                assert isinstance(outcome, ApiError), outcome
                assert outcome.status == 503 and outcome.retriable
            assert store.loads == 2, "the stuck re-read was sent again"
            store.release.set()
            await asyncio.sleep(0.1)
            assert await security.principal_of(new_token()[0]) is None  # storage back: unknown is unknown again

    asyncio.run(scenario())


class _Broker:
    def __init__(self, executor: ThreadPoolExecutor) -> None:
        self._executor = executor

    async def io(self, function: object, *args: object) -> object:
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)  # type: ignore[arg-type]


class _HangingCatalog:
    def __init__(self) -> None:
        self.writes = 0
        self.release = threading.Event()

    def register(self, name: str) -> None:
        self.writes += 1
        self.release.wait(10)

    def list(self) -> list[str]:
        self.release.wait(10)
        return []


def test_a_group_catalog_that_hangs_does_not_hold_a_join(monkeypatch: pytest.MonkeyPatch) -> None:
    """A join registers its group (for GET /v1/groups) under the group's lock: a catalog (ZooKeeper) that does not
    answer must not hold the lock, and the join after it does not send a second write while the first hangs."""
    from server.groups import coordinator as groups

    monkeypatch.setattr(groups, "_CATALOG_WAIT_S", 0.2)
    catalog = _HangingCatalog()

    async def scenario() -> None:
        with ThreadPoolExecutor(2) as executor:
            coordinator = groups.GroupCoordinator.__new__(groups.GroupCoordinator)
            coordinator._broker = _Broker(executor)  # type: ignore[assignment]
            coordinator._catalog = catalog
            coordinator._registered = set()
            coordinator._registering = {}
            for _ in range(2):
                began = time.monotonic()
                await coordinator.register("g")
                assert time.monotonic() - began < 0.5
            assert catalog.writes == 1
            with pytest.raises(ApiError) as raised:
                await coordinator.list()
            assert raised.value.status == 503 and raised.value.retriable
            catalog.release.set()
            await asyncio.sleep(0.1)
            await coordinator.register("g")
            assert "g" in coordinator._registered

    asyncio.run(scenario())
