"""Exactly-once writes of a source against a real Talos server, step by step: a crash after records were
written and before the checkpoint that covers them."""

from __future__ import annotations

from connectors.checkpoints import CheckpointStore
from connectors.reading import read_range, read_to_end
from connectors.source import SourceWriter
from connectors.task import TaskStatus
from talos import Admin, Producer
from tests.connectors.test_hdfs_source import read_topic


def writer(url: str, topic: str, connector: str, task: int, status: TaskStatus) -> SourceWriter:
    return SourceWriter(
        url=url, topic=topic, connector=connector, task=task, checkpoints=CheckpointStore(url), status=status
    )


def test_records_written_after_the_checkpoint_are_found_and_not_written_again(talos_url: str, name: str) -> None:
    Admin(talos_url).create_topic(name, partitions=3)
    first = TaskStatus(name, 0)
    crashed = writer(talos_url, name, name, 0, first)
    assert crashed.recover() == {"0": {}}
    crashed.expect(lambda _: True)
    crashed.send("f:0", b"a")
    crashed.send("f:2", b"b")
    crashed.commit({"position": 4})
    crashed.send("f:4", b"c")
    crashed.send("f:6", b"d")
    crashed._producer.flush()  # written and acknowledged ... then the process dies: no checkpoint
    crashed._producer.close()

    status = TaskStatus(name, 0)
    restarted = writer(talos_url, name, name, 0, status)
    assert restarted.recover() == {"0": {"position": 4}}
    restarted.expect(lambda _: True)
    assert [restarted.send(source, value) for source, value in [("f:4", b"c"), ("f:6", b"d"), ("f:8", b"e")]] == [
        False,
        False,
        True,
    ]
    restarted.commit({"position": 10})
    restarted.close()
    assert status.skipped == 2
    assert status.records == 1
    assert sorted(m.value for m in read_topic(talos_url, name)) == [b"a", b"b", b"c", b"d", b"e"]


def test_a_task_sees_every_task_s_checkpoint_and_another_connector_s_records_are_not_its_own(
    talos_url: str, name: str
) -> None:
    Admin(talos_url).create_topic(name, partitions=1)
    other = writer(talos_url, name, f"{name}-other", 0, TaskStatus("other", 0))
    other.recover()
    other.send("f:0", b"other's")
    other.commit({})
    other.close()
    task1 = writer(talos_url, name, name, 1, TaskStatus(name, 1))
    task1.recover()
    task1.commit({"files": {"/x": 7}})
    task1.close()

    task0 = writer(talos_url, name, name, 0, TaskStatus(name, 0))
    assert task0.recover() == {"0": {}, "1": {"files": {"/x": 7}}}
    assert task0.send("f:0", b"mine")  # the same position, but another connector wrote it
    task0.commit({})
    task0.close()
    assert sorted(m.value for m in read_topic(talos_url, name)) == [b"mine", b"other's"]


def test_a_second_crash_before_the_task_met_what_the_first_recovery_found_writes_nothing_twice(
    talos_url: str, name: str
) -> None:
    Admin(talos_url).create_topic(name, partitions=1)
    first = writer(talos_url, name, name, 0, TaskStatus(name, 0))
    first.recover()
    first.expect(lambda _: True)
    first.send("a:0", b"a0")
    first.commit({"a": 1, "b": 0})
    first.send("b:0", b"b0")
    first.send("b:1", b"b1")
    first._producer.flush()  # written, then a crash before the checkpoint
    first._producer.close()

    second = writer(talos_url, name, name, 0, TaskStatus(name, 0))
    assert second.recover()["0"] == {"a": 1, "b": 0}
    second.expect(lambda message: (message.header("talos-source") or b"").startswith(b"b:"))
    second.send("a:1", b"a1")  # it reads file a first, checkpoints (b's lines not met yet) ...
    second.commit({"a": 2, "b": 0})
    second._producer.close()  # ... and crashes again

    status = TaskStatus(name, 0)
    third = writer(talos_url, name, name, 0, status)
    assert third.recover()["0"] == {"a": 2, "b": 0}
    third.expect(lambda _: True)
    assert [third.send(s, v) for s, v in [("b:0", b"b0"), ("b:1", b"b1"), ("b:2", b"b2")]] == [False, False, True]
    third.commit({"a": 2, "b": 3})
    third.close()
    assert status.skipped == 2
    assert sorted(m.value for m in read_topic(talos_url, name)) == [b"a0", b"a1", b"b0", b"b1", b"b2"]


def test_a_range_is_read_whole_even_when_one_fetch_brings_more_than_one_poll_hands_out(
    talos_url: str, name: str
) -> None:
    Admin(talos_url).create_topic(name, partitions=1)
    with Producer(talos_url) as producer:
        for n in range(3000):  # small records: one 1 MiB fetch holds them all, a poll hands out 500
            producer.send(name, value=str(n).encode(), partition=0)
    assert [m.offset for m in read_range(talos_url, name, 0, 100, 2900)] == list(range(100, 2900))
    assert len(list(read_to_end(talos_url, name, 0))) == 3000
