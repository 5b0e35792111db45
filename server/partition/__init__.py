"""The partition write and read path: a loaded partition's group commit and fetch (``loaded``), the tail cache
(``tailcache``), idempotent producer state (``producers``) and producer ids (``producer_ids``), and the storage
I/O executors (``executor``).

May import ``fencing``, ``talos`` and the top of ``server`` that imports no room (``server.errors``,
``server.metrics``, ``server.config``); not the HTTP edge, the usage room or ``server.broker``.
"""
