"""kill -9 the server under full-speed producers, restart it on the same data: nothing acknowledged is lost."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import pytest

from talos import Admin, Consumer, Producer, TalosError
from tests.e2e.conftest import StandaloneServer

# 12 kill -9 rounds keep the whole suite inside its 20 minutes; TALOS_CRASH_ROUNDS=100 for a longer soak.
ROUNDS = int(os.environ.get("TALOS_CRASH_ROUNDS", "12"))
PARTITIONS = 4


def produce_until_stopped(url: str, writer: int, stop: threading.Event, acked: dict[tuple[int, int], bytes]) -> None:
    sequence = 0
    try:
        with Producer(url, linger_ms=1, batch_bytes=32 * 1024, delivery_timeout_s=0.5, retry_backoff_ms=20) as producer:
            while not stop.is_set():
                pending = []
                for _ in range(200):
                    value = f"w{writer}-{sequence}-".encode() + os.urandom(random.randint(0, 300))
                    sequence += 1
                    pending.append((value, producer.send("crash", value, key=f"{writer}-{sequence % 7}")))
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
    try:
        server.start()
        Admin(server.url).create_topic("crash", partitions=PARTITIONS)
        for round_ in range(ROUNDS):
            rng = random.Random(round_)
            stop = threading.Event()
            writers = [
                threading.Thread(target=produce_until_stopped, args=(server.url, n, stop, acked)) for n in range(4)
            ]
            for thread in writers:
                thread.start()
            time.sleep(rng.uniform(0.2, 1.2))
            server.kill()  # SIGKILL while requests are in flight
            stop.set()
            for thread in writers:
                thread.join(60)
            server.start()  # same port, same data directory
            check_everything(server.url, acked)
    finally:
        server.stop()
    assert len(acked) > 1000


def check_everything(url: str, acked: dict[tuple[int, int], bytes]) -> None:
    """Every acknowledged offset holds its exact bytes; offsets are contiguous; every batch is intact."""
    stored: dict[tuple[int, int], bytes | None] = {}
    with Consumer(url, topics=["crash"], start="earliest", wait_ms=0) as consumer:
        while batch := consumer.poll(1.0, max_messages=100_000):
            for message in batch:  # decoding verified every batch's CRC
                stored[(message.partition, message.offset)] = message.value
    for partition in range(PARTITIONS):
        offsets = sorted(o for p, o in stored if p == partition)
        assert offsets == list(range(len(offsets))), f"partition {partition} has gaps"
    missing = [key for key in acked if key not in stored]
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
    wrong = [key for key, value in acked.items() if stored[key] != value]
    assert not wrong, f"acknowledged offsets with other bytes: {wrong[:5]}"
