"""The quota self-service portal (``/portal``): server-rendered pages for tenants and the admin.

May import ``server.security``, ``server.broker``, the HTTP edge's fast path and ``metering`` (the usage charts).
"""

from server.portal.pages import router

__all__ = ["router"]
