"""The HTTP edge: the FastAPI application and its routes (``app``, ``messages``, ``connector_offsets``), the
raw-ASGI fast path (``fastpath``), replies (``reply``), forwarding to a partition's owner (``forwarding``),
readiness (``readiness``), the served OpenAPI document (``openapi``) and the connection limits of the HTTP
server (``connections``).

May import everything else in ``server`` (the broker, the partition and usage rooms, groups, security, portal),
``fencing``, ``talos`` and ``metering``; nothing outside this room imports it except the process entry
(``server.__main__``), the broker (for its forwarder) and ``server.internal_topics`` (which writes through
``messages``).
"""
