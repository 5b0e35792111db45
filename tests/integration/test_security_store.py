"""The security document on real storage (local disk and HDFS): racing writers lose nothing."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from server.config import ServerConfig
from server.security.guard import Security
from server.security.state import SecurityState, TokenRecord
from server.security.store import SecurityStore
from server.security.tokens import new_token
from server.topics import TopicConfig
from tests.conftest import Storage

pytestmark = pytest.mark.slow


def test_racing_changes_from_many_servers_all_land(storage: Storage) -> None:
    stores = [SecurityStore(storage.fs, storage.path("root")) for _ in range(4)]  # one per "server"
    errors: list[BaseException] = []

    def create(store: SecurityStore, index: int) -> None:
        try:
            for n in range(3):
                store.change(lambda s, name=f"t{index}-{n}": s.create_tenant(name, 1))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(store, i)) for i, store in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    state = stores[0].load()
    assert set(state.tenants) == {f"t{i}-{n}" for i in range(4) for n in range(3)}
    assert state.version == 12
    versions = storage.fs.list(storage.path("root", "_security"))
    assert len(versions) <= 10  # old versions are pruned


def test_a_writer_that_stalled_past_the_pruning_applies_its_change_again(storage: Storage) -> None:
    root = storage.path("stalled")
    slow, others = SecurityStore(storage.fs, root), SecurityStore(storage.fs, root)
    slow.change(lambda s: s.create_tenant("base", 1))
    stalled = []

    def apply(state: SecurityState) -> SecurityState:
        if not stalled:  # while this writer "stalls", others write (and prune) many versions
            stalled.append(state.version)
            for n in range(11):
                others.change(lambda s, name=f"o{n}": s.create_tenant(name, 1))
        return state.create_tenant("late", 1)

    result = slow.change(apply)
    assert stalled == [1]
    assert "late" in result.tenants and {f"o{n}" for n in range(11)} <= set(result.tenants)
    assert slow.load() == result and result.version == 13


class _NoTopics:
    def list_topics(self) -> list[TopicConfig]:
        return []

    def owns(self, topic: str, index: int) -> bool:
        return False


def test_a_token_made_on_one_server_works_on_another_at_once(storage: Storage) -> None:
    """The other server re-read the document a moment before the token was made: it must not refuse the
    token until its next periodic re-read (the CI failure this guards against)."""
    root = storage.path("tokens")
    config = ServerConfig(auth="on", admin_token="admin-secret", security_refresh_s=60)

    async def scenario() -> None:
        with ThreadPoolExecutor(2) as executor:
            maker = Security(config, SecurityStore(storage.fs, root), executor, _NoTopics())
            other = Security(config, SecurityStore(storage.fs, root), executor, _NoTopics())
            await maker.change(lambda s: s.create_tenant("acme", 1))
            await other.reload()  # "just refreshed": the token below is newer than this read
            for _ in range(3):
                token, token_id, digest = new_token()
                record = TokenRecord(token_id, "acme", digest, "t", int(time.time() * 1000))
                await maker.change(lambda s, r=record: s.add_token(r))
                principal = await other.principal_of(token)
                assert principal is not None and principal.tenant == "acme"
            started = time.monotonic()
            assert await other.principal_of(new_token()[0]) is None  # unknown stays unknown
            assert time.monotonic() - started < 5

    asyncio.run(scenario())
