"""The cost of ``Producer.send`` itself: records queued per second with the network swapped for a function.

    .venv/bin/python -P load_tests/send_bench.py [TREE ...]

Each TREE (default: this checkout) is a checkout whose ``talos`` is measured, in a process of its own, so two
versions compare in one sitting (e.g. a ``git worktree`` of an older commit). 200,000 sends of 100 B to 4
partitions, best of 5 runs; the answers come from a function at once, so what is timed is the SDK's own work
on the caller's thread (building the record, choosing the partition, the accumulator).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

_RUN = r"""
import sys, time, orjson
sys.path.insert(0, sys.argv[1])
import talos
from talos import FunctionTransport, Producer, Response
assert talos.__file__.startswith(sys.argv[1]), talos.__file__

def answer(method, url, params, body):
    if url.endswith("/v1/routes"):
        partitions = [{"partition": p} for p in range(4)]
        return Response(200, {}, orjson.dumps({"mode": "standalone", "topics": {"t": partitions}}))
    return Response(200, {}, orjson.dumps({"results": [{"partition": 0, "offset": 0, "count": 1}]}))

best = 0.0
for _ in range(5):
    with Producer("http://bench", transport=FunctionTransport(answer), linger_ms=5) as producer:
        value = b"v" * 100
        started = time.perf_counter()
        for i in range(200_000):
            producer.send("t", value, partition=i & 3)
        best = max(best, 200_000 / (time.perf_counter() - started))
        producer.flush()
print(f"{best:,.0f}")
"""


def main() -> None:
    trees = [Path(arg).resolve() for arg in sys.argv[1:]] or [HERE]
    for tree in trees:
        rate = subprocess.run(
            [sys.executable, "-P", "-c", _RUN, str(tree)], capture_output=True, text=True, check=True, cwd="/"
        ).stdout.strip()
        print(f"{tree}: {rate} sends/s")


if __name__ == "__main__":
    main()
