"""``talos verify``: a Jepsen-style checker of what a cluster promises, shipped with the product.

Writers (SDK producers, idempotent by default) send unique values ``<writer>:<n>`` to every partition of
a fresh topic for a while, remembering which were acknowledged and where. Then every partition is read
from the start and checked: every acknowledged value is stored at its acknowledged offset, exactly once
(with idempotence); each writer's values are in order within each partition; offsets are contiguous.
``analyse`` is the pure part; ``run`` does the I/O (and injects faults through ``talos._faults``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from talos._admin import Admin
from talos._consumer import Consumer
from talos._errors import TalosError
from talos._producer import Producer

__all__ = ["Summary", "Workload", "analyse", "read_everything"]


@dataclass
class Summary:
    sent: int
    acknowledged: int
    lost: int  # acknowledged, but not at its acknowledged offset
    duplicated: int  # extra copies of values stored more than once
    unacknowledged_present: int  # sent, never acknowledged, stored anyway (allowed)
    out_of_order: int  # stored values that come before a value their writer sent earlier (same partition)
    failed: int  # sends that ended in an error (not acknowledged)
    problems: list[str] = field(default_factory=list)

    def ok(self, *, exactly_once: bool) -> bool:
        return self.lost == 0 and self.out_of_order == 0 and (not exactly_once or self.duplicated == 0)

    def render(self) -> str:
        lines = [
            f"sent                      {self.sent}",
            f"acknowledged              {self.acknowledged}",
            f"lost                      {self.lost}",
            f"duplicated                {self.duplicated}",
            f"unacknowledged-but-present {self.unacknowledged_present}",
            f"out of order              {self.out_of_order}",
            f"failed sends              {self.failed}",
        ]
        return "\n".join(lines + [f"problem: {p}" for p in self.problems[:20]])


def analyse(
    sent: set[str],
    acked: Mapping[str, tuple[int, int]],
    stored: Mapping[int, list[str]],
    *,
    failed: int = 0,
) -> Summary:
    """Check the stored partitions against what was sent and acknowledged (value → (partition, offset))."""
    problems: list[str] = []
    lost = 0
    for value, (partition, offset) in acked.items():
        values = stored.get(partition, [])
        if offset < 0:  # a resend of something stored too long ago to know where: it must be there somewhere
            if value not in values:
                lost += 1
                problems.append(f"{value} acknowledged (offset unknown) is missing from partition {partition}")
            continue
        if offset >= len(values) or values[offset] != value:
            lost += 1
            here = values[offset] if offset < len(values) else "nothing"
            problems.append(f"{value} acknowledged at {partition}/{offset}, which holds {here}")
    duplicated = 0
    unacknowledged = 0
    out_of_order = 0
    for partition, values in stored.items():
        counts = Counter(values)
        duplicated += sum(n - 1 for n in counts.values() if n > 1)
        unacknowledged += sum(1 for v in counts if v in sent and v not in acked)
        last: dict[str, int] = {}
        seen: set[str] = set()
        for value in values:
            if value in seen:
                continue  # a duplicate (counted above); order is judged by first copies
            seen.add(value)
            writer, _, number = value.rpartition(":")
            if not number.isdigit():
                problems.append(f"partition {partition} holds a value nobody sent: {value!r}")
                continue
            if int(number) < last.get(writer, -1):
                out_of_order += 1
                problems.append(f"partition {partition}: {value} after {writer}:{last[writer]}")
            last[writer] = max(int(number), last.get(writer, -1))
    return Summary(len(sent), len(acked), lost, duplicated, unacknowledged, out_of_order, failed, problems)


def read_everything(url: str, topic: str, *, timeout: float = 120.0) -> dict[int, list[str]]:
    """Every value of every partition from the start, checking that offsets are contiguous."""
    with Admin(url) as admin:
        partitions = admin.describe_topic(topic).partitions
        ends = {p: int(admin.offsets(topic, p)["latest"]) for p in range(partitions)}
    out: dict[int, list[str]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + timeout
    with Consumer(url, topics=[topic], start="earliest", wait_ms=0) as consumer:
        while any(len(out[p]) < ends[p] for p in out):
            if time.monotonic() > deadline:
                raise TalosError(f"could not read {topic} to its end within {timeout:.0f}s")
            for message in consumer.poll(1.0):
                if message.offset != len(out[message.partition]):
                    raise TalosError(
                        f"partition {message.partition}: offset {message.offset} where "
                        f"{len(out[message.partition])} was expected (offsets must be contiguous)"
                    )
                out[message.partition].append((message.value or b"").decode())
    return out


@dataclass
class Workload:
    """``writers`` producers, each sending to every partition in turn until ``stop`` is set."""

    url: str
    topic: str
    partitions: int
    writers: int = 4
    idempotent: bool = True
    sent: set[str] = field(default_factory=set)
    acked: dict[str, tuple[int, int]] = field(default_factory=dict)
    failed: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def start(self) -> None:
        for index in range(self.writers):
            thread = threading.Thread(target=self._write, args=(f"w{index}",), name=f"verify-w{index}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _write(self, name: str) -> None:
        try:
            with Producer(
                self.url, idempotent=self.idempotent, linger_ms=2, delivery_timeout_s=300, retry_backoff_ms=50
            ) as producer:
                n = 0
                while not self.stop.is_set():
                    window = []
                    for _ in range(self.partitions * 2):
                        value = f"{name}:{n}"
                        with self._lock:
                            self.sent.add(value)
                        window.append((value, producer.send(self.topic, value.encode(), partition=n % self.partitions)))
                        n += 1
                    for value, future in window:
                        try:
                            meta = future.result(timeout=600)
                        except (TalosError, TimeoutError) as exc:
                            with self._lock:
                                self.failed += 1
                                if len(self.errors) < 20:
                                    self.errors.append(f"{name}: sending {value} failed: {exc!r}")
                            continue
                        with self._lock:
                            self.acked[value] = (meta.partition, meta.offset)
                    time.sleep(0.005)
        except Exception as exc:  # a writer that dies is a finding, not a crash of the checker
            self.errors.append(f"{name}: {exc!r}")

    def finish(self, timeout: float = 600.0) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout)


def run(
    url: str,
    *,
    seconds: float,
    partitions: int = 6,
    writers: int = 4,
    idempotent: bool = True,
    faults: Callable[[threading.Event], None] | None = None,
    say: Callable[[str], None] = print,
) -> Summary:
    """Create a fresh topic, run the workload (with ``faults`` in a thread meanwhile), then check."""
    topic = f"verify-{int(time.time() * 1000)}"
    with Admin(url) as admin:
        admin.create_topic(topic, partitions=partitions)
    workload = Workload(url, topic, partitions, writers, idempotent)
    workload.start()
    stop_faults = threading.Event()
    injector = None
    if faults is not None:
        injector = threading.Thread(target=faults, args=(stop_faults,), name="verify-faults", daemon=True)
        injector.start()
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        time.sleep(min(5.0, seconds))
        say(f"{time.monotonic() - started:5.0f}s  sent {len(workload.sent)}  acknowledged {len(workload.acked)}")
    stop_faults.set()
    if injector is not None:
        injector.join()
    say("stopping the writers (waiting for every send to be answered) ...")
    workload.finish()
    say(f"reading {topic} from the start ...")
    stored = read_everything(url, topic)
    summary = analyse(workload.sent, workload.acked, stored, failed=workload.failed)
    summary.problems[:0] = workload.errors
    return summary
