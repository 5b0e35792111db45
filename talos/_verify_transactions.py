"""``talos verify --transactions``: a Jepsen-style checker of transactions, beside the checker of plain writes.

Writers (transactional producers with distinct transactional ids) open transactions one after another on a
fresh topic, each writing a few unique values ``<writer>:<txn>:<i>`` to one to three of its partitions, and
commit most of them and abort the rest, remembering each transaction's values and outcome. Meanwhile
read-committed readers (plain consumers of every partition from offset 0, and members of one group) note
every record they are handed, and when. Once the writers stopped and every transaction is decided, each
partition is read in full twice: read-committed (what must be exactly the committed transactions) and
read-uncommitted (every stored record, aborted ones too, to check offsets). ``analyse`` is the pure part, and
its docstring defines each anomaly; ``run`` does the I/O (the CLI runs it in a thread next to
``talos._verify.run``, so both go through the same faults).

Outcomes are what the writer knows: *committed* (``commit_transaction`` returned), *aborted* (its commit was
never asked for: ``abort_transaction`` was called, or the transaction was given up before commit when an
error replaced the producer, whose successor's init aborts it), *indefinite* (``commit_transaction`` raised:
it may have committed or not, but it must still be all or nothing).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, NamedTuple

from talos._admin import Admin
from talos._consumer import Consumer
from talos._errors import TalosError
from talos._futures import RecordFuture
from talos._producer import Producer

__all__ = [
    "Observation",
    "Transaction",
    "TransactionSummary",
    "TransactionWorkload",
    "analyse",
    "read_partitions",
    "run",
]

Outcome = Literal["committed", "aborted", "indefinite"]
EXAMPLES = 10  # examples kept per anomaly: enough to start debugging, few enough to print
ABORT_PROBABILITY = 0.2
TRANSACTION_TIMEOUT_MS = 20_000  # a transaction left open by a writer that gave up is aborted this soon
OPEN_PAUSE_S = 0.02  # up to this long between a transaction's records being stored and its commit or abort
SETTLE_TIMEOUT_S = 120.0  # after the writers stop, how long every partition gets to have nothing undecided


@dataclass
class Transaction:
    """One transaction as its writer saw it. ``values``: value → the partition it was sent to (all of them,
    acknowledged or not); ``acked``: value → (partition, offset) for the sends that were acknowledged;
    ``commit_asked_at``: the monotonic time just before ``commit_transaction`` was called (None if it never
    was), before which no read-committed reader may see any of it."""

    writer: str
    number: int
    values: dict[str, int] = field(default_factory=dict)
    outcome: Outcome = "aborted"
    commit_asked_at: float | None = None
    acked: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.writer}:{self.number}"


class Observation(NamedTuple):
    """A record handed to a read-committed reader while the writers ran: who, where, what, and when
    (monotonic, taken after the poll returned, so it is no earlier than when the record became visible)."""

    reader: str
    partition: int
    offset: int
    value: str
    at: float


@dataclass
class TransactionSummary:
    """Counts and examples of every anomaly (each defined in :func:`analyse`), and what the workload did."""

    transactions: int = 0
    committed: int = 0
    aborted: int = 0
    indefinite: int = 0
    values_sent: int = 0
    observed: int = 0  # records handed to read-committed readers while the writers ran
    final_committed: int = 0  # records in the final read-committed read
    final_uncommitted: int = 0  # records in the final read-uncommitted read
    aborted_reads: int = 0
    lost: int = 0
    torn: int = 0
    duplicates: int = 0
    offset_conflicts: int = 0
    past_lso: int = 0
    unknown: int = 0
    unsettled: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    # transactional id -> the server coordinating it at the end (a fault campaign reports whether the server it
    # faulted was one)
    coordinators: dict[str, str] = field(default_factory=dict)

    ANOMALIES = (
        "aborted_reads",
        "lost",
        "torn",
        "duplicates",
        "offset_conflicts",
        "past_lso",
        "unknown",
        "unsettled",
    )

    def anomalies(self) -> dict[str, int]:
        return {name: int(getattr(self, name)) for name in self.ANOMALIES}

    def ok(self) -> bool:
        return not any(self.anomalies().values())

    def render(self) -> str:
        lines = [
            f"transactions              {self.transactions}",
            f"  committed               {self.committed}",
            f"  aborted                 {self.aborted}",
            f"  indefinite              {self.indefinite}",
            f"transactional values sent {self.values_sent}",
            f"read-committed deliveries {self.observed}",
            f"final read (committed)    {self.final_committed}",
            f"final read (uncommitted)  {self.final_uncommitted}",
            f"aborted reads             {self.aborted_reads}",
            f"lost committed writes     {self.lost}",
            f"torn transactions         {self.torn}",
            f"duplicates                {self.duplicates}",
            f"offset conflicts          {self.offset_conflicts}",
            f"read past the LSO         {self.past_lso}",
            f"values nobody sent        {self.unknown}",
            f"partitions never settled  {self.unsettled}",
        ]
        for kind, examples in self.examples.items():
            lines += [f"{kind}: {example}" for example in examples]
        return "\n".join(lines + [f"problem: {p}" for p in self.problems[:20]])

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok()}


Reads = Mapping[int, Sequence[tuple[int, str]]]  # partition → (offset, value), in offset order


def analyse(
    transactions: Iterable[Transaction],
    observed: Iterable[Observation],
    final_committed: Reads,
    final_uncommitted: Reads,
    *,
    unsettled: Iterable[str] = (),
) -> TransactionSummary:
    """Judge a history: the writers' transactions, what read-committed readers were handed meanwhile, and the
    final reads of every partition (taken once every transaction was decided). The anomalies, each counted
    once per value, transaction or offset as said:

    * **aborted reads** (values): a value of an *aborted* transaction (one whose commit was never asked for)
      that a read-committed reader saw, while the writers ran or in the final read. Such a transaction can
      never commit, so read-committed must never show it.
    * **lost** (values): a value of a *committed* transaction absent from the final read-committed read.
    * **torn** (transactions): a transaction of any outcome, indefinite ones included, of which the final
      read-committed read shows some values but not all. (Its missing values, if it committed, are lost too.)
    * **duplicates** (values): a value seen at two or more offsets, by any read of either isolation. Each value
      is sent once, in one transaction, so two offsets mean it was stored twice.
    * **offset conflicts** (offsets): an offset of a partition claimed by two different values: by any
      reads (either isolation, live or final) or by an acknowledgement of a send.
    * **past the LSO** (values): a read-committed reader saw a value of a transaction before its commit was
      asked for (the transaction was open: its records were past the last stable offset), or saw a value of
      an *indefinite* transaction that the final read-committed read does not hold (it was never committed).
      A seen value of an *aborted* transaction is an aborted read, not counted again here.
    * **unknown** (values): a value in any read that no writer sent.
    * **unsettled** (partitions): given by the caller; partitions whose last stable offset never reached their
      end after the writers stopped (a transaction nobody decided, past its timeout).
    """
    summary = TransactionSummary()
    examples: dict[str, list[str]] = defaultdict(list)

    def example(kind: str, text: str) -> None:
        if len(examples[kind]) < EXAMPLES:
            examples[kind].append(text)

    txns = list(transactions)
    owner: dict[str, Transaction] = {}
    for txn in txns:
        for value in txn.values:
            owner[value] = txn
    summary.transactions = len(txns)
    summary.committed = sum(t.outcome == "committed" for t in txns)
    summary.aborted = sum(t.outcome == "aborted" for t in txns)
    summary.indefinite = sum(t.outcome == "indefinite" for t in txns)
    summary.values_sent = len(owner)
    seen = list(observed)
    summary.observed = len(seen)
    committed_read = [(p, o, v) for p, records in final_committed.items() for o, v in records]
    uncommitted_read = [(p, o, v) for p, records in final_uncommitted.items() for o, v in records]
    summary.final_committed = len(committed_read)
    summary.final_uncommitted = len(uncommitted_read)
    in_final = {v for _p, _o, v in committed_read}

    # Every read, and where it was made, for unknown values, duplicates and conflicts.
    reads: list[tuple[str, int, int, str]] = [(o.reader, o.partition, o.offset, o.value) for o in seen]
    reads += [("final read-committed", p, o, v) for p, o, v in committed_read]
    reads += [("final read-uncommitted", p, o, v) for p, o, v in uncommitted_read]

    unknown = sorted({value for _r, _p, _o, value in reads if value not in owner})
    summary.unknown = len(unknown)
    for value in unknown:
        example("unknown", repr(value))

    # Aborted reads: live read-committed deliveries and the final read-committed read.
    aborted_seen: dict[str, str] = {}
    for reader, partition, offset, value in reads:
        writer = owner.get(value)
        if reader == "final read-uncommitted" or writer is None or writer.outcome != "aborted":
            continue
        aborted_seen.setdefault(value, f"{value} of aborted {writer.name} read at {partition}/{offset} by {reader}")
    summary.aborted_reads = len(aborted_seen)
    for text in list(aborted_seen.values())[:EXAMPLES]:
        example("aborted read", text)

    # Lost committed writes and torn transactions: the final read-committed read.
    for txn in txns:
        visible = [v for v in txn.values if v in in_final]
        missing = [v for v in txn.values if v not in in_final]
        if txn.outcome == "committed" and missing:
            summary.lost += len(missing)
            example("lost", f"{txn.name} committed, but {missing} are not in the final read-committed read")
        if visible and missing:
            summary.torn += 1
            example("torn", f"{txn.name} ({txn.outcome}): {visible} visible, {missing} not")

    # Duplicates: a value at two places.
    places: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for _reader, partition, offset, value in reads:
        places[value].add((partition, offset))
    for value, where in places.items():
        if len(where) > 1:
            summary.duplicates += 1
            example("duplicate", f"{value} at {sorted(where)}")

    # Offset conflicts: an offset with two values, by reads or acknowledgements.
    claims: dict[tuple[int, int], dict[str, str]] = defaultdict(dict)
    for reader, partition, offset, value in reads:
        claims[(partition, offset)].setdefault(value, reader)
    for txn in txns:
        for value, (partition, offset) in txn.acked.items():
            if offset >= 0:  # -1: a resend recognised as a duplicate too old to know where
                claims[(partition, offset)].setdefault(value, f"the acknowledgement to {txn.writer}")
    for (partition, offset), claimed in sorted(claims.items()):
        if len(claimed) > 1:
            summary.offset_conflicts += 1
            example("offset conflict", f"{partition}/{offset}: " + ", ".join(f"{v} ({w})" for v, w in claimed.items()))

    # Past the LSO: read-committed readers handed what was not yet (or never) committed.
    past: dict[str, str] = {}
    for obs in seen:
        source = owner.get(obs.value)
        if source is None or source.outcome == "aborted":
            continue
        at = f"at {obs.partition}/{obs.offset} by {obs.reader}"
        if source.commit_asked_at is not None and obs.at < source.commit_asked_at:
            early = source.commit_asked_at - obs.at
            past.setdefault(obs.value, f"{obs.value} of {source.name} read {at} {early:.3f}s before its commit")
        elif source.outcome == "indefinite" and obs.value not in in_final:
            past.setdefault(obs.value, f"{obs.value} of {source.name} (indefinite, never committed) read {at}")
    summary.past_lso = len(past)
    for text in list(past.values())[:EXAMPLES]:
        example("past the LSO", text)

    stuck = list(unsettled)
    summary.unsettled = len(stuck)
    for text in stuck:
        example("unsettled", text)
    summary.examples = dict(examples)
    return summary


# ---------------------------------------------------------------- I/O


def read_partitions(
    url: str, topic: str, ends: Mapping[int, int], *, committed: bool, timeout: float = 120.0
) -> dict[int, list[tuple[int, str]]]:
    """Every record of each partition from offset 0 to its end in ``ends``, (offset, value) in order, at either
    isolation. Offsets are not contiguous here: a transaction's marker takes one, and read-committed skips
    aborted batches; so a partition is done when the consumer's position (how far it fetched) reaches its end
    and a poll hands out nothing more (what was fetched but not yet handed out)."""
    out: dict[int, list[tuple[int, str]]] = {p: [] for p in ends}
    isolation = "read_committed" if committed else "read_uncommitted"
    deadline = time.monotonic() + timeout
    with Consumer(
        url, partitions=[(topic, p) for p in ends], start="earliest", isolation=isolation, wait_ms=0
    ) as consumer:
        for partition in ends:
            # Known positions before the first poll: position() of a partition not fetched yet asks its offsets,
            # and that answer, landing after a first fetch already moved on, would set it back to 0.
            consumer.seek(topic, partition, 0)
        while True:
            fetched_all = all(consumer.position(topic, p) >= end for p, end in ends.items())
            if time.monotonic() > deadline:
                raise TalosError(f"could not read {topic} ({isolation}) to its end within {timeout:.0f}s")
            messages = consumer.poll(0.5)
            if fetched_all and not messages:
                break
            for message in messages:
                records = out[message.partition]
                if records and message.offset <= records[-1][0]:
                    raise TalosError(f"{topic}/{message.partition}: offset {message.offset} after {records[-1][0]}")
                records.append((message.offset, (message.value or b"").decode()))
    return out


def _settle(url: str, topic: str, partitions: int, timeout: float) -> tuple[dict[int, int], dict[int, int], list[str]]:
    """Wait until every partition's last stable offset is its end (every transaction decided); the ends, the
    last stable offsets (where a read-committed reader can get to), and a line per partition for which that did
    not happen within ``timeout``."""
    deadline = time.monotonic() + timeout
    offsets: dict[int, dict[str, int]] = {}
    with Admin(url) as admin:
        while True:
            try:
                offsets = {p: admin.offsets(topic, p) for p in range(partitions)}
            except TalosError:
                offsets = {}
            if offsets and all(o["last_stable"] >= o["latest"] for o in offsets.values()):
                ends = {p: int(o["latest"]) for p, o in offsets.items()}
                return ends, ends, []
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
    if not offsets:
        raise TalosError(f"could not read the offsets of {topic}")
    stuck = [
        f"partition {p}: last stable offset {o['last_stable']} below its end {o['latest']} "
        f"{timeout:.0f}s after the writers stopped"
        for p, o in offsets.items()
        if o["last_stable"] < o["latest"]
    ]
    stable = {p: min(int(o["last_stable"]), int(o["latest"])) for p, o in offsets.items()}
    return {p: int(o["latest"]) for p, o in offsets.items()}, stable, stuck


@dataclass
class TransactionWorkload:
    """``writers`` transactional writers, and ``readers`` read-committed readers of every partition plus a group
    of ``members``, until :meth:`finish_writing` and :meth:`finish_reading`. Writer ``t<i>``'s transactional id
    is ``<topic>-<i>`` (the CLI's topic is ``<its topic>-txn``); on any error it gives the open transaction up
    (indefinite if its commit was asked for) and makes a new producer with the same id, whose init fences the
    old one and aborts what it left open, as an application would. Readers whose calls fail are replaced by
    new ones (reading from 0 again, or from the group's commits)."""

    url: str
    topic: str
    partitions: int
    writers: int = 3
    readers: int = 2
    members: int = 2
    abort_probability: float = ABORT_PROBABILITY
    transactions: list[Transaction] = field(default_factory=list)
    observed: list[Observation] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stop_writing: threading.Event = field(default_factory=threading.Event)
    stop_reading: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _writer_threads: list[threading.Thread] = field(default_factory=list)
    _reader_threads: list[threading.Thread] = field(default_factory=list)
    _closers: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for index in range(self.writers):
            self._spawn(self._writer_threads, self._write, f"t{index}")
        for index in range(self.readers):
            self._spawn(self._reader_threads, self._read, f"r{index}", None)
        for index in range(self.members):
            self._spawn(self._reader_threads, self._read, f"g{index}", f"{self.topic}-readers")

    def _spawn(self, threads: list[threading.Thread], target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=f"verify-txn-{args[0]}", daemon=True)
        thread.start()
        threads.append(thread)

    def _error(self, text: str) -> None:
        with self._lock:
            if len(self.errors) < 20:
                self.errors.append(text)

    def counts(self) -> Counter[str]:
        with self._lock:
            return Counter(t.outcome for t in self.transactions)

    def _producer(self, name: str, index: int) -> Producer | None:
        """A new instance of the writer's transactional id (its init fences older ones), or None at the stop."""
        while True:
            try:
                return Producer(
                    self.url,
                    transactional_id=f"{self.topic}-{index}",
                    transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
                    linger_ms=1,
                    delivery_timeout_s=60,
                    retry_backoff_ms=50,
                )
            except Exception as exc:
                self._error(f"{name}: starting its producer: {exc!r}")
                if self.stop_writing.wait(1.0):
                    return None

    def _write(self, name: str) -> None:
        index = int(name[1:])
        rng = random.Random()
        producer = self._producer(name, index)
        number = 0
        while producer is not None and not self.stop_writing.is_set():
            txn = Transaction(name, number)
            number += 1
            chosen = rng.sample(range(self.partitions), k=min(rng.randint(1, 3), self.partitions))
            count = rng.randint(len(chosen), max(len(chosen), 5))
            futures: dict[str, RecordFuture] = {}
            try:
                producer.begin_transaction()
                for i in range(count):
                    value = f"{name}:{txn.number}:{i}"
                    partition = chosen[i % len(chosen)]
                    txn.values[value] = partition
                    futures[value] = producer.send(self.topic, value.encode(), partition=partition)
                # Stored but undecided for a moment: a read-committed reader must not see it meanwhile (it is
                # past the last stable offset), as a read-uncommitted one would.
                producer.flush()
                time.sleep(rng.random() * OPEN_PAUSE_S)
                if rng.random() < self.abort_probability:
                    producer.abort_transaction()
                    txn.outcome = "aborted"
                else:
                    txn.commit_asked_at = time.monotonic()
                    producer.commit_transaction()
                    txn.outcome = "committed"
            except Exception as exc:
                txn.outcome = "indefinite" if txn.commit_asked_at is not None else "aborted"
                self._error(f"{name}: transaction {txn.number} ({txn.outcome}): {exc!r}")
                old, producer = producer, self._producer(name, index)  # the new one fences the old first
                self._discard(old)
            finally:
                for value, future in futures.items():
                    if future.done() and future.exception(timeout=0) is None:
                        meta = future.result(timeout=0)
                        txn.acked[value] = (meta.partition, meta.offset)
                with self._lock:
                    self.transactions.append(txn)
        if producer is not None:
            self._discard(producer)

    def _discard(self, producer: Producer) -> None:
        """Close a producer, in the background: one whose transaction was given up still sends what it has
        queued (as a zombie would: its successor's epoch must make the partitions refuse it), for up to its
        delivery timeout, and the writer need not wait for that."""

        def close() -> None:
            try:
                producer.close()
            except Exception as exc:
                self._error(f"closing a producer: {exc!r}")

        thread = threading.Thread(target=close, name="verify-txn-close", daemon=True)
        thread.start()
        with self._lock:
            self._closers.append(thread)

    def _read(self, name: str, group: str | None) -> None:
        where: dict[str, Any] = {"group": group} if group else {}
        while not self.stop_reading.is_set():
            try:
                with Consumer(
                    self.url,
                    topics=[self.topic],
                    start="earliest",
                    isolation="read_committed",
                    auto_commit_interval_s=1.0,
                    session_timeout_s=10.0,
                    request_timeout_s=15.0,
                    **where,
                ) as consumer:
                    while not self.stop_reading.is_set():
                        messages = consumer.poll(0.5)
                        now = time.monotonic()
                        batch = [
                            Observation(name, m.partition, m.offset, (m.value or b"").decode(), now) for m in messages
                        ]
                        with self._lock:
                            self.observed += batch
            except Exception as exc:
                self._error(f"reader {name}: {exc!r}")
                self.stop_reading.wait(1.0)

    def finish_writing(self, timeout: float = 600.0) -> None:
        self.stop_writing.set()
        for thread in self._writer_threads:
            thread.join(timeout)
        with self._lock:
            closers = list(self._closers)
        for thread in closers:
            thread.join(timeout)

    def finish_reading(self, timeout: float = 60.0) -> None:
        self.stop_reading.set()
        for thread in self._reader_threads:
            thread.join(timeout)


def run(
    url: str,
    *,
    seconds: float,
    topic: str,
    partitions: int = 6,
    writers: int = 3,
    readers: int = 2,
    members: int = 2,
    say: Callable[[str], None] = print,
) -> TransactionSummary:
    """Create ``topic``, run the workload for ``seconds``, let every transaction be decided, read everything
    back at both isolations, and judge it."""
    with Admin(url) as admin:
        admin.create_topic(topic, partitions=partitions)
    say(f"transactions: topic {topic}")
    workload = TransactionWorkload(url, topic, partitions, writers, readers, members)
    workload.start()
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        time.sleep(max(0.0, min(5.0, seconds - (time.monotonic() - started))))
        counts = workload.counts()
        say(
            f"{time.monotonic() - started:5.0f}s  transactions: committed {counts['committed']}  "
            f"aborted {counts['aborted']}  indefinite {counts['indefinite']}"
        )
    workload.finish_writing()
    say(f"{time.monotonic() - started:5.0f}s  transactions: waiting for every transaction to be decided ...")
    ends, stable, stuck = _settle(url, topic, partitions, SETTLE_TIMEOUT_S)
    time.sleep(1.0)  # the readers' last long polls see the last decisions too
    workload.finish_reading()
    say(f"{time.monotonic() - started:5.0f}s  transactions: reading {topic} (read-committed, read-uncommitted) ...")
    # A partition that never settled is read committed as far as it is stable: its unsettled line is the finding
    committed = read_partitions(url, topic, stable, committed=True)
    uncommitted = read_partitions(url, topic, ends, committed=False)
    with workload._lock:
        transactions, observed = list(workload.transactions), list(workload.observed)
    summary = analyse(transactions, observed, committed, uncommitted, unsettled=stuck)
    summary.problems[:0] = workload.errors
    summary.coordinators = _coordinators(url, [f"{topic}-{index}" for index in range(writers)])
    return summary


def _coordinators(url: str, transactional_ids: list[str]) -> dict[str, str]:
    """Which server coordinates each id now (unknown ones left out)."""
    found = {}
    with Admin(url) as admin:
        for transactional_id in transactional_ids:
            with contextlib.suppress(TalosError):
                server = admin.describe_transaction(transactional_id).get("coordinator")
                if isinstance(server, str):
                    found[transactional_id] = server
    return found
