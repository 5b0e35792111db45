"""HDFS backend on ``hdfs-native`` (native RPC): create-exclusive, append, ``hsync``, lease recovery."""

from __future__ import annotations

import contextlib
import io
import posixpath
import queue
import threading
import time

import hdfs_native
import hdfs_native._internal

from fencing.errors import StorageError
from fencing.filesystem import Buffer, FileInfo, FileSystem, storage_errors

__all__ = ["HdfsFileSystem"]


class _Closer:
    """Closes the writers of files dropped by the server, on a thread of its own.

    Closing a writer is a NameNode call, made by whichever thread drops the last reference when it is left to a
    finalizer. A log abandoned because its storage hangs is dropped on the server's event loop, and the close
    then blocked the loop (every request, ``/healthz`` too) for as long as the NameNode was unreachable: 52 s
    under the "owner cut from HDFS" fault, 222 s under flapping links when the cycle collector found the file
    in a cycle. Dropped writers are handed here instead; a close that hangs holds up only this thread."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[hdfs_native._internal.RawFileWriter] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def close_later(self, writer: hdfs_native._internal.RawFileWriter) -> None:
        """Close ``writer`` (again, if it was: an error then, ignored) and drop it, on the closer's thread."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="talos-hdfs-closer", daemon=True)
                self._thread.start()
        self._queue.put(writer)

    def _run(self) -> None:
        while True:
            writer = self._queue.get()
            with contextlib.suppress(Exception):
                writer.close()
            del writer


_closer = _Closer()


class HdfsFile:
    def __init__(self, path: str, writer: hdfs_native.FileWriter) -> None:
        self._path = path
        # The file writes through the native writer itself. The wrapper (an ``io.RawIOBase``) is marked closed
        # by the base class, which calls no NameNode: its finalizer, which closes the native writer, would
        # otherwise run on whatever thread collects it, even after __del__ below handed the writer on (the
        # cycle collector finalizes every object of a dead cycle, the wrapper too).
        self._writer = writer.inner
        io.RawIOBase.close(writer)
        self._closed = False

    def __del__(self) -> None:
        _closer.close_later(self._writer)

    @property
    def path(self) -> str:
        return self._path

    def write(self, data: Buffer) -> None:
        with storage_errors("write to", self._path):
            self._writer.write(data)

    def sync(self) -> None:
        # Fails with DataTransferError once another client recovered the lease: that fences this writer.
        with storage_errors("hsync of", self._path):
            self._writer.hsync()

    def write_synced(self, data: Buffer) -> None:
        self.write(data)
        self.sync()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with storage_errors("close of", self._path):
            self._writer.close()

    def still_linked(self) -> bool:
        return True  # the lease fences this writer; no path check needed


#: How long a datanode may stay silent on an open connection (Hadoop's ``dfs.client.socket-timeout``, 60 s there).
SOCKET_TIMEOUT_MS = 20_000


class HdfsFileSystem(FileSystem):
    lease_fencing = True
    reads_open_files = False  # hsync'd bytes of an open file are invisible to readers

    def __init__(self, namenode_url: str) -> None:
        self.url = namenode_url
        # A read of a datanode that never answers (a connection left half-open by a network cut) fails after this
        # instead of holding its thread for good.
        self._client = hdfs_native.Client(namenode_url, config={"dfs.client.socket-timeout": str(SOCKET_TIMEOUT_MS)})

    def create(self, path: str) -> HdfsFile:
        options = hdfs_native.WriteOptions(create_parent=True, overwrite=False)
        with storage_errors("create", path):
            return HdfsFile(path, self._client.create(path, options))

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        with storage_errors("read", path), self._client.read(path) as reader:
            size = len(reader)
            if length < 0 or offset + length > size:
                length = max(size - offset, 0)
            return bytes(reader.read_range(offset, length)) if length else b""

    def size(self, path: str) -> int:
        with storage_errors("stat", path):
            return int(self._client.get_file_info(path).length)

    def list(self, path: str) -> list[FileInfo]:
        with storage_errors("list", path):
            statuses = list(self._client.list_status(path))
        out = [FileInfo(posixpath.basename(s.path), s.length, s.isdir, s.modification_time) for s in statuses]
        return sorted(out, key=lambda info: info.name)

    def rename(self, src: str, dst: str) -> None:
        try:
            self._client.rename(src, dst, False)
        except FileExistsError:
            raise FileExistsError(dst) from None
        except FileNotFoundError:
            raise FileNotFoundError(src) from None
        except (OSError, RuntimeError) as exc:
            raise StorageError(f"rename {src} -> {dst}: {str(exc).splitlines()[0]}") from exc

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        try:
            with storage_errors("delete", path):
                return bool(self._client.delete(path, recursive))
        except FileNotFoundError:
            return False

    def mkdirs(self, path: str) -> None:
        with storage_errors("mkdirs", path):
            self._client.mkdirs(path, 0o755, True)

    def exists(self, path: str) -> bool:
        try:
            with storage_errors("stat", path):
                self._client.get_file_info(path)
        except FileNotFoundError:
            return False
        return True

    def recover_lease(self, path: str, *, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            try:
                with storage_errors("recover lease of", path):
                    if self._client.recover_lease(path):
                        return
            except FileExistsError:
                # AlreadyBeingCreatedException (hdfs-native reports it as an existing file): the writer was
                # closing the file, and its last block is committed but not yet reported by a DataNode. The
                # NameNode says "try again later"; the file itself is still there (a missing one raises
                # FileNotFoundError, which the takeover looks at again).
                pass
            if time.monotonic() > deadline:
                raise StorageError(
                    f"lease of {path} not recovered within {timeout:.0f}s: the DataNodes' block recovery keeps "
                    "failing (their logs say why; see docs/storage.md, 'A known HDFS 2.7.3 fault')"
                )
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
