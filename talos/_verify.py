"""``talos verify``: a Jepsen-style checker of what a cluster promises, shipped with the product.

Writers (SDK producers, idempotent by default) send unique values ``<writer>:<n>`` to every partition of
a fresh topic for a while, remembering which were acknowledged, where, and when. Meanwhile the members of
one consumer group read the topic, committing as they go. Then every partition is read from the start and
checked: every acknowledged value is stored at its acknowledged offset, exactly once (with idempotence);
each writer's values are in order within each partition; offsets are contiguous; no offset was ever
acknowledged to, stored with, or handed to a consumer with two different values; the group saw every
acknowledged value. The report also says, per partition, how long no send to it was acknowledged.
``analyse`` is the pure part; ``run`` does the I/O (and injects the faults it is given: ``talos verify --faults
local`` gives ``server.devservices.LocalFaults``).
"""

from __future__ import annotations

import functools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from talos._admin import Admin
from talos._consumer import Consumer
from talos._errors import TalosError
from talos._futures import RecordFuture
from talos._producer import Producer

__all__ = ["Outage", "Summary", "Workload", "analyse", "outages", "read_everything"]

GAP_S = 1.0  # a partition whose acknowledgements stop for longer than this was unwritable meanwhile


@dataclass
class Outage:
    """How long a partition went without an acknowledgement (gaps longer than :data:`GAP_S`)."""

    longest_s: float = 0.0
    total_s: float = 0.0


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
    offset_conflicts: int = 0  # offsets acknowledged, stored or consumed with two different values
    consumed: int | None = None  # distinct values the consumer group saw (None: no group read)
    consumer_missed: int = 0  # acknowledged values the group never saw
    consumer_redelivered: int = 0  # extra deliveries to the group (allowed: at least once)
    unwritable: dict[int, Outage] = field(default_factory=dict)

    def ok(self, *, exactly_once: bool) -> bool:
        return (
            self.lost == 0
            and self.out_of_order == 0
            and self.offset_conflicts == 0
            and self.consumer_missed == 0
            and (not exactly_once or self.duplicated == 0)
        )

    def render(self) -> str:
        lines = [
            f"sent                      {self.sent}",
            f"acknowledged              {self.acknowledged}",
            f"lost                      {self.lost}",
            f"duplicated                {self.duplicated}",
            f"unacknowledged-but-present {self.unacknowledged_present}",
            f"out of order              {self.out_of_order}",
            f"offset conflicts          {self.offset_conflicts}",
            f"failed sends              {self.failed}",
        ]
        if self.consumed is not None:
            lines += [
                f"consumed                  {self.consumed}",
                f"consumer missed           {self.consumer_missed}",
                f"consumer redelivered      {self.consumer_redelivered}",
            ]
        for partition, outage in sorted(self.unwritable.items()):
            lines.append(
                f"partition {partition} unwritable: longest {outage.longest_s:.1f}s, total {outage.total_s:.1f}s"
            )
        return "\n".join(lines + [f"problem: {p}" for p in self.problems[:20]])

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["unwritable"] = {str(p): asdict(o) for p, o in sorted(self.unwritable.items())}
        return data


def outages(times: Iterable[float], start: float, end: float, *, gap_s: float = GAP_S) -> Outage:
    """The gaps longer than ``gap_s`` between ``start``, each acknowledgement time, and ``end``."""
    outage = Outage()
    previous = start
    for moment in [*sorted(t for t in times if start <= t <= end), end]:
        gap = moment - previous
        if gap > gap_s:
            outage.longest_s = max(outage.longest_s, gap)
            outage.total_s += gap
        previous = moment
    return outage


