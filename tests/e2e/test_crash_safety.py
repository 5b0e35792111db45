"""kill -9 the server under full-speed producers, restart it on the same data: nothing acknowledged is lost."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import httpx
import pytest

from server.devservices import wait_until
from talos import Admin, Consumer, Producer, TalosError, decode_records, iter_batches
from tests.e2e.conftest import StandaloneServer

# 20 kill -9 rounds in the slow group (issue 22); TALOS_CRASH_ROUNDS=100 for a longer soak.
ROUNDS = int(os.environ.get("TALOS_CRASH_ROUNDS", "20"))
PARTITIONS = 4
Stored = dict[tuple[int, int], bytes | None]  # (partition, offset) → value


def produce_until_stopped(
    url: str,
    writer: int,
    stop: threading.Event,
    acked: dict[tuple[int, int], bytes],
    *,
    topic: str = "crash",
    per_round: int = 200,
    random_tail: bool = True,
    delivery_timeout_s: float = 0.5,
) -> None:
    """Write ``w<writer>-<n>-`` values (with up to 300 random bytes after them unless not ``random_tail``) to
    ``topic`` until ``stop``, recording each acknowledged one at its (partition, offset) in ``acked``."""
    sequence = 0
    options = {"linger_ms": 1, "batch_bytes": 32 * 1024, "retry_backoff_ms": 20}
    try:
        with Producer(url, delivery_timeout_s=delivery_timeout_s, **options) as producer:
            while not stop.is_set():
                pending = []
                for _ in range(per_round):
                    value = f"w{writer}-{sequence}-".encode() + (
                        os.urandom(random.randint(0, 300)) if random_tail else b""
                    )
                    sequence += 1
                    pending.append((value, producer.send(topic, value, key=f"{writer}-{sequence % 7}")))
                for value, future in pending:
                    try:
                        meta = future.result(timeout=30)
                    except TalosError:
                        continue  # not acknowledged: may or may not be stored
                    acked[(meta.partition, meta.offset)] = value
    except TalosError:
        pass  # the server went away mid-call


@pytest.mark.slow
def test_kill_9_under_load_loses_no_acknowledged_message(tmp_path: Path) -> None:
    server = StandaloneServer(tmp_path / "data")
    acked: dict[tuple[int, int], bytes] = {}
    decoded: dict[bytes, list[tuple[int, bytes | None]]] = {}  # the records of each batch read so far, by its bytes
    try:
        server.start()
        Admin(server.url).create_topic("crash", partitions=PARTITIONS)
        for round_ in range(ROUNDS):
            rng = random.Random(round_)
            stop = threading.Event()
            writers = [
                threading.Thread(target=produce_until_stopped, args=(server.url, n, stop, acked)) for n in range(4)
            ]
            before = len(acked)
            for thread in writers:
                thread.start()
            # The kill comes at a random moment once this round's writers are acknowledged: mid-flow, not
            # while they are still connecting. A short window keeps each round's re-read of everything cheap.
            wait_acknowledged(acked, more_than=before)
            time.sleep(rng.uniform(0.0, 0.5))
            server.kill()  # SIGKILL while requests are in flight
            stop.set()
            # Restarted while the writers give up (their delivery timeout): a retry the new process
            # acknowledges is checked like any other.
            server.start()  # same port, same data directory
            for thread in writers:
                thread.join(60)
            check_stored(read_stored(server.url, decoded), acked)
        check_stored(read_with_consumer(server.url), acked)  # and once more as the SDK's consumer reads it
    finally:
        server.stop()
    assert len(acked) > 1000


def wait_acknowledged(acked: dict[tuple[int, int], bytes], *, more_than: int) -> None:
    wait_until(lambda: len(acked) > more_than, timeout=30, what=f"more than {more_than} acknowledged messages")


def read_stored(url: str, decoded: dict[bytes, list[tuple[int, bytes | None]]]) -> Stored:
    """Every record stored, fetched as batches (the binary fetch) from offset 0 to the high watermark: offsets
    contiguous and every batch's CRC checked. A batch is decoded once: one with the bytes of a batch decoded in
    an earlier round holds the same records. (Decoding everything every round cost more than the rest of it.)"""
    stored: Stored = {}
    with httpx.Client(base_url=url, timeout=60) as client:
        for partition in range(PARTITIONS):
            offset, end = 0, 1
            while offset < end:
                answer = client.get(
                    f"/v1/topics/crash/partitions/{partition}/messages",
                    params={"offset": offset, "max_bytes": 16 * 1024 * 1024},
                    headers={"accept": "application/vnd.talos.batch"},
                )
                assert answer.status_code == 200, answer.text
                end = int(answer.headers["x-talos-high-watermark"])
                data = answer.content
                assert data or offset >= end, f"partition {partition}: nothing at {offset}, below its end {end}"
                for position, header in iter_batches(data):  # raises on a batch whose CRC does not match
                    assert header.base_offset == offset, f"partition {partition} has a gap at {offset}"
                    batch = data[position : position + header.length]
                    records = decoded.get(batch)
                    if records is None:
                        records = decoded[batch] = [(r.offset, r.value) for r in decode_records(batch)]
                    stored.update(((partition, record_offset), value) for record_offset, value in records)
                    offset = header.next_offset
    return stored


def read_with_consumer(url: str) -> Stored:
    """Everything up to each partition's latest offset, as the SDK's consumer reads it. Read until there, not until
    the first empty poll: on a loaded machine a first poll can come back empty (seen in CI: "99789 lost")."""
    with Admin(url) as admin:
        ends = {p.partition: p.latest or 0 for p in admin.describe_topic("crash").partition_offsets}
    stored: Stored = {}
    after = dict.fromkeys(ends, 0)
    deadline = time.monotonic() + 120
    with Consumer(url, topics=["crash"], start="earliest", wait_ms=0) as consumer:
        while any(after[p] < end for p, end in ends.items()) and time.monotonic() < deadline:
            for message in consumer.poll(1.0, max_messages=100_000):  # decoding verified every batch's CRC
                stored[(message.partition, message.offset)] = message.value
                after[message.partition] = max(after[message.partition], message.offset + 1)
    return stored


def check_stored(stored: Stored, acked: dict[tuple[int, int], bytes]) -> None:
    """Every acknowledged offset holds its exact bytes; offsets are contiguous."""
    for partition in range(PARTITIONS):
        offsets = sorted(o for p, o in stored if p == partition)
        assert offsets == list(range(len(offsets))), f"partition {partition} has gaps"
    missing = [key for key in acked if key not in stored]
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
    wrong = [key for key, value in acked.items() if stored[key] != value]
    assert not wrong, f"acknowledged offsets with other bytes: {wrong[:5]}"
