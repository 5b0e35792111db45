"""HDFS backend on ``hdfs-native`` (native RPC): create-exclusive, append, ``hsync``, lease recovery."""

from __future__ import annotations

import posixpath
import time

import hdfs_native

from fencing.errors import StorageError
from fencing.filesystem import Buffer, FileInfo, FileSystem

__all__ = ["HdfsFileSystem"]


def _storage_error(what: str, exc: Exception) -> StorageError:
    return StorageError(f"{what}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")


class HdfsFile:
    def __init__(self, path: str, writer: hdfs_native.FileWriter) -> None:
        self._path = path
        self._writer = writer
        self._closed = False

    @property
    def path(self) -> str:
        return self._path

    def write(self, data: Buffer) -> None:
        try:
            self._writer.write(data)
        except (RuntimeError, OSError) as exc:
            raise _storage_error(f"write to {self._path}", exc) from exc

    def sync(self) -> None:
        try:
            self._writer.hsync()
        except (RuntimeError, OSError) as exc:  # DataTransferError once another client recovered the lease
            raise _storage_error(f"hsync of {self._path}", exc) from exc

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._writer.close()
        except (RuntimeError, OSError) as exc:
            raise _storage_error(f"close of {self._path}", exc) from exc

    def still_linked(self) -> bool:
        return True  # the lease fences this writer; no path check needed


class HdfsFileSystem(FileSystem):
    lease_fencing = True
    reads_open_files = False  # hsync'd bytes of an open file are invisible to readers

    def __init__(self, namenode_url: str) -> None:
        self.url = namenode_url
        self._client = hdfs_native.Client(namenode_url)

    def create(self, path: str) -> HdfsFile:
        options = hdfs_native.WriteOptions(create_parent=True, overwrite=False)
        try:
            return HdfsFile(path, self._client.create(path, options))
        except FileExistsError:
            raise FileExistsError(path) from None
        except RuntimeError as exc:
            raise _storage_error(f"create {path}", exc) from exc

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        try:
            with self._client.read(path) as reader:
                size = len(reader)
                if length < 0 or offset + length > size:
                    length = max(size - offset, 0)
                return bytes(reader.read_range(offset, length)) if length else b""
        except FileNotFoundError:
            raise FileNotFoundError(path) from None
        except RuntimeError as exc:
            raise _storage_error(f"read {path}", exc) from exc

    def size(self, path: str) -> int:
        try:
            return int(self._client.get_file_info(path).length)
        except FileNotFoundError:
            raise FileNotFoundError(path) from None

    def list(self, path: str) -> list[FileInfo]:
        try:
            statuses = list(self._client.list_status(path))
        except FileNotFoundError:
            raise FileNotFoundError(path) from None
        except RuntimeError as exc:
            raise _storage_error(f"list {path}", exc) from exc
        out = [FileInfo(posixpath.basename(s.path), s.length, s.isdir, s.modification_time) for s in statuses]
        return sorted(out, key=lambda info: info.name)

    def rename(self, src: str, dst: str) -> None:
        try:
            self._client.rename(src, dst, False)
        except FileExistsError:
            raise FileExistsError(dst) from None
        except FileNotFoundError:
            raise FileNotFoundError(src) from None
        except RuntimeError as exc:
            raise _storage_error(f"rename {src} -> {dst}", exc) from exc

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        try:
            return bool(self._client.delete(path, recursive))
        except FileNotFoundError:
            return False
        except RuntimeError as exc:
            raise _storage_error(f"delete {path}", exc) from exc

    def mkdirs(self, path: str) -> None:
        try:
            self._client.mkdirs(path, 0o755, True)
        except RuntimeError as exc:
            raise _storage_error(f"mkdirs {path}", exc) from exc

    def exists(self, path: str) -> bool:
        try:
            self._client.get_file_info(path)
        except FileNotFoundError:
            return False
        return True

    def recover_lease(self, path: str, *, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            try:
                if self._client.recover_lease(path):
                    return
            except FileNotFoundError:
                raise FileNotFoundError(path) from None
            except RuntimeError as exc:
                raise _storage_error(f"recover lease of {path}", exc) from exc
            if time.monotonic() > deadline:
                raise StorageError(f"lease of {path} not recovered within {timeout:.0f}s")
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
