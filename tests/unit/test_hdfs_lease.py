"""Lease recovery retries the NameNode's transient refusals (``fencing.hdfs``).

A split-brain round on the real HDFS found this (tests/integration/test_split_brain.py): the taker asked for the
lease while the old writer was closing the segment, and the NameNode answered AlreadyBeingCreatedException
("committed blocks are waiting to be minimally replicated, try again later"), which hdfs-native raises as
``FileExistsError``. The timing cannot be arranged on demand, so the client here is a stand-in that answers as
the NameNode did; the real one runs under the split-brain and filesystem-contract tests.
"""

from __future__ import annotations

import pytest

from fencing.errors import StorageError
from fencing.hdfs import HdfsFileSystem


class _NameNode:
    """Refuses ``refusals`` times as a NameNode with a committed, unreported last block does, then says whether
    the file is closed."""

    def __init__(self, refusals: int, *, closes: bool = True) -> None:
        self.refusals = refusals
        self.closes = closes
        self.calls = 0

    def recover_lease(self, path: str) -> bool:
        self.calls += 1
        if self.calls <= self.refusals:
            raise FileExistsError(f"AlreadyBeingCreatedException: failed to release lease for file {path}")
        return self.closes


def _fs(namenode: _NameNode) -> HdfsFileSystem:
    fs = HdfsFileSystem.__new__(HdfsFileSystem)  # no connection: the client is the stand-in
    fs._client = namenode  # type: ignore[assignment]
    return fs


def test_try_again_later_is_retried_until_the_lease_is_recovered() -> None:
    namenode = _NameNode(refusals=3)
    _fs(namenode).recover_lease("/p/segment.log", timeout=10)
    assert namenode.calls == 4


def test_refusals_past_the_timeout_are_a_storage_error() -> None:
    namenode = _NameNode(refusals=1000)
    with pytest.raises(StorageError, match="not recovered within"):
        _fs(namenode).recover_lease("/p/segment.log", timeout=0.2)


def test_a_missing_file_is_still_reported_as_missing() -> None:
    class Gone(_NameNode):
        def recover_lease(self, path: str) -> bool:
            raise FileNotFoundError(path)

    with pytest.raises(FileNotFoundError):
        _fs(Gone(0)).recover_lease("/p/segment.log", timeout=10)
