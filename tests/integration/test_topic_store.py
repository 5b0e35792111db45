"""Topic metadata in the storage (standalone): racing creators, as two group members joining at once race
to create the group's retry topic."""

from __future__ import annotations

import threading

import pytest

from server.errors import ApiError
from server.topics import TopicConfig, TopicStore
from tests.conftest import Storage


@pytest.mark.slow
def test_a_racing_creator_sees_the_whole_topic_or_none(storage: Storage) -> None:
    store = TopicStore(storage.fs, storage.root)

    def create_then_read(name: str, start: threading.Barrier, outcomes: list[object]) -> None:
        start.wait()
        try:
            outcomes.append(store.create(TopicConfig(name, 1)))
        except ApiError as exc:
            outcomes.append(exc.code)
            outcomes.append(store.get(name))  # the loser reads what the winner wrote

    for round_ in range(20):
        name = f"__retry.g{round_}"
        outcomes: list[object] = []
        start = threading.Barrier(3)
        threads = [threading.Thread(target=create_then_read, args=(name, start, outcomes)) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert outcomes.count("TOPIC_EXISTS") == 2
        outcomes = [o for o in outcomes if o != "TOPIC_EXISTS"]
        assert len(outcomes) == 3
        assert all(isinstance(o, TopicConfig) and o.name == name and o.partitions == 1 for o in outcomes)
        assert [c.name for c in store.list()].count(name) == 1
