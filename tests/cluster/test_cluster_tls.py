"""A cluster whose servers serve TLS and forward to each other over it (each checking the other's certificate
against the cluster's CA and presenting its own): the cluster tests of forwarding and of a kill -9 pass on it
unchanged. The tests' own clients (urllib, the SDK) trust the cluster's CA through ``SSL_CERT_FILE``, as any
client of the system's trust store would."""

from __future__ import annotations

import dataclasses
import http.client
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.devservices import HdfsCluster, ZooKeeperServer, make_local_certificates
from tests.cluster import test_cluster as plain
from tests.cluster.conftest import QUICK_REASSIGN, Cluster, start_cluster


@pytest.fixture
def tls_cluster(
    zookeeper: ZooKeeperServer, hdfs: HdfsCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Cluster]:
    tls = make_local_certificates(tmp_path / "tls", client_auth="optional")
    monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca_file))
    # The servers themselves trust no default bundle at all: forwarding works only through --tls-ca.
    nothing = {**QUICK_REASSIGN.env, "SSL_CERT_FILE": str(tmp_path / "no-such-bundle.pem")}
    settings = dataclasses.replace(QUICK_REASSIGN, tls=tls, env=nothing)
    running = start_cluster(zookeeper, hdfs, tmp_path / "logs", settings)
    try:
        yield running
    finally:
        running.stop()


def test_servers_forward_to_each_other_over_tls(tls_cluster: Cluster) -> None:
    assert all(server.url.startswith("https://") for server in tls_cluster.servers.values())
    plain.test_any_server_answers_sdk_goes_to_owners_rest_forwards(tls_cluster)
    s1 = tls_cluster.servers["s1"]
    with pytest.raises((urllib.error.URLError, http.client.HTTPException, ConnectionError)):  # TLS only: no answer
        urllib.request.urlopen(s1.url.replace("https://", "http://") + "/readyz", timeout=5)
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):  # nor trust anyone's CA
        urllib.request.urlopen(f"{s1.url}/readyz", timeout=5, context=ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))


def test_kill_9_of_an_owner_over_tls_loses_nothing(tls_cluster: Cluster) -> None:
    plain.test_kill_9_moves_partitions_after_the_delay_and_loses_nothing(tls_cluster, "an owner")
