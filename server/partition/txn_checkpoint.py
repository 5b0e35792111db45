"""Checkpoints of a partition's transactions, so that a load knows the open transactions and the aborted ones
of the whole log while reading only its tail (as the producers' state is rebuilt): ``_txn/<offset:020d>`` in
the partition's directory holds the state after every batch below ``offset``.

The owner writes one while the partition has transaction state, whenever it changed since the last one, or
when the last one fell out of the tail a load reads; a load starts from the newest one at or below the
durable end and reads the log from there (or from the tail, whichever is older). Each is published whole
(written aside, then renamed), and the state at an offset is a function of the log below it, which every
owner shares: a checkpoint written late by a fenced owner is as true as the new owner's. The two newest
are kept.
"""

from __future__ import annotations

import contextlib
import logging
import posixpath
from typing import Any

import orjson

from fencing import FileSystem
from server.partition.transactions import AbortedTransaction, PartitionTransactions

__all__ = ["CHECKPOINT_DIR", "decode", "encode", "latest", "state_at", "write"]

log = logging.getLogger("talos.server")

CHECKPOINT_DIR = "_txn"
_VERSION = 1
_KEEP = 2


def state_at(state: PartitionTransactions, offset: int) -> PartitionTransactions:
    """What ``state`` (the live one, which may hold batches and markers not durable yet) says about the log
    below ``offset`` (durable): a transaction whose marker is at or past it is still open there, and one whose
    marker is below it is decided there, even if the live state has not heard yet that its flush is done (the
    log's durable offset moves in the I/O thread, the state a moment later on the event loop: a checkpoint
    taken between the two once left out an aborted transaction, whose records a load then took as committed)."""
    open_ = {pid: first for pid, first in state.open.items() if first < offset}
    epochs = {pid: state.epochs[pid] for pid in open_ if pid in state.epochs}
    aborted = [t for t in state.aborted if t.last_offset < offset]
    for closing in state.closing:
        if closing.first_offset >= offset:
            continue
        if closing.marker_offset >= offset:
            open_[closing.producer_id] = closing.first_offset  # (its epoch went with the marker: unknown, 0)
        elif not closing.committed:
            aborted.append(AbortedTransaction(closing.marker_offset, closing.first_offset, closing.producer_id))
    return PartitionTransactions(open_, sorted(aborted), [], dict(state.coordinator_epochs), epochs)


def encode(state: PartitionTransactions, offset: int) -> bytes:
    """The checkpoint of ``state`` (durable, nothing closing) at ``offset``."""
    document = {
        "v": _VERSION,
        "offset": offset,
        "open": [[pid, first] for pid, first in sorted(state.open.items())],
        "aborted": [[t.producer_id, t.first_offset, t.last_offset] for t in state.aborted],
        "coordinator_epochs": [[pid, epoch] for pid, epoch in sorted(state.coordinator_epochs.items())],
        "epochs": [[pid, epoch] for pid, epoch in sorted(state.epochs.items())],
    }
    return orjson.dumps(document)


def decode(data: bytes) -> tuple[int, PartitionTransactions]:
    """(offset, state) of a checkpoint; ValueError if it is not one this version reads."""
    try:
        document: Any = orjson.loads(data)
        if document.get("v") != _VERSION:
            raise ValueError(f"checkpoint version {document.get('v')!r}")
        aborted = sorted(AbortedTransaction(int(end), int(first), int(pid)) for pid, first, end in document["aborted"])
        state = PartitionTransactions(
            {int(pid): int(first) for pid, first in document["open"]},
            aborted,
            [],
            {int(pid): int(epoch) for pid, epoch in document["coordinator_epochs"]},
            {int(pid): int(epoch) for pid, epoch in document.get("epochs", [])},
        )
        return int(document["offset"]), state
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError) as exc:
        raise ValueError(f"not a transaction checkpoint: {exc}") from exc


def _name(offset: int) -> str:
    return f"{offset:020d}"


def write(fs: FileSystem, directory: str, state: PartitionTransactions, offset: int) -> None:
    """Publish the checkpoint of ``state`` at ``offset`` (durable) and drop all but the newest two. In an I/O
    thread."""
    folder = posixpath.join(directory, CHECKPOINT_DIR)
    fs.mkdirs(folder)
    with contextlib.suppress(FileExistsError):  # the same offset's state, written already
        fs.publish(posixpath.join(folder, _name(offset)), encode(state_at(state, offset), offset))
    names = sorted(info.name for info in fs.list(folder) if info.name.isdigit())
    for old in names[:-_KEEP]:
        with contextlib.suppress(OSError):
            fs.delete(posixpath.join(folder, old))


def latest(fs: FileSystem, directory: str, durable: int) -> tuple[int, PartitionTransactions] | None:
    """The newest readable checkpoint at or below ``durable``; None if there is none. In an I/O thread."""
    folder = posixpath.join(directory, CHECKPOINT_DIR)
    if not fs.exists(folder):
        return None
    for name in sorted((info.name for info in fs.list(folder) if info.name.isdigit()), reverse=True):
        if int(name) > durable:
            continue  # (cannot happen: written below a durable end no load takes back; never trusted anyway)
        try:
            return decode(fs.read(posixpath.join(folder, name)))
        except (ValueError, OSError) as exc:
            log.warning("%s: transaction checkpoint %s unreadable (%s); trying an older one", directory, name, exc)
    return None
