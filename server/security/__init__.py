"""Tenants, bearer tokens, per-topic ACLs, quotas and quota requests (ARCHITECTURE.md, "Quotas and the portal").

- ``tokens``: token format and hashing (pure).
- ``state``: the security document (tenants, tokens, grants, quotas, requests) and its changes (pure).
- ``access``: who may do what to a topic (pure).
- ``buckets``: token buckets and the quota gate enforced on a partition's owner.
- ``store``: the document in the storage, versioned, re-read by every server.
- ``guard``: the server's edge: authenticate, authorize, admit.
- ``audit``: the audit log, kept in the internal topic ``__talos_audit``.
- ``requests``: quota requests, as the REST API and the portal make and decide them.

Imports the broker and below (and ``internal_topics`` for the audit log); never an edge or the services. The
REST endpoints (``/v1/tenants``, ``/v1/acls``, ``/v1/quotas``, ``/v1/quota-requests``, ``/v1/audit``) are
``server.http.routes.security``.
"""
