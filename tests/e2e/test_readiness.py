"""Readiness follows storage, liveness does not: with the NameNode down a server answers /readyz 503 (so
Kubernetes takes it out of the Service) but /healthz 200 (so nothing restarts it), and it is ready again
once HDFS is back (k8s/base/server-deployment.yaml's probes; docs/operations.md, HDFS maintenance)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from server.devservices import HdfsCluster, wait_until
from tests.e2e.conftest import StandaloneServer


def _status(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


@pytest.mark.slow
@pytest.mark.hdfs
def test_readiness_follows_storage_and_liveness_does_not(tmp_path: Path) -> None:
    hdfs = HdfsCluster(tmp_path / "hdfs")  # its own: this test stops the NameNode
    server = StandaloneServer(tmp_path / "data", args=("--storage", f"{hdfs.url}/ready"))
    try:
        hdfs.start()
        server.start()
        assert _status(f"{server.url}/readyz") == (200, {"status": "ready"})

        hdfs.stop()
        wait_until(lambda: _status(f"{server.url}/readyz")[0] == 503, timeout=30, what="/readyz 503")
        status, body = _status(f"{server.url}/readyz")
        assert status == 503
        error = body["error"]
        assert isinstance(error, dict)
        assert error["code"] == "NOT_READY"
        assert error["retriable"] is True
        assert _status(f"{server.url}/healthz")[0] == 200, "liveness must not depend on storage"

        hdfs.start()  # the same directories and ports
        wait_until(lambda: _status(f"{server.url}/readyz")[0] == 200, timeout=60, what="/readyz 200 again")
    finally:
        server.stop()
        hdfs.stop()
