"""A real ``talos standalone`` process per test module (or per test, for crash tests), stopped by PID."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from talos.devservices import StandaloneServer

__all__ = ["StandaloneServer"]

_names = itertools.count()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneServer]:
    instance = StandaloneServer(tmp_path_factory.mktemp("standalone") / "data")
    try:
        yield instance.start()
    finally:
        instance.stop()


@pytest.fixture
def topic_name() -> str:
    """A fresh topic name per test (the module's server is shared)."""
    return f"t{next(_names)}"
