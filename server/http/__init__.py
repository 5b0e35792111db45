"""The REST edge: parse an HTTP request, call the service layer (``server.messaging``), encode the answer.

- ``app``: the REST routes of topics, producers, cluster and health and the message routes (``install``).
- ``messages``: produce, fetch, offsets and fence over REST (JSON or record batches), a request for another
  server's partition relayed whole to its owner.
- ``fastpath`` and ``hot_cycle``: the raw ASGI front and the ASGI-less cycle for the hot endpoints.
- ``routes``: the REST routers of groups, subscriptions, security, connector checkpoints and the trace.
- ``forwarding``: a REST request relayed to a coordinator; ``readiness``, ``openapi``, ``connections``.

May import the services (``server.messaging``) and the coordinators built on them (groups, subscriptions,
trace, connect offsets, internal topics), security, the broker and below, and ``server.web``; never another
edge (``server.kafka``, ``server.portal``, ``server.push``). Only the app assembly (``server.app``) and the
process entry import it (tests/unit/test_import_direction.py).
"""
