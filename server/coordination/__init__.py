"""ZooKeeper recipes (kazoo) for the cluster: registration, partition epochs, the versioned ring.

Layout (ARCHITECTURE.md): ``/talos/servers/<id>`` (ephemeral: url), ``/talos/ring`` (the effective ring,
versioned), ``/talos/partitions/<topic>/<p>`` = ``{epoch, owner, ring_version}``. Every change is a
compare-and-set on the node's ZooKeeper version, so any server may make it and none needs to lead.
``stepdown`` is the pure rule for leaving the ring when the storage fails.

Below the services: may import ``hashring``, ``fencing``, the partition room's producer state, ``server.topics``
and ``server.errors``; never the services, a coordinator built on them or an edge
(tests/unit/test_import_direction.py).
"""

from __future__ import annotations

from server.coordination.epochs import StaleRingError, ZkEpochSource
from server.coordination.registry import LiveServer, ServerRegistry
from server.coordination.ringkeeper import RingKeeper
from server.coordination.ringstore import RingStore

__all__ = ["LiveServer", "RingKeeper", "RingStore", "ServerRegistry", "StaleRingError", "ZkEpochSource"]
