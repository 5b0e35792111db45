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

import httpx
import pytest
import trustme

from server.devservices import HdfsCluster, TlsFiles, ZooKeeperServer, make_local_certificates
from talos import TLS, Admin
from tests.cluster import test_cluster as plain
from tests.cluster.conftest import CLUSTER_TOKEN, FAST, QUICK_REASSIGN, Cluster, start_cluster


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


def test_a_client_certificates_tenant_is_that_tenant_on_every_server_it_is_forwarded_to(
    zookeeper: ZooKeeperServer, hdfs: HdfsCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request a client certificate authenticated, forwarded or relayed to the server that owns what it asks for,
    acts there as the certificate's tenant: its own topic's partitions on every server take its writes, and
    another tenant's push subscription (answered by its coordinator, wherever it is) is none of its business
    through any server. Passed on as the servers' own token alone, it would be the admin there."""
    ca = trustme.CA()
    files = TlsFiles(tmp_path / "server.pem", tmp_path / "ca.pem", client_auth="optional")
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(files.cert_file))
    ca.cert_pem.write_to_path(str(files.ca_file))
    monkeypatch.setenv("SSL_CERT_FILE", str(files.ca_file))  # the cluster helpers' own requests
    acme_pem = tmp_path / "acme.pem"
    ca.issue_cert("acme@clients", common_name="acme").private_key_and_cert_chain_pem.write_to_path(str(acme_pem))
    cluster = start_cluster(zookeeper, hdfs, tmp_path / "logs", dataclasses.replace(FAST, tls=files))
    try:
        url = cluster.servers["s1"].url
        trust = TLS(ca_file=str(files.ca_file))
        with Admin(url, token=CLUSTER_TOKEN, tls=trust) as admin:
            admin.create_tenant("acme")
            admin.create_tenant("globex")
            globex_token = admin.create_token("globex")["token"]
        with Admin(url, token=globex_token, tls=trust) as globex:
            globex.create_topic("globex-topic", partitions=3)
        acme = ssl.create_default_context(cafile=str(files.ca_file))
        acme.load_cert_chain(str(acme_pem))
        globex_headers = {"authorization": f"Bearer {globex_token}"}
        with httpx.Client(verify=acme, timeout=30) as as_acme, httpx.Client(verify=trust.context(), timeout=30) as g:
            made = g.post(
                f"{url}/v1/subscriptions", json={"name": "g-sub", "topic": "globex-topic"}, headers=globex_headers
            )
            assert made.status_code == 201, made.text
            created = as_acme.post(f"{url}/v1/topics", json={"name": "acme-topic", "partitions": 6})
            assert created.status_code == 201, created.text
            owners = set(cluster.routes("acme-topic").values())
            assert len(owners) > 1  # some partitions are other servers': their writes are forwarded
            messages = [{"value": f"a{i}", "partition": i} for i in range(6)]
            produced = as_acme.post(f"{url}/v1/topics/acme-topic/messages", json={"messages": messages})
            assert produced.status_code == 200, produced.text
            for server in cluster.servers.values():
                for method in ("GET", "DELETE"):
                    answer = as_acme.request(method, f"{server.url}/v1/subscriptions/g-sub")
                    assert answer.status_code == 404, (server.server_id, method, answer.text)
            assert g.get(f"{url}/v1/subscriptions/g-sub", headers=globex_headers).status_code == 200
    finally:
        cluster.stop()
