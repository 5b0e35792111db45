"""Shared fixtures: real HDFS and ZooKeeper for the session, and storage on either backend."""

from __future__ import annotations

import itertools
import os
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fencing import FileSystem, open_storage
from server.devservices import HdfsCluster, ZooKeeperServer

ARTIFACTS = Path(os.environ.get("TALOS_TEST_ARTIFACTS", Path(__file__).parent.parent / "test-artifacts"))


@pytest.fixture(scope="session")
def hdfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HdfsCluster]:
    """A real HDFS 2.7.3 (NameNode + DataNode) for the whole session, stopped by PID at the end."""
    cluster = HdfsCluster(tmp_path_factory.mktemp("hdfs"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A real ZooKeeper for the whole session, stopped by PID at the end."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    try:
        server.start()
        yield server
    finally:
        server.stop()


@dataclass
class Storage:
    """A fresh directory on one backend: ``fs`` and ``root`` in-process, ``url`` for other processes."""

    backend: str
    fs: FileSystem
    root: str
    url: str

    def path(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)


_counter = itertools.count()


@pytest.fixture(params=["local", "hdfs"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    if request.param == "local":
        url = f"file://{tmp_path}/store"
    else:
        cluster: HdfsCluster = request.getfixturevalue("hdfs")
        url = f"{cluster.url}/tests/{os.getpid()}-{next(_counter)}"
    fs, root = open_storage(url)
    fs.mkdirs(root)
    try:
        yield Storage(request.param, fs, root, url)
    finally:
        fs.close()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--phase",
        choices=("all", "parallel", "serial"),
        default="all",
        help="scripts/test's phases: the tests not marked serial (run on several workers), or only those marked "
        "serial (timing-checked or using the whole machine, run alone afterwards); default all",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("storage") == "hdfs":
            item.add_marker(pytest.mark.hdfs)


_PARALLEL_ORDER = {
    name: rank for rank, name in enumerate(("cluster", "connectors", "spark", "e2e", "frameworks", "integration"))
}


class _Phase:
    """``--phase``: keeps the tests of one phase. Last of the collection hooks, so that it sees the markers every
    conftest adds (the cluster tests' ``slow``, say) and what ``-m`` kept."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        phase = config.getoption("--phase")
        if phase == "all":
            return
        keep = [item for item in items if (item.get_closest_marker("serial") is not None) == (phase == "serial")]
        if len(keep) != len(items):
            config.hook.pytest_deselected(items=[item for item in items if item not in keep])
            items[:] = keep
        if phase == "parallel":
            # The workers take modules in this order: the long ones (clusters, crash loops, Spark) first, the many
            # short unit modules last, to even out the end of the run (longest first).
            items.sort(key=lambda item: _PARALLEL_ORDER.get(Path(item.path).parent.name, len(_PARALLEL_ORDER)))


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_Phase(), "talos-phase")


_topic_names = itertools.count()


@pytest.fixture
def topic_name() -> str:
    """A fresh topic name per test (servers are shared by a module)."""
    return f"t{next(_topic_names)}"
