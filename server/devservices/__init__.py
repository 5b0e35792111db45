"""Real ZooKeeper and HDFS as local subprocesses, for development and tests.

Both listen on free loopback ports, are ready when their own health checks answer, and are stopped by
PID. ``talos dev services`` runs them from the command line; the test suite's fixtures use them too.
``LocalCluster`` adds N ``talos server`` processes on top (``talos cluster up``), ``StandaloneServer`` one
``talos standalone``, and ``LocalFaults`` breaks a local cluster's processes for ``talos verify --faults local``.

On the server's side of the SDK/server split (the ``talos`` package never imports it at module level; its CLI
commands do, inside the commands), but needs none of the server's packages: only the standard library and the
SDK's own modules (and ``cryptography``, imported only to make a cluster's certificates: ``talos cluster up
--tls``). It starts the server as a process (``python -m server``) and imports no other module of ``server``
(``tests/unit/test_import_direction.py`` checks).
"""

from __future__ import annotations

from server.devservices._certificates import TlsFiles, make_local_certificates
from server.devservices._cluster import (
    ClusterServer,
    ClusterSettings,
    LocalCluster,
    recorded_alive,
    recorded_cluster,
    relaunch,
    stop_recorded_cluster,
)
from server.devservices._faults import LocalFaults
from server.devservices._hadoop import HADOOP_VERSION, cache_dir, ensure_hadoop
from server.devservices._hdfs import HdfsCluster
from server.devservices._process import (
    ManagedProcess,
    ServiceError,
    free_port,
    free_port_range,
    shutdown_wait_s,
    wait_until,
)
from server.devservices._search import SearchServer
from server.devservices._standalone import StandaloneServer
from server.devservices._zookeeper import ZooKeeperServer

__all__ = [
    "HADOOP_VERSION",
    "ClusterServer",
    "ClusterSettings",
    "HdfsCluster",
    "LocalCluster",
    "LocalFaults",
    "ManagedProcess",
    "SearchServer",
    "ServiceError",
    "StandaloneServer",
    "TlsFiles",
    "ZooKeeperServer",
    "cache_dir",
    "ensure_hadoop",
    "free_port",
    "free_port_range",
    "make_local_certificates",
    "recorded_alive",
    "recorded_cluster",
    "relaunch",
    "shutdown_wait_s",
    "stop_recorded_cluster",
    "wait_until",
]