def analyse(
    sent: set[str],
    acked: Mapping[str, tuple[int, int]],
    stored: Mapping[int, list[str]],
    *,
    failed: int = 0,
    consumed: Iterable[tuple[int, int, str]] | None = None,
    ack_times: Mapping[int, Iterable[float]] | None = None,
    window: tuple[float, float] = (0.0, 0.0),
) -> Summary:
    """Check the stored partitions against what was sent and acknowledged (value → (partition, offset)).

    ``consumed``: what the consumer group was handed, (partition, offset, value) per delivery.
    ``ack_times``: per partition, when its acknowledgements came, to find the gaps within ``window``."""
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

    # Every claim that an offset holds a value: acknowledgements, the stored log, deliveries to the group.
    claims: dict[tuple[int, int], set[str]] = {}
    for partition, log in stored.items():
        for offset, value in enumerate(log):
            claims[(partition, offset)] = {value}
    for value, (partition, offset) in acked.items():
        if offset >= 0:
            claims.setdefault((partition, offset), set()).add(value)
    deliveries = list(consumed) if consumed is not None else []
    for partition, offset, value in deliveries:
        claims.setdefault((partition, offset), set()).add(value)
    conflicts = {where: claimed for where, claimed in claims.items() if len(claimed) > 1}
    for (partition, offset), claimed in sorted(conflicts.items())[:10]:
        problems.append(f"offset {partition}/{offset} claimed by {sorted(claimed)}")

    summary = Summary(len(sent), len(acked), lost, duplicated, unacknowledged, out_of_order, failed, problems)
    summary.offset_conflicts = len(conflicts)
    if consumed is not None:
        delivered = Counter(value for _p, _o, value in deliveries)
        missed = [value for value in acked if value not in delivered]
        summary.consumed = len(delivered)
        summary.consumer_missed = len(missed)
        summary.consumer_redelivered = sum(n - 1 for n in delivered.values())
        problems += [f"the consumer group never saw {value} (acknowledged at {acked[value]})" for value in missed[:10]]
    if ack_times is not None:
        start, end = window
        summary.unwritable = {p: outages(times, start, end) for p, times in sorted(ack_times.items())}
    return summary


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
    """``writers`` producers, each keeping a few sends in flight to every partition until ``stop`` is set.

    Each partition has its own small window, so a partition that stops answering holds back only its own
    sends: the others keep being written, and the gaps in a partition's acknowledgements are its own."""

    url: str
    topic: str
    partitions: int
    writers: int = 4
    idempotent: bool = True
    in_flight: int = 4  # per writer and partition
    sent: set[str] = field(default_factory=set)
    acked: dict[str, tuple[int, int]] = field(default_factory=dict)
    ack_times: dict[int, list[float]] = field(default_factory=dict)
    failed: int = 0
    started: float = 0.0
    stopped: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _room: threading.Condition = field(init=False)
    _threads: list[threading.Thread] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._room = threading.Condition(self._lock)
        self.ack_times = {p: [] for p in range(self.partitions)}

    def start(self) -> None:
        self.started = time.monotonic()
        for index in range(self.writers):
            thread = threading.Thread(target=self._write, args=(f"w{index}",), name=f"verify-w{index}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _answered(self, name: str, value: str, partition: int, pending: list[int], future: RecordFuture) -> None:
        now = time.monotonic()
        try:
            meta = future.result(timeout=0)
        except (TalosError, TimeoutError) as exc:
            with self._room:
                self.failed += 1
                pending[partition] -= 1
                if len(self.errors) < 20:
                    self.errors.append(f"{name}: sending {value} failed: {exc!r}")
                self._room.notify_all()
            return
        with self._room:
            self.acked[value] = (meta.partition, meta.offset)
            self.ack_times[meta.partition].append(now)
            pending[partition] -= 1
            self._room.notify_all()

    def _write(self, name: str) -> None:
        pending = [0] * self.partitions
        try:
            with Producer(
                self.url, idempotent=self.idempotent, linger_ms=2, delivery_timeout_s=300, retry_backoff_ms=50
            ) as producer:
                n = 0
                while not self.stop.is_set():
                    with self._room:
                        free = [p for p in range(self.partitions) if pending[p] < self.in_flight]
                        if not free:
                            self._room.wait(0.5)
                            continue
                        for partition in free:
                            pending[partition] += 1
                    for partition in free:
                        value = f"{name}:{n}"
                        n += 1
                        with self._lock:
                            self.sent.add(value)
                        future = producer.send(self.topic, value.encode(), partition=partition)
                        future.add_done_callback(functools.partial(self._answered, name, value, partition, pending))
                    time.sleep(0.005)
                # Every send is answered before the producer closes (delivery_timeout_s bounds the wait).
                producer.flush()
                with self._room:
                    self._room.wait_for(lambda: not any(pending), timeout=600)
        except Exception as exc:  # a writer that dies is a finding, not a crash of the checker
            self.errors.append(f"{name}: {exc!r}")

    def finish(self, timeout: float = 600.0) -> None:
        self.stop.set()
        self.stopped = time.monotonic()
        for thread in self._threads:
            thread.join(timeout)


@dataclass
class GroupReaders:
    """``members`` consumers of one group reading the topic as it is written, auto-committing each second.

    A member whose calls fail is replaced by a new one (which resumes from the group's commits): under
    network faults that is what an application would do."""

    url: str
    topic: str
    members: int = 2
    group: str = ""
    deliveries: list[tuple[int, int, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        self.group = self.group or f"{self.topic}-readers"
        for index in range(self.members):
            thread = threading.Thread(target=self._read, name=f"verify-c{index}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def seen(self) -> set[str]:
        with self._lock:
            return {value for _p, _o, value in self.deliveries}

    def _read(self) -> None:
        while not self.stop.is_set():
            try:
                with Consumer(
                    self.url,
                    group=self.group,
                    topics=[self.topic],
                    start="earliest",
                    auto_commit_interval_s=1.0,
                    session_timeout_s=10.0,
                    request_timeout_s=15.0,
                ) as consumer:
                    while not self.stop.is_set():
                        batch = [(m.partition, m.offset, (m.value or b"").decode()) for m in consumer.poll(0.5)]
                        with self._lock:
                            self.deliveries += batch
            except Exception as exc:
                with self._lock:
                    if len(self.errors) < 20:
                        self.errors.append(f"consumer: {exc!r}")
                self.stop.wait(1.0)

    def wait_for(self, values: set[str], *, timeout: float) -> None:
        """Until the group has seen ``values``, or ``timeout`` passed without it seeing anything new."""
        last, idle_since = -1, time.monotonic()
        while not self.stop.is_set():
            seen = self.seen()
            if values <= seen:
                return
            if len(seen) != last:
                last, idle_since = len(seen), time.monotonic()
            elif time.monotonic() - idle_since > timeout:
                return
            time.sleep(0.5)

    def finish(self, timeout: float = 60.0) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout)


def run(
    url: str,
    *,
    seconds: float,
    partitions: int = 6,
    writers: int = 4,
    consumers: int = 2,
    idempotent: bool = True,
    topic: str | None = None,
    faults: Callable[[threading.Event], None] | None = None,
    say: Callable[[str], None] = print,
) -> Summary:
    """Create a fresh topic, run the workload (with ``faults`` in a thread meanwhile), then check."""
    topic = topic or f"verify-{int(time.time() * 1000)}"
    with Admin(url) as admin:
        admin.create_topic(topic, partitions=partitions)
    say(f"topic {topic}")
    readers = GroupReaders(url, topic, consumers) if consumers else None
    if readers is not None:
        readers.start()
    workload = Workload(url, topic, partitions, writers, idempotent)
    workload.start()
    stop_faults = threading.Event()
    injector = None
    if faults is not None:
        injector = threading.Thread(target=faults, args=(stop_faults,), name="verify-faults", daemon=True)
        injector.start()
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        time.sleep(max(0.0, min(5.0, seconds - (time.monotonic() - started))))
        say(f"{time.monotonic() - started:5.0f}s  sent {len(workload.sent)}  acknowledged {len(workload.acked)}")
    stop_faults.set()
    if injector is not None:
        injector.join()
    say(f"{time.monotonic() - started:5.0f}s  stopping the writers (waiting for every send to be answered) ...")
    workload.finish()
    say(f"{time.monotonic() - started:5.0f}s  reading {topic} from the start ...")
    stored = read_everything(url, topic)
    consumed = None
    if readers is not None:
        say(f"{time.monotonic() - started:5.0f}s  waiting for {readers.group} to see every acknowledged message")
        readers.wait_for(set(workload.acked), timeout=60.0)
        readers.finish()
        consumed = readers.deliveries
    say(f"{time.monotonic() - started:5.0f}s  checking")
    summary = analyse(
        workload.sent,
        workload.acked,
        stored,
        failed=workload.failed,
        consumed=consumed,
        ack_times=workload.ack_times,
        window=(workload.started, workload.stopped),
    )
    summary.problems[:0] = workload.errors + (readers.errors if readers is not None else [])
    return summary
