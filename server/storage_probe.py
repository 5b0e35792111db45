"""The storage probe: a small durable write now and then, so that an idle server knows whether it can write.

Flushes tell :class:`~server.storage_health.StorageHealth` how the storage does while a server has traffic;
the probe covers the quiet times (a server with no partitions, one that stepped down and waits to come
back, a peer whose evidence another server's step-down needs). It writes only when no storage operation
succeeded within the last interval. Each probe runs on a daemon thread of its own: a probe stuck inside the
storage client (a cut from HDFS) must not stop the next one, whose success shows the storage is back, nor
hold up the process's exit.
"""

from __future__ import annotations

import itertools
import logging
import os
import posixpath
import threading
import time

from fencing import FileSystem
from server.storage_health import StorageHealth

__all__ = ["StorageProbe"]

log = logging.getLogger("talos.storage")

_MAX_STUCK = 4  # probes left inside a hung storage call before no new one starts


class StorageProbe:
    def __init__(self, fs: FileSystem, root: str, server_id: str, health: StorageHealth, *, interval_s: float) -> None:
        self._fs = fs
        self._directory = posixpath.join(root, "_health")
        self._server_id = server_id
        self._count = itertools.count()
        self._health = health
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._probes: list[tuple[float, threading.Thread]] = []  # (started, thread)
        self._thread = threading.Thread(target=self._run, name="talos-storage-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            if time.time() * 1000 - self._health.last_ok_ms() < self._interval_s * 1000:
                continue  # a flush succeeded a moment ago: nothing to learn
            now = time.monotonic()
            self._probes = [(started, t) for started, t in self._probes if t.is_alive()]
            if self._probes and (now - self._probes[-1][0] < 5 * self._interval_s or len(self._probes) >= _MAX_STUCK):
                continue  # the last one is still running, not long enough to call it stuck
            thread = threading.Thread(target=self.probe, name="talos-storage-probe-write", daemon=True)
            self._probes.append((now, thread))
            thread.start()

    def probe(self) -> None:
        """One durable write and its removal (blocking). A file of its own: a stuck probe that comes back to
        life later must not collide with the next."""
        path = posixpath.join(self._directory, f"{self._server_id}.{os.getpid()}.{next(self._count)}")
        try:
            with self._health.operation("storage probe"):
                self._fs.write_file(path, b"ok")
                self._fs.delete(path)
        except Exception as exc:
            log.debug("storage probe failed: %r", exc)
