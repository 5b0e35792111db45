"""A server reaches HDFS through an HA nameservice from HADOOP_CONF_DIR, as the prod overlay configures it
(k8s/overlays/prod/hadoop/): the storage URL names the nameservice, not a NameNode, and the client finds the
active NameNode among those listed, here past a first one that does not answer (a NameNode that failed over)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from fencing import open_storage
from server.devservices import HdfsCluster, free_port
from talos import Admin, Consumer, Producer
from tests.e2e.conftest import StandaloneServer
from tests.helpers import REPO

PROD_HADOOP = REPO / "k8s" / "overlays" / "prod" / "hadoop"


def _pointed_at(hdfs: HdfsCluster, conf_dir: Path) -> str:
    """The prod overlay's hadoop files with its NameNodes replaced: nn1 a closed port, nn2 the real NameNode."""
    conf_dir.mkdir()
    site = (PROD_HADOOP / "hdfs-site.xml").read_text()
    addresses = re.findall(r"<value>([\w.-]+\.example\.com:8020)</value>", site)
    assert len(addresses) == 2, "expected the overlay's two NameNode addresses"
    site = site.replace(addresses[0], f"127.0.0.1:{free_port()}").replace(addresses[1], f"127.0.0.1:{hdfs.rpc_port}")
    (conf_dir / "hdfs-site.xml").write_text(site)
    (conf_dir / "core-site.xml").write_text((PROD_HADOOP / "core-site.xml").read_text())
    nameservice = re.search(r"<name>dfs.nameservices</name>\s*<value>([\w-]+)</value>", site)
    assert nameservice
    return nameservice.group(1)


@pytest.mark.slow
def test_server_stores_through_the_nameservice(hdfs: HdfsCluster, tmp_path: Path, topic_name: str) -> None:
    nameservice = _pointed_at(hdfs, tmp_path / "hadoop")
    server = StandaloneServer(
        tmp_path / "data",
        args=("--storage", f"hdfs://{nameservice}/nameservice-{topic_name}"),
        env={"HADOOP_CONF_DIR": str(tmp_path / "hadoop")},
    )
    try:
        server.start()
        with Admin(server.url) as admin:
            admin.create_topic(topic_name, partitions=2)
        with Producer(server.url) as producer:
            for i in range(50):
                producer.send(topic_name, value=f"m{i}".encode(), partition=i % 2)
            producer.flush()
        values: list[bytes] = []
        with Consumer(server.url, topics=[topic_name], start="earliest", wait_ms=200) as consumer:
            deadline = time.monotonic() + 30
            while len(values) < 50 and time.monotonic() < deadline:
                values += [m.value for m in consumer.poll() if m.value is not None]
        assert sorted(values) == sorted(f"m{i}".encode() for i in range(50))
    finally:
        server.stop()
    # The partitions' files are on that HDFS, under the path the URL named.
    fs, _ = open_storage(hdfs.url)
    assert [info.name for info in fs.list(f"/nameservice-{topic_name}")]
