"""The filesystem interface behaves the same on the local disk and on the real HDFS."""

from __future__ import annotations

import contextlib

import pytest

from fencing import StorageError, open_storage
from fencing.local import LocalFile
from tests.conftest import Storage


def test_create_is_exclusive_and_creates_parents(storage: Storage) -> None:
    path = storage.path("a", "b", "file")
    handle = storage.fs.create(path)
    handle.write(b"hello")
    handle.sync()
    handle.close()
    with pytest.raises(FileExistsError):
        storage.fs.create(path)
    assert storage.fs.exists(path)
    assert storage.fs.size(path) == 5


@pytest.mark.parametrize("one_call", [True, False], ids=["one-call", "write-then-sync"])
def test_write_synced_appends_after_plain_writes(
    storage: Storage, one_call: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flush's I/O: on POSIX one ``pwritev2(RWF_DSYNC)``, or write + ``fdatasync`` where the kernel or
    filesystem lacks the flag; on HDFS write + ``hsync``. Either way the bytes follow what was written."""
    monkeypatch.setattr(LocalFile, "dsync_writes", one_call and LocalFile.dsync_writes)
    path = storage.path("synced")
    handle = storage.fs.create(path)
    handle.write(b"plain ")
    handle.write_synced(bytearray(b"synced ") * 3000)
    handle.write_synced(memoryview(b"tail"))
    expected = b"plain " + b"synced " * 3000 + b"tail"
    if storage.fs.reads_open_files:
        assert storage.fs.read(path) == expected
    handle.close()
    assert storage.fs.read(path) == expected


def test_appends_and_ranged_reads(storage: Storage) -> None:
    path = storage.path("data")
    handle = storage.fs.create(path)
    payload = bytes(range(256)) * 1000
    for start in range(0, len(payload), 7000):
        handle.write(payload[start : start + 7000])
    handle.write(memoryview(b"tail"))
    handle.sync()
    if storage.fs.reads_open_files:
        assert storage.fs.read(path, 0, 10) == payload[:10]
    handle.close()
    everything = payload + b"tail"
    assert storage.fs.read(path) == everything
    assert storage.fs.read(path, 1000, 5000) == everything[1000:6000]
    assert storage.fs.read(path, len(everything) - 2, 100) == b"il"
    assert storage.fs.read(path, len(everything) + 10, 100) == b""


def test_list_is_sorted_and_reports_sizes(storage: Storage) -> None:
    storage.fs.write_file(storage.path("d", "b"), b"22")
    storage.fs.write_file(storage.path("d", "a"), b"1")
    storage.fs.mkdirs(storage.path("d", "sub"))
    listing = storage.fs.list(storage.path("d"))
    assert [(i.name, i.size, i.is_dir) for i in listing] == [("a", 1, False), ("b", 2, False), ("sub", 0, True)]
    assert all(i.mtime_ms > 0 for i in listing)
    with pytest.raises(FileNotFoundError):
        storage.fs.list(storage.path("missing"))


def test_rename_never_overwrites(storage: Storage) -> None:
    storage.fs.write_file(storage.path("x"), b"x")
    storage.fs.write_file(storage.path("y"), b"y")
    with pytest.raises(FileExistsError):
        storage.fs.rename(storage.path("x"), storage.path("y"))
    assert storage.fs.read(storage.path("y")) == b"y"
    storage.fs.rename(storage.path("x"), storage.path("z"))
    assert not storage.fs.exists(storage.path("x"))
    assert storage.fs.read(storage.path("z")) == b"x"
    with pytest.raises(FileNotFoundError):
        storage.fs.rename(storage.path("x"), storage.path("w"))


@pytest.mark.slow
def test_publish_writes_whole_files_and_never_replaces_one(storage: Storage) -> None:
    path = storage.path("meta", "0000000001.json")
    storage.fs.publish(path, b"first")
    with pytest.raises(FileExistsError):
        storage.fs.publish(path, b"second")
    assert storage.fs.read(path) == b"first"
    assert [entry.name for entry in storage.fs.list(storage.path("meta"))] == ["0000000001.json"]  # nothing aside


@pytest.mark.slow
def test_delete(storage: Storage) -> None:
    storage.fs.write_file(storage.path("gone", "f"), b"f")
    assert storage.fs.delete(storage.path("gone", "f"))
    assert not storage.fs.delete(storage.path("gone", "f"))
    storage.fs.write_file(storage.path("gone", "g"), b"g")
    assert storage.fs.delete(storage.path("gone"), recursive=True)
    assert not storage.fs.exists(storage.path("gone"))


def test_missing_files(storage: Storage) -> None:
    with pytest.raises(FileNotFoundError):
        storage.fs.read(storage.path("nope"))
    with pytest.raises(FileNotFoundError):
        storage.fs.size(storage.path("nope"))
    with pytest.raises(FileNotFoundError):
        storage.fs.recover_lease(storage.path("nope"))


def test_recover_lease_closes_the_file_for_its_writer(storage: Storage) -> None:
    """HDFS: another client's lease recovery makes the old writer fail, keeping exactly the synced bytes.
    POSIX has no leases: recovery is a no-op there and fencing is the writer's own marker check."""
    path = storage.path("leased")
    writer = storage.fs.create(path)
    writer.write(b"synced")
    writer.sync()
    other, _root = open_storage(storage.url)  # a second client, as another server would be
    try:
        other.recover_lease(path, timeout=30)
        if storage.fs.lease_fencing:
            with pytest.raises(StorageError):
                writer.write(b"late")
                writer.sync()
            assert other.read(path) == b"synced"
        else:
            writer.write(b"late")
            writer.sync()
            assert other.read(path) == b"syncedlate"
    finally:
        with contextlib.suppress(StorageError):
            writer.close()
        other.close()


def test_still_linked_follows_the_path(storage: Storage) -> None:
    path = storage.path("linked")
    writer = storage.fs.create(path)
    assert writer.still_linked()
    writer.close()
    storage.fs.rename(path, storage.path("moved"))
    # POSIX writers detect that their path was taken from them; on HDFS the lease does that job.
    assert writer.still_linked() is storage.fs.lease_fencing


def test_open_storage_urls(tmp_path: object) -> None:
    fs, root = open_storage(f"file://{tmp_path}/x/../y")
    assert root.endswith("/y")
    assert not fs.lease_fencing
    _fs2, root2 = open_storage("relative/dir")
    assert root2.startswith("/")
    with pytest.raises(ValueError, match="storage URLs"):
        open_storage("s3://bucket/path")
    with pytest.raises(ValueError, match="needs a host"):
        open_storage("hdfs:///path")
