"""Consumer groups on a real cluster (3 servers, ZooKeeper, HDFS) with members as real processes.

- Members join, leave (SIGTERM) and crash (kill -9) while messages flow: every acknowledged message is
  processed at least once; the members' own log of when they held each partition shows no partition
  with two holders at once, and every message processed inside its member's holding; after each change
  the group moved exactly the fewest partitions any balanced assignment could.
- The coordinator's server is killed: the group goes on from its committed offsets (nothing before them
  is processed again) under a new coordinator.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from hashring import Ring
from server.devservices import wait_until
from talos import Admin, Producer, TalosError
from tests.cluster.conftest import Cluster, get_json
from tests.helpers import MemberProcesses, least_moves

pytestmark = [pytest.mark.hdfs, pytest.mark.zookeeper, pytest.mark.slow]

SESSION_S = 2.0
TopicPartition = tuple[str, int]


class Members(MemberProcesses):
    """Talos SDK member processes (``tests.cluster.group_member``)."""

    def __init__(self, url: str, group: str, topic: str, directory: Path) -> None:
        super().__init__("tests.cluster.group_member", [url, group, topic], [str(SESSION_S)], directory)

    def processed(self) -> set[str]:
        return {str(e["value"]) for e in self.events() if e["event"] == "msg"}


def stable(cluster: Cluster, group: str, members: int, timeout: float = 60.0) -> dict[TopicPartition, str]:
    """Wait for the group to settle with ``members`` members; its assignment by member instance name."""
    found: dict[str, object] = {}

    def settled() -> bool:
        nonlocal found
        try:
            found = get_json(f"{cluster.any_alive().url}/v1/groups/{group}")
        except OSError:
            return False
        return found["state"] == "stable" and len(found["members"]) == members  # type: ignore[arg-type]

    wait_until(settled, timeout=timeout, what=f"group {group} stable with {members} members")
    instance = {m["member_id"]: m["instance"] for m in found["members"]}  # type: ignore[attr-defined]
    return {(str(row["topic"]), int(row["partition"])): str(instance[row["member"]]) for row in found["target"]}  # type: ignore[attr-defined]


def check_least_moves(before: dict[TopicPartition, str], after: dict[TopicPartition, str]) -> None:
    for topic in {t for t, _ in after}:
        partitions = sorted(p for t, p in after if t == topic)
        members = sorted({m for (t, _), m in after.items() if t == topic})
        moved = sum(1 for p in partitions if before.get((topic, p)) != after[(topic, p)])
        least = least_moves(len(partitions), members, before, topic)
        print(f"{topic}: moved {moved}, least possible {least}")
        assert moved == least, (topic, before, after)


def check_holders(members: Members) -> None:
    """From the members' logs: no partition held by two members at once; messages only inside a holding."""
    intervals: dict[TopicPartition, list[tuple[float, float, str]]] = defaultdict(list)
    open_since: dict[tuple[str, TopicPartition], float] = {}
    messages = []
    for event in members.events():
        key = (str(event["member"]), (str(event.get("topic")), int(event.get("partition", -1))))  # type: ignore[call-overload]
        if event["event"] == "hold":
            assert key not in open_since, f"{key} held twice"
            open_since[key] = float(event["t"])  # type: ignore[arg-type]
        elif event["event"] == "release" and key in open_since:
            intervals[key[1]].append((open_since.pop(key), float(event["t"]), key[0]))  # type: ignore[arg-type]
        elif event["event"] == "msg":
            messages.append((key, float(event["t"])))  # type: ignore[arg-type]
    for (member, tp), since in open_since.items():  # killed while holding: it stopped when killed
        assert member in members.killed_at, f"{member} never released {tp}"
        intervals[tp].append((since, members.killed_at[member], member))
    for tp, spans in intervals.items():
        spans.sort()
        for (_, end, first), (start, _, second) in itertools.pairwise(spans):
            assert start >= end, f"{tp} held by {first} until {end:.3f} and by {second} from {start:.3f}"
    for (member, tp), when in messages:
        assert any(s <= when <= e and m == member for s, e, m in intervals[tp]), f"{member} read {tp} unheld"
    print(f"holdings: {sum(map(len, intervals.values()))} intervals over {len(intervals)} partitions, no overlap")


class Writer:
    """Produces ``w:<n>`` values until stopped, recording the acknowledged ones."""

    def __init__(self, url: str, topic: str, partitions: int, rate_s: float = 0.02) -> None:
        self.acked: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(url, topic, partitions, rate_s), daemon=True)
        self._thread.start()

    def _run(self, url: str, topic: str, partitions: int, rate_s: float) -> None:
        with Producer(url, linger_ms=1, delivery_timeout_s=60, retry_backoff_ms=50) as producer:
            n = 0
            while not self._stop.is_set():
                value = f"w:{n}"
                future = producer.send(topic, value.encode(), partition=n % partitions)
                n += 1
                try:
                    future.result(timeout=90)
                    self.acked.add(value)
                except (TalosError, TimeoutError):
                    pass
                time.sleep(rate_s)

    def finish(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)


