"""The quota self-service portal (``/portal``): server-rendered pages for tenants and the admin.

An edge: may import the services (``server.messaging``, ``server.trace.lookup``, ``server.security``), the
broker, ``server.web`` (the ASGI types, reading a body) and ``metering`` (the usage charts); never another
edge (``server.http``, ``server.kafka``, ``server.push``). Only the app assembly (``server.app``) imports it.
"""

from server.portal import (  # register the console's pages
    console_cluster,
    console_connectors,
    console_groups,
    console_topics,
)
from server.portal.pages import router
from server.portal.trace_page import trace_page  # registers /portal/trace on the router

__all__ = ["console_cluster", "console_connectors", "console_groups", "console_topics", "router", "trace_page"]
