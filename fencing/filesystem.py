"""The small filesystem interface the segment log is written against.

Two implementations: :class:`fencing.local.LocalFileSystem` (POSIX) and
:class:`fencing.hdfs.HdfsFileSystem` (HDFS through ``hdfs-native``). Paths are absolute, ``/``-separated
strings inside the filesystem. Missing paths raise :class:`FileNotFoundError`, existing ones
:class:`FileExistsError`; everything else the storage reports becomes :class:`fencing.errors.StorageError`.
"""

from __future__ import annotations

import abc
import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from fencing.errors import StorageError

__all__ = ["FileInfo", "FileSystem", "WritableFile", "storage_errors"]

Buffer = bytes | bytearray | memoryview


@contextlib.contextmanager
def storage_errors(what: str, path: str) -> Iterator[None]:
    """Let missing/existing-path errors through (naming ``path`` only); any other failure of the
    storage (a full disk, an I/O error, a lost connection) becomes :class:`StorageError`."""
    try:
        yield
    except FileNotFoundError:
        raise FileNotFoundError(path) from None
    except FileExistsError:
        raise FileExistsError(path) from None
    except (OSError, RuntimeError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise StorageError(f"{what} {path}: {detail}") from exc


@dataclass(frozen=True, slots=True)
class FileInfo:
    name: str  # the last path component
    size: int
    is_dir: bool
    mtime_ms: int


class WritableFile(Protocol):
    """A file open for appending by exactly one writer."""

    @property
    def path(self) -> str: ...

    def write(self, data: Buffer) -> None:
        """Append all of ``data``; not durable until :meth:`sync`."""

    def sync(self) -> None:
        """Make every byte written so far durable (``fdatasync`` / ``hsync``)."""

    def write_synced(self, data: Buffer) -> None:
        """:meth:`write` then :meth:`sync`, in one step where the storage can (a flush's whole I/O)."""

    def close(self) -> None:
        """Close the file; on HDFS this makes its bytes visible to readers."""

    def still_linked(self) -> bool:
        """Whether :attr:`path` still names the file this writer has open (POSIX fencing check)."""


class FileSystem(abc.ABC):
    """Storage for partition directories."""

    #: Recovering a file's lease stops its old writer (HDFS). Without it (POSIX) a takeover moves the open
    #: segments aside and writers check their path after every sync.
    lease_fencing: bool
    #: Readers see bytes of a file that is still open for writing (POSIX yes; HDFS no).
    reads_open_files: bool

    @abc.abstractmethod
    def create(self, path: str) -> WritableFile:
        """Create ``path`` exclusively (parents too) and open it for appending."""

    @abc.abstractmethod
    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        """Read ``length`` bytes (``-1``: to the end) from ``offset``; short at the end of the file."""

    @abc.abstractmethod
    def size(self, path: str) -> int: ...

    @abc.abstractmethod
    def list(self, path: str) -> list[FileInfo]:
        """The entries of directory ``path``, sorted by name."""

    @abc.abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Atomically rename; never overwrites (:class:`FileExistsError`)."""

    @abc.abstractmethod
    def delete(self, path: str, *, recursive: bool = False) -> bool:
        """Delete ``path``; False if it did not exist."""

    @abc.abstractmethod
    def mkdirs(self, path: str) -> None: ...

    @abc.abstractmethod
    def exists(self, path: str) -> bool: ...

    @abc.abstractmethod
    def recover_lease(self, path: str, *, timeout: float = 60.0) -> None:
        """Close ``path`` for its current writer, whoever that is, and wait until it is closed."""

    def write_file(self, path: str, data: bytes) -> None:
        """Create ``path`` exclusively with ``data``, durably."""
        handle = self.create(path)
        try:
            handle.write(data)
            handle.sync()
        finally:
            handle.close()

    def publish(self, path: str, data: bytes) -> None:
        """Write ``data`` aside, then rename it to ``path``, which must not exist (:class:`FileExistsError`):
        a reader sees the whole file or none, and of two writers of one path exactly one wins."""
        aside = f"{path}.{uuid.uuid4().hex}.tmp"
        self.write_file(aside, data)
        try:
            self.rename(aside, path)
        except FileExistsError:
            self.delete(aside)
            raise

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""
