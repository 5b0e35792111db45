"""A real ``talos standalone`` process per test module (or per test, for crash tests), stopped by PID."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from server.devservices import StandaloneServer
from tests.helpers import running_standalone

__all__ = ["StandaloneServer"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneServer]:
    with running_standalone(tmp_path_factory.mktemp("standalone") / "data") as running:
        yield running
