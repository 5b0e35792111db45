"""The quota self-service portal (``/portal``): server-rendered pages for tenants and the admin.

May import ``server.security``, ``server.broker``, the HTTP edge's fast path and ``metering`` (the usage charts).
"""

from server.portal.pages import router
from server.portal.trace_page import trace_page  # registers /portal/trace on the router

__all__ = ["router", "trace_page"]
