"""A Kafka consumer group of confluent-kafka members (real processes, ``tests.e2e.kafka_member``) on a real
``talos standalone --kafka-port``, one of them killed (kill -9) while they consume a topic being written:
the other two take its partitions over once its session times out; every offset of every partition is
processed by some member (at least once), the group's commits end at the partitions' ends, and the members'
own logs show no partition held by two live members at once.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition

from server.devservices import wait_until
from talos import Admin
from tests.e2e.kafka_member import HEARTBEAT_INTERVAL_MS, SESSION_TIMEOUT_MS
from tests.helpers import KafkaStandalone, MemberProcesses, running_kafka_standalone

PARTITIONS = 6
PROCESS_S = 0.003  # a member's processing time per message: about 300 a second each


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaStandalone]:
    with running_kafka_standalone(tmp_path_factory.mktemp("kafka") / "data") as running:
        yield running


class Members(MemberProcesses):
    """confluent-kafka member processes (``tests.e2e.kafka_member``)."""

    def __init__(self, bootstrap: str, group: str, topic: str, directory: Path) -> None:
        super().__init__("tests.e2e.kafka_member", [bootstrap, group, topic], [str(PROCESS_S)], directory)

    def holding(self) -> dict[str, set[int]]:
        """What each live member holds now, by its own log (its last assign, unless revoked or lost since)."""
        held: dict[str, set[int]] = {name: set() for name in self.live()}
        for event in self.events():
            if event["member"] not in held:
                continue
            if event["event"] == "assign":
                held[event["member"]] = set(event["partitions"])
            elif event["event"] in ("revoke", "lost"):
                held[event["member"]] = set()
        return held

    def processed(self, since: float = 0.0) -> int:
        return sum(1 for e in self.events() if e["event"] == "msg" and float(e["t"]) > since)


class Writer:
    """A confluent-kafka producer writing ``live:<n>`` round-robin over the partitions, ``rate`` a second, until
    :meth:`finish` (which flushes: every value is acknowledged, or the test fails)."""

    def __init__(self, bootstrap: str, topic: str, rate: float) -> None:
        self.sent = 0
        self.errors: list[str] = []
        self._producer = KafkaProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(topic, rate), daemon=True)
        self._thread.start()

    def _run(self, topic: str, rate: float) -> None:
        while not self._stop.wait(1.0 / rate):
            self._producer.produce(
                topic, value=f"live:{self.sent}".encode(), partition=self.sent % PARTITIONS, on_delivery=self._report
            )
            self.sent += 1
            self._producer.poll(0)

    def _report(self, error: object, _message: object) -> None:
        if error is not None:
            self.errors.append(str(error))

    def finish(self) -> None:
        """Stop writing and wait for every acknowledgement."""
        self.close()
        assert self._producer.flush(30) == 0
        assert self.errors == []

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def check_holdings(members: Members, ended: float) -> int:
    """No partition held by two live members at once: per partition, the intervals [assign, revoke/lost] of each
    member (ending when it was killed, or ``ended`` for one still holding) do not overlap. The intervals found."""
    intervals: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
    since: dict[tuple[str, int], float] = {}
    for event in members.events():
        member, kind, when = str(event["member"]), event["event"], float(event["t"])
        if kind == "assign":
            for p in event["partitions"]:
                assert (member, p) not in since, f"{member} assigned {p} twice without a revoke"
                since[(member, p)] = when
        elif kind in ("revoke", "lost"):
            for p in event["partitions"]:
                if (member, p) in since:
                    intervals[p].append((since.pop((member, p)), when, member))
    for (member, p), start in since.items():
        intervals[p].append((start, members.killed_at.get(member, ended), member))
    for p, spans in sorted(intervals.items()):
        spans.sort()
        for (_, end, first), (start, _, second) in itertools.pairwise(spans):
            assert start >= end, f"partition {p} held by {first} until {end:.3f} and by {second} from {start:.3f}"
    return sum(map(len, intervals.values()))


@pytest.mark.slow
def test_a_killed_member_s_partitions_are_taken_over_and_every_offset_is_processed(
    kafka: KafkaStandalone, tmp_path: Path
) -> None:
    topic, group = f"kg-{uuid.uuid4().hex[:8]}", f"kafka-group-{uuid.uuid4().hex[:6]}"
    with Admin(kafka.url) as admin:
        admin.create_topic(topic, partitions=PARTITIONS)
    preload = KafkaProducer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True, "linger.ms": 20})
    for n in range(6000):
        preload.produce(topic, value=f"pre:{n}".encode(), partition=n % PARTITIONS)
        preload.poll(0)
    assert preload.flush(30) == 0
    members = Members(kafka.bootstrap, group, topic, tmp_path)
    started = time.monotonic()
    writer = Writer(kafka.bootstrap, topic, rate=100)
    try:
        for name in ("a", "b", "c"):
            members.start(name)

        def spread() -> bool:  # all three hold partitions, together all of them
            held = members.holding()
            return len(held) == 3 and all(held.values()) and set().union(*held.values()) == set(range(PARTITIONS))

        wait_until(spread, timeout=30, what="the three members sharing the partitions")
        shared_at = time.time()
        print(f"three members hold {members.holding()} {time.monotonic() - started:.1f}s after starting")
        wait_until(lambda: members.processed(shared_at) >= 300, timeout=30, what="300 messages processed by three")
        victim = "b"
        orphaned = members.holding()[victim]
        members.kill(victim)
        killed_at = members.killed_at[victim]
        print(f"killed {victim} holding {orphaned} after {members.processed()} messages processed")

        def taken_over() -> bool:
            held = members.holding()
            return set(held) == {"a", "c"} and set().union(*held.values()) == set(range(PARTITIONS))

        wait_until(taken_over, timeout=SESSION_TIMEOUT_MS / 1000 + 20, what="the survivors holding every partition")
        took = time.time() - killed_at
        print(f"survivors hold {members.holding()} {took:.1f}s after the kill")
        # not before its session could have ended (its last heartbeat may have come up to an interval earlier)
        assert took >= (SESSION_TIMEOUT_MS - HEARTBEAT_INTERVAL_MS) / 1000
        regranted = time.time()
        wait_until(lambda: members.processed(regranted) >= 300, timeout=30, what="300 messages processed by two")
        writer.finish()
        with Admin(kafka.url) as admin:
            ends = {p: int(admin.offsets(topic, p)["latest"]) for p in range(PARTITIONS)}
        assert sum(ends.values()) == 6000 + writer.sent

        def committed() -> dict[int, int | None]:
            with Admin(kafka.url) as admin:
                rows = admin.describe_group(group)["partitions"]
            return {int(r["partition"]): r["committed"] for r in rows if r["topic"] == topic}

        wait_until(lambda: committed() == ends, timeout=60, what=f"the group's commits reaching the ends {ends}")
        print(f"every partition processed and committed to its end {time.monotonic() - started:.1f}s after starting")
        members.stop_all()
        ended = time.time()

        events = members.events()
        deliveries = [(int(e["partition"]), int(e["offset"]), str(e["value"])) for e in events if e["event"] == "msg"]
        seen: dict[tuple[int, int], set[str]] = defaultdict(set)
        for p, o, value in deliveries:
            seen[(p, o)].add(value)
        missing = [(p, o) for p in range(PARTITIONS) for o in range(ends[p]) if (p, o) not in seen]
        assert missing == [], f"{len(missing)} offsets never processed, first {missing[:10]}"
        assert all(len(values) == 1 for values in seen.values()), "one offset processed with two values"
        produced = {f"pre:{n}" for n in range(6000)} | {f"live:{n}" for n in range(writer.sent)}
        assert set().union(*seen.values()) == produced
        redelivered = len(deliveries) - len(seen)
        taken = [
            (int(e["partition"]), int(e["offset"]))
            for e in events
            if e["event"] == "msg" and e["partition"] in orphaned and float(e["t"]) > killed_at
        ]
        assert {p for p, _ in taken} == orphaned, f"the survivors never processed some of {orphaned}"
        by_victim = {
            (int(e["partition"]), int(e["offset"])) for e in events if e["event"] == "msg" and e["member"] == victim
        }
        again = by_victim & set(taken)  # processed by the victim but not committed before it died
        failed_commits = [e for e in events if e["event"] == "commit-failed"]
        spans = check_holdings(members, ended)
        print(
            f"{len(deliveries)} deliveries of {len(seen)} offsets ({redelivered} redelivered, {len(again)} of them "
            f"processed by {victim} before it was killed; {len(taken)} of its partitions' messages processed by the "
            f"survivors after the kill), {len(failed_commits)} failed commits, "
            f"{spans} holding intervals without overlap"
        )
        # The commits once more, as a Kafka client reads them (OffsetFetch).
        reader = KafkaConsumer({"bootstrap.servers": kafka.bootstrap, "group.id": group})
        try:
            found = reader.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        finally:
            reader.close()
        assert {tp.partition: tp.offset for tp in found} == ends
    except BaseException:
        print(members.logs())
        print(kafka.server.process.tail(40) if kafka.server.process is not None else "")
        raise
    finally:
        writer.close()
        members.stop_all()
