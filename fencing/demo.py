"""A short, watchable tour of the partition log on the local disk: append, flush, read, takeover, fencing.

python -m fencing.demo [--data-dir ./talos-data]
"""

from __future__ import annotations

import argparse
import os
import time

from fencing import DirectoryEpochSource, FencedError, LogConfig, PartitionLog, open_storage
from talos import RecordData, decode_records, encode_batch, iter_batches


def step(message: str) -> None:
    print(f"\n== {message}", flush=True)
    time.sleep(0.3)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m fencing.demo", description=__doc__)
    parser.add_argument("--data-dir", default="./talos-data", help="where the demo partition lives")
    args = parser.parse_args()
    fs, root = open_storage(args.data_dir)
    directory = f"{root}/demo/{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    epochs = DirectoryEpochSource(fs, directory)

    step(f"server A takes partition {directory} over")
    a = PartitionLog.open(fs, directory, epochs, config=LogConfig(segment_bytes=4096))
    print(f"epoch {a.epoch}, next offset {a.next_offset}")

    step("A appends 20 batches of orders, one flush per 5 (group commit: one write + one fsync each)")
    for n in range(20):
        records = [RecordData(f"order {n}.{i}".encode(), key=f"customer-{i}".encode()) for i in range(3)]
        a.append(encode_batch(records))
        if n % 5 == 4:
            a.flush()
            print(f"  flushed up to offset {a.durable_offset}")
    print("segments:", *sorted(i.name for i in fs.list(directory)), sep="\n  ")

    step("server B takes over (new epoch, marker first, then seals A's open segment)")
    b = PartitionLog.open(fs, directory, epochs, config=LogConfig(segment_bytes=4096))
    assert b.recovery is not None
    print(f"epoch {b.epoch}; sealed {b.recovery.sealed}; next offset {b.next_offset}")

    step("A, unaware, tries to write once more")
    a.append(encode_batch([RecordData(b"too late")]))
    try:
        a.flush()
    except FencedError as exc:
        print(f"A is fenced, nothing acknowledged: {exc}")

    step("B writes and reads from offset 55")
    b.append(encode_batch([RecordData(b"order from B")]))
    b.flush()
    offset = 55
    while offset < b.durable_offset:
        data = b.read(offset)
        for position, _header in iter_batches(data):
            for record in decode_records(data, position):
                if record.offset >= offset:
                    print(f"  offset {record.offset}: key={record.key!r} value={record.value!r}")
                    offset = record.offset + 1
    b.close()
    print(f"\ndone; the partition directory is {directory}")


if __name__ == "__main__":
    main()
