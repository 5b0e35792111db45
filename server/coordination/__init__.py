"""ZooKeeper recipes (kazoo) for the cluster: registration, partition epochs, the versioned ring.

Layout (ARCHITECTURE.md): ``/talos/servers/<id>`` (ephemeral: url), ``/talos/ring`` (the effective ring,
versioned), ``/talos/partitions/<topic>/<p>`` = ``{epoch, owner, ring_version}``. Every change is a
compare-and-set on the node's ZooKeeper version, so any server may make it and none needs to lead.
"""

from __future__ import annotations

from server.coordination.epochs import StaleRingError, ZkEpochSource
from server.coordination.registry import LiveServer, ServerRegistry
from server.coordination.ringkeeper import RingKeeper
from server.coordination.ringstore import RingStore

__all__ = ["LiveServer", "RingKeeper", "RingStore", "ServerRegistry", "StaleRingError", "ZkEpochSource"]
