"""An HDFS file dropped by the server closes its writer on the closer's thread, never on the thread that drops it.

Closing a writer is a NameNode call that hangs while the NameNode is unreachable; made on the server's event loop
it stopped every request, ``/healthz`` too (222 s under the campaign's flapping links: the cycle collector,
running on the loop, finalized a dead cycle holding a file and ``hdfs_native.FileWriter``'s own finalizer closed
it there). The native writer here is a stand-in whose close records its thread: no NameNode can be made to hang
on cue inside a unit test (the campaign does it for real).
"""

from __future__ import annotations

import gc
import threading
import time

import hdfs_native

from fencing.hdfs import HdfsFile


class NativeWriter:
    """Stands for ``hdfs_native``'s native writer: a close that blocks, as against an unreachable NameNode."""

    def __init__(self) -> None:
        self.closed_on: list[str] = []
        self.release = threading.Event()

    def close(self) -> None:
        self.closed_on.append(threading.current_thread().name)
        self.release.wait(2)


def _closed(writer: NativeWriter) -> list[str]:
    deadline = time.monotonic() + 10
    while not writer.closed_on and time.monotonic() < deadline:
        time.sleep(0.01)
    return writer.closed_on


def test_a_file_collected_in_a_cycle_closes_its_writer_on_the_closers_thread() -> None:
    writer = NativeWriter()
    file = HdfsFile("/talos/topics/t/0/x.log", hdfs_native.FileWriter(writer))  # type: ignore[arg-type]
    cycle: dict[str, object] = {"file": file}
    file.held_by = cycle  # type: ignore[attr-defined]
    del file, cycle
    gc.collect()
    closed_on = _closed(writer)
    writer.release.set()
    assert closed_on == ["talos-hdfs-closer"]


def test_a_file_dropped_unclosed_closes_its_writer_on_the_closers_thread() -> None:
    writer = NativeWriter()
    file = HdfsFile("/talos/topics/t/0/y.log", hdfs_native.FileWriter(writer))  # type: ignore[arg-type]
    del file
    closed_on = _closed(writer)
    writer.release.set()
    assert closed_on == ["talos-hdfs-closer"]


def test_a_closed_file_closed_its_writer_on_the_callers_thread() -> None:
    writer = NativeWriter()
    writer.release.set()
    file = HdfsFile("/talos/topics/t/0/z.log", hdfs_native.FileWriter(writer))  # type: ignore[arg-type]
    file.close()
    assert writer.closed_on == [threading.current_thread().name]
