"""One side of the split-brain race, as its own OS process. Prints one JSON object per line.

writer (A): owns the partition and appends + flushes in a loop, printing every acknowledged batch
            (its exact bytes) until it is fenced.
taker (B):  takes the partition over, appends its own batches, and prints everything it can read.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import signal
import sys
import time
from collections.abc import Callable

from fencing import DirectoryEpochSource, FencedError, LogConfig, LogError, PartitionLog, open_storage
from talos import RecordData, encode_batch, iter_batches, set_base_offset


def emit(**event: object) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def protocol_hook(args: argparse.Namespace, rng: random.Random) -> Callable[[str], None]:
    holds = [args.hold_after]

    def hook(step: str) -> None:
        if step == args.hold_at:
            # Stop at this step, say so, and wait for the harness to let go (after the other side moved).
            holds[0] -= 1
            if holds[0] == 0:
                emit(event="holding", step=step)
                while not os.path.exists(args.release_file):
                    time.sleep(0.002)
            return
        # Random pauses at the steps of the protocol widen the race windows, the roll's most of all.
        chance = args.roll_pause_chance if step.startswith("roll:") else args.pause_chance
        if args.pause_ms and rng.random() < chance:
            time.sleep(rng.uniform(0, args.pause_ms) / 1000)

    return hook


def writer(args: argparse.Namespace) -> None:
    if args.file_size_limit:
        # Files cannot grow past the limit: writes fail as on a full disk (EFBIG instead of ENOSPC).
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (args.file_size_limit, resource.RLIM_INFINITY))
    rng = random.Random(args.seed)
    fs, root = open_storage(args.url)
    directory = f"{root}/{args.dir}"
    plog = PartitionLog.open(
        fs,
        directory,
        DirectoryEpochSource(fs, directory),
        config=LogConfig(segment_bytes=args.segment_bytes),
        hook=protocol_hook(args, rng),
    )
    emit(event="ready", epoch=plog.epoch, pid=os.getpid())
    deadline = time.monotonic() + args.deadline
    sequence = 0
    while time.monotonic() < deadline:
        queued = []
        for _ in range(rng.randint(1, 4)):  # several appends per flush, as group commit does
            values = [
                f"A{sequence}-{n}:".encode() + rng.randbytes(rng.randint(10, 2000)) for n in range(rng.randint(1, 5))
            ]
            sequence += 1
            queued.append(encode_batch([RecordData(v) for v in values]))
        started = time.monotonic()
        try:
            placed = [(plog.append(batch), batch) for batch in queued]
            plog.flush()
        except FencedError as exc:
            emit(event="fenced", t=time.monotonic(), message=str(exc))
            return
        except LogError as exc:
            emit(event="error", t=time.monotonic(), kind=type(exc).__name__, message=str(exc))
            return
        for (base, next_offset), batch in placed:
            stored = bytearray(batch)
            set_base_offset(stored, base)
            emit(event="ack", t0=started, base=base, next=next_offset, hex=stored.hex())
    emit(event="timeout")


def taker(args: argparse.Namespace) -> None:
    fs, root = open_storage(args.url)
    directory = f"{root}/{args.dir}"
    started = time.monotonic()
    hook = protocol_hook(args, random.Random())
    config = LogConfig(lease_timeout_s=args.lease_timeout)
    plog = PartitionLog.open(fs, directory, DirectoryEpochSource(fs, directory), config=config, hook=hook)
    done = time.monotonic()
    assert plog.recovery is not None
    first = plog.next_offset
    for n in range(3):
        plog.append(encode_batch([RecordData(f"B{n}".encode())]))
        plog.flush()
    batches = []
    offset = plog.start_offset
    while offset < plog.durable_offset:
        data = plog.read(offset, 1 << 20)
        for position, header in iter_batches(data):
            if header.next_offset > offset:
                batches.append([header.base_offset, data[position : position + header.length].hex()])
                offset = header.next_offset
    plog.close()
    emit(event="took-over", t_start=started, t_done=done, epoch=plog.epoch, first=first, batches=batches,
         sealed=plog.recovery.sealed, truncated=plog.recovery.truncated_bytes)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["writer", "taker"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--segment-bytes", type=int, default=1 << 20)
    parser.add_argument("--pause-ms", type=float, default=0.0)
    parser.add_argument("--pause-chance", type=float, default=0.2)
    parser.add_argument("--roll-pause-chance", type=float, default=0.2)
    parser.add_argument("--hold-at", default="", help="protocol step at which to stop and wait")
    parser.add_argument("--hold-after", type=int, default=1, help="stop at the n-th time the step comes")
    parser.add_argument("--release-file", default="", help="go on once this file exists")
    parser.add_argument("--file-size-limit", type=int, default=0, help="RLIMIT_FSIZE in bytes (a full disk)")
    parser.add_argument("--deadline", type=float, default=60.0)
    parser.add_argument("--lease-timeout", type=float, default=90.0, help="the taker's wait for HDFS lease recovery")
    args = parser.parse_args()
    writer(args) if args.role == "writer" else taker(args)


if __name__ == "__main__":
    main()