def consume_a_while(members: Members, count: int = 25, *, since: float = 0.0) -> None:
    """Until the members have processed ``count`` messages more than now (after ``since``, a ``time.time()``,
    if given): the current assignment is in use, however loaded the machine (a fixed sleep may not be)."""

    def processed() -> int:
        return sum(1 for e in members.events() if e["event"] == "msg" and float(str(e["t"])) > since)

    target = (processed() if not since else 0) + count
    wait_until(lambda: processed() >= target, timeout=60, what=f"{count} more messages processed")


def coordinator_of(cluster: Cluster, group: str) -> str:
    ring = get_json(f"{cluster.any_alive().url}/v1/cluster")["ring"]
    return Ring({str(k): int(v) for k, v in ring["members"].items()}).owner(f"__group:{group}")  # type: ignore[index]


def test_members_join_leave_and_crash_without_loss_overlap_or_extra_moves(cluster: Cluster, tmp_path: Path) -> None:
    url = cluster.servers["s1"].url
    with Admin(url) as admin:
        admin.create_topic("events", partitions=6)
    members = Members(url, "churn", "events", tmp_path)
    writer = Writer(url, "events", 6)
    try:
        members.start("a")
        before = stable(cluster, "churn", 1)
        for change in ("+b", "+c", "-b", "kill c", "+d"):
            consume_a_while(members)  # between changes
            name = change.split()[-1].lstrip("+-")
            if change.startswith("+"):
                members.start(name)
            elif change.startswith("-"):
                members.leave(name)
            else:
                members.kill(name)
            count = sum(1 for n, p in members.processes.items() if p.alive())
            changed = time.monotonic()
            after = stable(cluster, "churn", count)
            print(f"after {change}: stable again in {time.monotonic() - changed:.1f}s")
            check_least_moves(before, after)
            before = after
        consume_a_while(members)
        writer.finish()
        wait_until(lambda: writer.acked <= members.processed(), timeout=60, what="every acknowledged message read")
        members.stop_all()
        processed = members.processed()
        print(f"acknowledged {len(writer.acked)}, processed {len(processed)} distinct")
        assert len(writer.acked) > 200
        check_holders(members)
    except BaseException:
        print(members.logs())
        raise
    finally:
        writer.finish()
        members.stop_all()


@pytest.mark.quick_reassign
def test_the_group_goes_on_from_its_commits_when_the_coordinators_server_is_killed(
    cluster: Cluster, tmp_path: Path
) -> None:
    group = "survivors"
    victim = coordinator_of(cluster, group)
    url = cluster.any_alive(besides=victim).url  # members and writer must not bootstrap from the victim
    with Admin(url) as admin:
        admin.create_topic("jobs", partitions=4)
    members = Members(url, group, "jobs", tmp_path)
    writer = Writer(url, "jobs", 4)
    try:
        members.start("a")
        members.start("b")
        stable(cluster, group, 2)
        described = get_json(f"{url}/v1/groups/{group}")
        assert described["coordinator"] == victim

        def committed() -> dict[int, int]:
            return {
                int(r["partition"]): int(r["committed"])
                for r in get_json(f"{url}/v1/groups/{group}")["partitions"]  # type: ignore[attr-defined]
                if r["topic"] == "jobs" and r["committed"] is not None
            }

        wait_until(
            lambda: len(committed()) == 4 and writer.acked <= members.processed(),
            timeout=30,
            what="every partition committed and caught up before the kill",
        )
        committed_before = committed()
        assert len(committed_before) == 4
        killed_at = time.time()
        cluster.servers[victim].kill()
        wait_until(
            lambda: any(e["event"] == "hold" and float(e["t"]) > killed_at for e in members.events()),  # type: ignore[arg-type]
            timeout=60,
            what="a member holding partitions under the new coordinator",
        )
        print(f"partitions granted again {time.time() - killed_at:.1f}s after the coordinator was killed")
        regranted = min(
            float(str(e["t"])) for e in members.events() if e["event"] == "hold" and float(str(e["t"])) > killed_at
        )
        consume_a_while(members, since=regranted)  # messages keep flowing under the new coordinator
        writer.finish()
        wait_until(lambda: writer.acked <= members.processed(), timeout=90, what="every message read after the kill")
        after = stable(cluster, group, 2)
        assert after
        described = get_json(f"{url}/v1/groups/{group}")
        assert described["coordinator"] != victim
        rows = {int(r["partition"]): r for r in described["partitions"] if r["topic"] == "jobs"}  # type: ignore[attr-defined]
        assert all(int(rows[p]["committed"]) >= committed_before[p] for p in range(4))
        rewound = [
            e
            for e in members.events()
            if e["event"] == "msg"
            and float(e["t"]) > killed_at
            and int(e["offset"]) < committed_before[int(e["partition"])]  # type: ignore[arg-type, call-overload]
        ]
        assert rewound == [], f"processed again from before the committed offsets: {rewound[:5]}"
        print(f"acknowledged {len(writer.acked)}; committed before the kill {committed_before}")
    except BaseException:
        print(members.logs())
        print(cluster.logs())
        raise
    finally:
        writer.finish()
        members.stop_all()
