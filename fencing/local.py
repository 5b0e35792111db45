"""POSIX filesystem backend: ``O_APPEND`` writes, ``fdatasync``, no-overwrite rename, durable directories."""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
from typing import ClassVar

from fencing.errors import StorageError
from fencing.filesystem import Buffer, FileInfo, FileSystem, storage_errors

__all__ = ["LocalFileSystem"]

_RENAME_NOREPLACE = 1
_AT_FDCWD = -100
_libc = ctypes.CDLL(None, use_errno=True)
_renameat2 = getattr(_libc, "renameat2", None)


def _fsync_dir(path: str) -> None:
    # A new or renamed entry is durable only once its directory is synced.
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _rename_noreplace(src: str, dst: str) -> None:
    if _renameat2 is not None:
        if _renameat2(_AT_FDCWD, src.encode(), _AT_FDCWD, dst.encode(), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOSYS):  # the filesystem does not support the flag
            raise OSError(err, os.strerror(err), src, None, dst)
    # link() refuses an existing target atomically; the source name is dropped afterwards.
    os.link(src, dst)
    os.unlink(src)


class LocalFile:
    #: Whether a write can carry its own sync (``pwritev2`` with ``RWF_DSYNC``: Linux 4.7+); cleared at the
    #: first refusal, by a kernel or filesystem without it.
    dsync_writes: ClassVar[bool] = hasattr(os, "pwritev") and hasattr(os, "RWF_DSYNC")

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o644)
        stat = os.fstat(self._fd)
        self._identity = (stat.st_dev, stat.st_ino)

    @property
    def path(self) -> str:
        return self._path

    def write(self, data: Buffer) -> None:
        view = memoryview(data)
        with storage_errors("write to", self._path):  # ENOSPC, EFBIG, EIO: the log stops writing
            while view:
                written = os.write(self._fd, view)
                view = view[written:]

    def sync(self) -> None:
        with storage_errors("fdatasync of", self._path):
            os.fdatasync(self._fd)

    def write_synced(self, data: Buffer) -> None:
        # One system call (RWF_DSYNC: the write returns once it is as durable as after fdatasync), so one
        # wait for the GIL after it instead of two: under load that wait costs as much as the sync.
        view = memoryview(data)
        if LocalFile.dsync_writes:
            with storage_errors("write to", self._path):
                try:
                    while view:
                        view = view[os.pwritev(self._fd, [view], -1, os.RWF_DSYNC) :]
                    return
                except OSError as exc:
                    if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL) or len(view) != len(data):
                        raise
            LocalFile.dsync_writes = False
        self.write(view)
        self.sync()

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            with storage_errors("close of", self._path):
                os.close(fd)

    def still_linked(self) -> bool:
        try:
            stat = os.stat(self._path)
        except FileNotFoundError:
            return False
        return (stat.st_dev, stat.st_ino) == self._identity


class LocalFileSystem(FileSystem):
    lease_fencing = False
    reads_open_files = True

    def create(self, path: str) -> LocalFile:
        parent = os.path.dirname(path)
        self.mkdirs(parent)
        with storage_errors("create", path):
            handle = LocalFile(path)
            try:
                _fsync_dir(parent)
            except OSError:
                handle.close()
                raise
        return handle

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        with storage_errors("read", path):
            return self._read(path, offset, length)

    @staticmethod
    def _read(path: str, offset: int, length: int) -> bytes:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if length < 0:
                length = max(os.fstat(fd).st_size - offset, 0)
            chunks = []
            while length > 0:
                chunk = os.pread(fd, length, offset)
                if not chunk:
                    break
                chunks.append(chunk)
                offset += len(chunk)
                length -= len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def size(self, path: str) -> int:
        with storage_errors("stat", path):
            return os.stat(path).st_size

    def list(self, path: str) -> list[FileInfo]:
        out = []
        with storage_errors("list", path), os.scandir(path) as entries:
            for entry in entries:
                try:
                    stat = entry.stat()
                except FileNotFoundError:  # deleted while listing
                    continue
                is_dir = entry.is_dir()
                out.append(FileInfo(entry.name, 0 if is_dir else stat.st_size, is_dir, stat.st_mtime_ns // 1_000_000))
        return sorted(out, key=lambda info: info.name)

    def rename(self, src: str, dst: str) -> None:
        try:
            _rename_noreplace(src, dst)
        except FileNotFoundError:
            raise FileNotFoundError(src) from None
        except FileExistsError:
            raise FileExistsError(dst) from None
        except OSError as exc:
            raise StorageError(f"rename {src} -> {dst}: {exc}") from exc
        with storage_errors("rename to", dst):
            _fsync_dir(os.path.dirname(dst))
            if os.path.dirname(src) != os.path.dirname(dst):
                _fsync_dir(os.path.dirname(src))

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        try:
            with storage_errors("delete", path):
                if os.path.isdir(path) and not os.path.islink(path):
                    if recursive:
                        shutil.rmtree(path)
                    else:
                        os.rmdir(path)
                else:
                    os.unlink(path)
        except FileNotFoundError:
            return False
        with storage_errors("delete", path):
            _fsync_dir(os.path.dirname(path))
        return True

    def mkdirs(self, path: str) -> None:
        if os.path.isdir(path):
            return
        self.mkdirs(os.path.dirname(path))
        with storage_errors("mkdir", path):
            try:
                os.mkdir(path)
            except FileExistsError:
                return
            _fsync_dir(os.path.dirname(path))

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def recover_lease(self, path: str, *, timeout: float = 60.0) -> None:
        # POSIX has no leases: fencing is the writer's own check of the epoch markers after each sync.
        if not os.path.exists(path):
            raise FileNotFoundError(path)
