"""Real ZooKeeper and HDFS as local subprocesses, for development and tests.

Both listen on free loopback ports, are ready when their own health checks answer, and are stopped by
PID. ``talos dev services`` runs them from the command line; the test suite's fixtures use them too.
``LocalCluster`` adds N ``talos server`` processes on top (``talos cluster up``).

May import the SDK's own modules; it starts the server as a process (``python -m server``), never imports it.
"""

from __future__ import annotations

from talos.devservices._cluster import (
    ClusterServer,
    ClusterSettings,
    LocalCluster,
    recorded_alive,
    recorded_cluster,
    relaunch,
    stop_recorded_cluster,
)
from talos.devservices._hadoop import HADOOP_VERSION, cache_dir, ensure_hadoop
from talos.devservices._hdfs import HdfsCluster
from talos.devservices._process import (
    ManagedProcess,
    ServiceError,
    free_port,
    free_port_range,
    shutdown_wait_s,
    wait_until,
)
from talos.devservices._search import SearchServer
from talos.devservices._standalone import StandaloneServer
from talos.devservices._zookeeper import ZooKeeperServer

__all__ = [
    "HADOOP_VERSION",
    "ClusterServer",
    "ClusterSettings",
    "HdfsCluster",
    "LocalCluster",
    "ManagedProcess",
    "SearchServer",
    "ServiceError",
    "StandaloneServer",
    "ZooKeeperServer",
    "cache_dir",
    "ensure_hadoop",
    "free_port",
    "free_port_range",
    "recorded_alive",
    "recorded_cluster",
    "relaunch",
    "shutdown_wait_s",
    "stop_recorded_cluster",
    "wait_until",
]
