"""One local Spark session for the whole test session (Spark starts in seconds, but not per test), and a
real standalone Talos server that meters every second."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from server.devservices import StandaloneServer
from tests.helpers import running_standalone


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark/" in str(item.path).replace("\\\\", "/"):
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.slow)  # a Spark job takes seconds: not for `-m "not slow"`


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from metering.job import spark_session

    session = spark_session()
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneServer]:
    data_dir = tmp_path_factory.mktemp("standalone") / "data"
    with running_standalone(data_dir, env={"TALOS_METERING_INTERVAL_S": "1"}) as running:
        yield running
