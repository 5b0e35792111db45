"""The Talos server, in layers (ARCHITECTURE.md, "Inside server/: edges over one service layer").

* edges (parse, call the service layer, encode): ``http/`` (REST: routes, the fast path, relays, readiness,
  OpenAPI, connection limits), ``kafka/`` (the Kafka listener), ``push/`` (the WebSocket push endpoint and
  sessions), ``portal/`` (the quota portal); ``web`` holds the HTTP helpers they share (ASGI types, bodies,
  JSON answers). The edges never import each other; ``app`` (the app assembly: the lifespan, the Kafka
  listener, the routers) and the process entry ``__main__`` (``python -m server``) put them together.
* services (protocol-neutral): ``messaging/`` (produce, fetch, offsets, fence of a message request as a caller,
  with its authorization, quota admission and metering, on the partition's owner or forwarded to it; topics
  and producer ids as a principal); the coordinators built on it: ``groups/``, ``subscriptions/``, ``trace/``,
  ``connect_offsets``, ``internal_topics``; ``security/`` (auth, ACLs, quotas, audit).
* partitions and coordination: ``partition/`` (group commit, tail cache, producer state, I/O executors),
  ``coordination/`` (ZooKeeper), ``cluster`` (ring membership), ``broker`` (the hub that owns the loaded
  partitions), ``peers`` (the HTTP client to other servers), ``topics`` (topic metadata), ``usage/`` (usage
  metering, pushed into).
* configuration, errors, metrics: ``config``, ``errors`` (the error every room raises), ``metrics`` (a registry
  every room pushes into; it imports no server module).
* ``devservices/``: not the server but its local launchers (ZooKeeper, HDFS, a search server, ``talos standalone``
  and a local cluster as processes, by PID), for ``talos cluster up``, ``talos dev`` and the tests; standard
  library only, so importing it needs none of the server's packages.

Its packages come with the ``server`` extra (``pip install 'talos-mq[server]'``). May import ``talos``,
``hashring``, ``fencing`` and ``metering``; outside ``server`` only tests, benchmarks and the CLI's commands (inside
the command functions) import it: the CLI and ``server.devservices`` run the server as ``python -m server``.
``tests/unit/test_import_direction.py`` checks the arrows.
"""
