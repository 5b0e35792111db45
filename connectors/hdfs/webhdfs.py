"""The HDFS connectors' WebHDFS client (the ``hdfs`` package), on a session of its own that is closed."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import requests
from hdfs import InsecureClient

__all__ = ["webhdfs"]


@contextlib.contextmanager
def webhdfs(namenode: str, user: str | None) -> Iterator[InsecureClient]:
    """A client of the NameNode's WebHDFS address (requests time out after 30 s)."""
    session = requests.Session()
    try:
        yield InsecureClient(namenode, user=user, timeout=30, session=session)
    finally:
        session.close()
