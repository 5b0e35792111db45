"""Where a single-message durable produce spends the server's time: µs per request by part (docs/performance.md).

Starts a ``talos standalone`` (local disk), drives it with ``wrk`` (64 connections, 100 B JSON messages) and
samples it with ``py-spy`` meanwhile; each sampled stack of the event-loop thread is given to the part of the
path its innermost recognised frame belongs to, and the samples per part become µs per request. ``--source``
runs another checkout's server (a ``git worktree`` of an older commit) for a before/after on one machine::

    git worktree add /tmp/before <commit>
    .venv/bin/python load_tests/profile_produce.py --source /tmp/before
    .venv/bin/python load_tests/profile_produce.py

py-spy slows the process it samples a little: compare runs of this script with each other, not with
``performance.py``'s rates.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from server.devservices import StandaloneServer
from talos import Admin

TOPIC = "profile"
# (part, substrings of a py-spy frame "function (file.py:line)"), tried from the innermost frame outwards.
PARTS = [
    ("metering and Prometheus counters", ["Metered", "meter.py", "metrics.py", "prometheus_client"]),
    ("JSON parse, batch encode", ["_parse_messages", "_one_value ", "_bytes_field", "_codec.py", "encode_batch"]),
    (
        "group commit: append, group future, hand-off to the I/O thread",
        ["loaded.py", "log.py", "executor.py", "shield", "futures.py", "timeouts.py", "producers.py"],
    ),
    ("answer: JSON, HTTP response, socket write", ["_respond", "write_reply", "reply.py", "_send (fastpath"]),
    ("ASGI: uvicorn's cycle, receive/send", ["RequestResponseCycle", "FastPath.__call__", "read_body"]),
    ("routing, auth, quotas, partition lookup", ["fastpath.py", "security", "broker.py", "ring.py", "quota"]),
    ("produce handler, the rest", ["messages.py"]),
    ("HTTP parsing, connection limits, a task per request", ["connections.py", "httptools_impl", "hot_cycle.py"]),
]
IO_THREAD = ("_Worker.run", "Thread._bootstrap")


def part_of(frames: list[str]) -> str:
    if any(marker in frame for frame in frames for marker in IO_THREAD):
        return "(I/O threads: write + sync, waiting for work)"
    for frame in reversed(frames):
        for name, keys in PARTS:
            if any(key in frame for key in keys):
                return name
    return "event loop and the rest"


def profile(source: Path | None, seconds: float, rate_hz: int) -> tuple[float, dict[str, float]]:
    """Requests/s under wrk and µs per request by part."""
    wrk, spy = shutil.which("wrk"), Path(sys.executable).with_name("py-spy")
    if wrk is None or not spy.exists():
        raise SystemExit("needs wrk and py-spy (scripts/install --dev)")
    env = {"TALOS_LOG_LEVEL": "warning"}
    with tempfile.TemporaryDirectory(prefix="talos-profile-") as scratch:
        base = Path(scratch)
        script = base / "post.lua"
        body = '{"messages":[{"value":"' + "x" * 100 + '"}]}'
        script.write_text(
            f"wrk.method = 'POST'\nwrk.body = '{body}'\nwrk.headers['Content-Type'] = 'application/json'\n"
        )
        server = StandaloneServer(base / "data", env=env, source=source)
        try:
            server.start()
            assert server.process is not None
            Admin(server.url).create_topic(TOPIC, partitions=1)
            target = f"{server.url}/v1/topics/{TOPIC}/partitions/0/messages"
            subprocess.run([wrk, "-t1", "-c64", "-d2s", "-s", str(script), target], capture_output=True, check=True)
            load = subprocess.Popen(
                [wrk, "-t1", "-c64", f"-d{round(seconds) + 3}s", "-s", str(script), target],
                stdout=subprocess.PIPE,
                text=True,
            )
            time.sleep(1.5)
            raw = base / "profile.txt"
            # Without pausing the server for each sample: paused, it ran at a tenth of its rate, and its parts
            # in proportions of their own.
            record = [str(spy), "record", "--nonblocking", "--pid", str(server.process.pid), "--format", "raw"]
            record += ["-o", str(raw)]
            subprocess.run([*record, "-d", str(round(seconds)), "-r", str(rate_hz)], capture_output=True, check=True)
            out, _ = load.communicate()
        finally:
            server.stop()
        rate = float(next(line.split()[1] for line in out.splitlines() if line.startswith("Requests/sec")))
        samples: collections.Counter[str] = collections.Counter()
        for line in raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            samples[part_of(stack.split(";"))] += int(count)
    requests = rate * round(seconds)
    return rate, {part: count / rate_hz / requests * 1e6 for part, count in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, help="the checkout whose server to profile [this one]")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds sampled [8]")
    parser.add_argument("--rate", type=int, default=500, help="samples per second [500]")
    args = parser.parse_args()
    source = args.source.resolve() if args.source else None
    rate, parts = profile(source, args.seconds, args.rate)
    print(f"{source or os.getcwd()}: {rate:,.0f} requests/s under wrk while sampled\n")
    print("| part | µs per request |\n|---|---|")
    loop = 0.0
    for part, micros in sorted(parts.items(), key=lambda item: -item[1]):
        print(f"| {part} | {micros:.1f} |")
        loop += micros if not part.startswith("(") else 0.0
    print(f"| **event-loop thread, total** | **{loop:.1f}** |")


if __name__ == "__main__":
    main()
