"""``python -m fencing.compaction_worker``: a server's compaction passes, in a process of their own.

A pass is CPU work in Python (decode every record, hash every key): in the server's process it would hold the
interpreter lock against the event loop that serves every partition. So the server hands the reading and
writing half of a pass (:func:`fencing.compaction.write_pass`) to this process and keeps the commit (the
rename and the swap its readers see) for itself.

One JSON request per line on standard input, one JSON answer per line on standard output; logs go to standard
error. The worker keeps its key index and its storage connection between passes. Request::

    {"storage": URL, "directory": PATH, "epoch": E, "segments": [[NAME, LENGTH], ...], "settings": {...},
     "index_bytes": N, "io_bytes_per_s": R, "now_ms": T, "force": BOOL}

Answer: ``{"outputs": [{"replaced": [NAME, ...], "cleaning": PATH, "name": NAME}, ...], "report": {...}}``,
``{"outputs": null}`` when nothing was due, or ``{"error": {"kind": "fenced" | "storage" | "corrupt" |
"failed", "message": ...}}``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import posixpath
import sys
from typing import Any

from fencing.compaction import CompactionSettings, StoredSegments, Throttle, write_pass
from fencing.errors import FencedError, LogCorruptError, StorageError
from fencing.filesystem import FileSystem
from fencing.key_index import KeyIndex
from fencing.log import SealedSegment
from fencing.segments import SegmentName
from fencing.storage import open_storage

__all__ = ["serve"]

log = logging.getLogger("talos.compaction")


class _Worker:
    def __init__(self) -> None:
        self._storage: dict[str, FileSystem] = {}
        self._index: KeyIndex | None = None
        self._throttle: Throttle | None = None

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        url = request["storage"]
        fs = self._storage.get(url)
        if fs is None:
            fs = self._storage[url] = open_storage(url)[0]
        if self._index is None or self._index.memory_bytes != request["index_bytes"]:
            self._index = KeyIndex(request["index_bytes"])
        if self._throttle is None or self._throttle.rate != (request["io_bytes_per_s"] or None):
            self._throttle = Throttle(request["io_bytes_per_s"] or None)  # one budget for every pass
        directory = request["directory"]
        segments = []
        for name, length in request["segments"]:
            parsed = SegmentName.parse(name)
            assert parsed is not None and parsed.sealed, name
            segments.append(SealedSegment(parsed, posixpath.join(directory, name), length))
        source = StoredSegments(fs, directory, request["epoch"])
        written = write_pass(
            source,
            segments,
            CompactionSettings(**request["settings"]),
            self._index,
            throttle=self._throttle,
            now_ms=request["now_ms"],
            force=request["force"],
        )
        if written is None:
            return {"outputs": None}
        outputs, report = written
        return {
            "outputs": [
                {"replaced": [str(n) for n in o.replaced], "cleaning": o.cleaning, "name": str(o.name)} for o in outputs
            ],
            "report": dataclasses.asdict(report),
        }


def _error(kind: str, exc: BaseException) -> dict[str, Any]:
    return {"error": {"kind": kind, "message": str(exc) or type(exc).__name__}}


def serve() -> None:
    worker = _Worker()
    for line in sys.stdin:
        try:
            answer = worker.run(json.loads(line))
        except FencedError as exc:
            answer = _error("fenced", exc)
        except LogCorruptError as exc:
            answer = _error("corrupt", exc)
        except (StorageError, OSError) as exc:
            answer = _error("storage", exc)
        except Exception as exc:
            log.exception("compaction pass failed")
            answer = _error("failed", exc)
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s:%(name)s:%(message)s")
    # Background work: the server's own threads (the event loop, the flushes) come first for the CPU.
    os.nice(10)
    serve()
