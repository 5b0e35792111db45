"""A group member paused by a real SIGSTOP for longer than its session, then resumed, against a real
``talos standalone``: the partition it held has moved to another member meanwhile, so the batch it was
holding must not be committed by it, and nothing is lost (issue 22, part 3: fenced group members).

The paused member is a separate process (the SDK's ``Consumer`` with its heartbeat thread), so the pause stops
its heartbeats and its clock-watching alike, as a GC pause or a stalled VM would. A CI run of this test found
that a commit made just after the heartbeat learned the coordinator had forgotten the member returned as if it
had committed, and committed nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import orjson
import pytest

from talos import Admin, Consumer, Producer
from tests.e2e.conftest import StandaloneServer

SESSION_S = 2.0
MESSAGES = 20

# The paused member: polls one batch, says what it got, waits for "commit" on stdin (it is stopped and
# resumed meanwhile), then commits that batch and says how it went and what it believes it holds.
MEMBER = r"""
import sys, orjson
from talos import CommitFailedError, Consumer
url, topic, session = sys.argv[1], sys.argv[2], float(sys.argv[3])
consumer = Consumer(url, group=topic, topics=[topic], session_timeout_s=session, auto_commit=False)
batch = []
while not batch:
    batch = consumer.poll(1.0, max_messages=5)
print(orjson.dumps({"got": [m.offset for m in batch]}).decode(), flush=True)
sys.stdin.readline()
try:
    consumer.commit()
    outcome = "committed"
except CommitFailedError as exc:
    outcome = f"refused: {exc.code}"
print(orjson.dumps({"commit": outcome, "assignment": consumer.assignment}).decode(), flush=True)
consumer.close()
"""


@contextmanager
def member(url: str, topic: str) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, "-c", MEMBER, url, topic, str(SESSION_S)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)  # a stopped process does not act on SIGKILL's cleanup
            process.kill()
        process.wait(timeout=10)


def line(process: subprocess.Popen[str]) -> dict[str, object]:
    assert process.stdout is not None
    text = process.stdout.readline()
    assert text, f"the member exited with {process.wait(timeout=10)} before answering"
    answer = orjson.loads(text)
    assert isinstance(answer, dict)
    return answer


@pytest.mark.slow
def test_a_member_paused_past_its_session_cannot_commit_what_it_held(server: StandaloneServer, topic_name: str) -> None:
    with Admin(server.url) as admin:
        admin.create_topic(topic_name, partitions=1)
    with Producer(server.url) as producer:
        for i in range(MESSAGES):
            producer.send(topic_name, f"m{i}".encode(), partition=0)
        producer.flush()

    with member(server.url, topic_name) as paused:
        held = line(paused)["got"]
        assert held == [0, 1, 2, 3, 4]
        os.kill(paused.pid, signal.SIGSTOP)
        time.sleep(SESSION_S + 1.0)  # past the session: the lock on the partition expires

        # Another member takes the partition over and reads from the last commit: nothing was committed, so
        # it gets the paused member's batch too, and everything after it.
        with Consumer(
            server.url, group=topic_name, topics=[topic_name], session_timeout_s=SESSION_S, auto_commit=False
        ) as successor:
            seen: list[int] = []
            deadline = time.monotonic() + 20
            while len(seen) < MESSAGES and time.monotonic() < deadline:
                seen += [m.offset for m in successor.poll(0.5)]
            assert seen == list(range(MESSAGES)), seen

            # Resumed, the commit races its own heartbeat thread: sent first, the coordinator refuses it (the
            # session expired); sent after the heartbeat learned that, the SDK refuses it (it used to return as if
            # done: tests/unit/test_group_state.py); sent after the member joined again, the coordinator refuses it
            # (not the holder). Each way, the batch is not committed by the paused member.
            os.kill(paused.pid, signal.SIGCONT)
            assert paused.stdin is not None
            paused.stdin.write("commit\n")
            paused.stdin.flush()
            after = line(paused)
            assert str(after["commit"]).startswith("refused"), after  # fenced: the batch is no longer its to commit
            assert [topic_name, 0] not in after["assignment"], after

            successor.commit()
        assert paused.wait(timeout=20) == 0

    with Admin(server.url) as admin:
        committed = admin.describe_group(topic_name)
    offsets = {(row["topic"], row["partition"]): row for row in committed["partitions"]}
    assert offsets[(topic_name, 0)]["committed"] == MESSAGES, committed
