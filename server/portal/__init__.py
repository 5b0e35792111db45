"""The quota self-service portal (``/portal``): server-rendered pages for tenants and the admin."""

from server.portal.pages import router

__all__ = ["router"]
