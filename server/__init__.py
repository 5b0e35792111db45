"""The Talos server: FastAPI application, partition ownership, group commit, fetch (see ARCHITECTURE.md).

Rooms:

* top level: ``config``, ``cluster`` (ring membership), ``topics`` (topic metadata), ``broker`` (the hub that
  owns the loaded partitions), ``errors`` (the error every room raises), ``metrics`` (a registry every room
  pushes into; it imports no server module), ``internal_topics``, ``partition_quota`` and the process entry
  ``__main__`` (``python -m server``);
* ``partition/``: the partition write and read path (group commit, tail cache, producer state, I/O executors);
* ``http/``: the HTTP edge (routes, fast path, replies, forwarding, readiness, OpenAPI, connection limits);
* ``usage/``: usage metering (counters, the emitter into ``__talos_metrics``, history);
* ``coordination/`` (ZooKeeper), ``groups/`` (consumer groups), ``security/`` (auth and quotas), ``portal/``.

May import ``talos``, ``hashring``, ``fencing`` and ``metering``; outside ``server`` only tests import it (the
CLI and ``talos.devservices`` run it as ``python -m server``). ``tests/unit/test_import_direction.py`` checks
the arrows.
"""
