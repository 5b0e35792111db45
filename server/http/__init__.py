"""The HTTP edge: the FastAPI application and its routes (``app``, ``messages``, ``connector_offsets``), the
raw-ASGI fast path (``fastpath``), replies (``reply``), forwarding to a partition's owner (``forwarding``),
readiness (``readiness``), the served OpenAPI document (``openapi``) and the connection limits of the HTTP
server (``connections``).

May import everything else in ``server`` (the broker, the partition and usage rooms, groups, security, portal),
``fencing``, ``talos`` and ``metering``. Imported by the process entry (``server.__main__``); by the REST
modules of the other rooms (``groups.api``, ``security.api``, ``portal``) for replies and the fast path; by
``groups.coordinator`` and ``server.internal_topics``, which write through ``messages``; and by the broker,
for its forwarder. The partition and usage rooms never import it (tests/unit/test_import_direction.py).
"""
