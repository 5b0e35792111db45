"""The storage factory: a storage URL to the filesystem backend and the root path inside it.

Kept apart from ``fencing.filesystem`` (the interface every backend imports) so that no backend module
imports a module that imports it back. May import ``fencing.filesystem`` and the backends.
"""

from __future__ import annotations

import os
import posixpath
from urllib.parse import urlparse

from fencing.filesystem import FileSystem
from fencing.local import LocalFileSystem

__all__ = ["open_storage"]


def open_storage(url: str) -> tuple[FileSystem, str]:
    """Select the filesystem for a storage URL; returns it and the root path inside it.

    ``file:///var/lib/talos`` or a plain path → local; ``hdfs://host:port/talos`` or
    ``hdfs://nameservice/talos`` (NameNode HA, from ``HADOOP_CONF_DIR``) → HDFS.
    """
    parsed = urlparse(url)
    if parsed.scheme == "hdfs":
        # Imported here so that a server on local storage never loads the HDFS client library.
        from fencing.hdfs import HdfsFileSystem

        if not parsed.hostname:
            raise ValueError(f"{url!r}: an hdfs:// URL needs a host (hdfs://host:port/path)")
        # As given: without a port the host may be an HA nameservice of HADOOP_CONF_DIR's hdfs-site.xml,
        # which the client resolves to the active NameNode (a bare host name gets port 8020 there too).
        namenode = f"hdfs://{parsed.netloc}"
        return HdfsFileSystem(namenode), posixpath.normpath(parsed.path or "/")
    if parsed.scheme in ("file", ""):
        path = parsed.path if parsed.scheme == "file" else url
        return LocalFileSystem(), os.path.abspath(path)
    raise ValueError(f"{url!r}: storage URLs are file:///path or hdfs://host:port/path")
