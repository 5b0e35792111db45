"""The search server client, shared by the Elasticsearch sink and source.

``opensearch-py`` rather than ``elasticsearch``: the ``elasticsearch`` client (8.x, 9.x) refuses to talk
to a server that does not answer with ``X-Elastic-Product: Elasticsearch`` (OpenSearch does not) and
sends ``compatible-with`` media types that OpenSearch rejects; ``opensearch-py`` sends plain JSON, which
OpenSearch, Elasticsearch 7 and Elasticsearch 8 all accept, and the connectors use only APIs the three
share (``_bulk``, ``_search`` with ``search_after``, ``_index_template``).
"""

from __future__ import annotations

from typing import Any

from opensearchpy import ConnectionError as SearchConnectionError
from opensearchpy import ConnectionTimeout, OpenSearch, TransportError

__all__ = ["RETRIABLE_STATUSES", "connect", "retriable"]

RETRIABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


def connect(settings: Any) -> OpenSearch:
    """A client of ``settings.hosts`` (the connectors do their own retries, with backoff)."""
    auth = (settings.username, settings.password or "") if settings.username else None
    return OpenSearch(hosts=settings.hosts, http_auth=auth, timeout=settings.timeout_s, max_retries=0)


def retriable(error: BaseException) -> bool:
    """Unreachable, timed out, overloaded (429) or failing (5xx): try again later."""
    if isinstance(error, (SearchConnectionError, ConnectionTimeout)):
        return True
    return isinstance(error, TransportError) and error.status_code in RETRIABLE_STATUSES
