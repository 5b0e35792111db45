"""Message trace (JMQ's, as RocketMQ has it): per topic, off / on / sampled 1 in N, servers record what happened
to a message (produced, delivered, committed, retried, dead-lettered) into ``__talos_trace``; an index over that
topic answers "what happened to this message / this key" (docs/trace.md).

``recorder`` and ``events`` are what produce and fetch push into (the broker owns the recorder): below the
services. ``writer``, ``keeper`` (the indexes), ``lookup`` (timelines, as REST and the portal ask) and
``service`` are a coordinator built on the services (``server.messaging``); they never import an edge. The REST
routes are ``server.http.routes.trace``, the portal's page ``server.portal.trace_page``."""
