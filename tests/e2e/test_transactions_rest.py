"""Transactions over REST against a real standalone server: a transaction's batches are invisible to
read-committed readers until it commits, an aborted one's never are (its marker's offset still counts), the
last stable offset holds while one is open, a new instance fences the old one and aborts its open
transaction, a batch outside the transaction is refused, and one open past its timeout is aborted."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server.devservices import StandaloneServer
from talos import RecordData, encode_batch
from talos._codec import TRANSACTIONAL
from tests.helpers import running_standalone

BATCH = "application/vnd.talos.batch"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneServer]:
    env = {"TALOS_MAINTENANCE_INTERVAL_S": "0.2"}
    with running_standalone(tmp_path_factory.mktemp("transactions") / "data", env=env) as running:
        yield running


class Txn:
    """One transactional id's REST calls, as a client would make them."""

    def __init__(self, client: httpx.Client, tid: str, timeout_ms: int = 60_000) -> None:
        self.client, self.tid = client, tid
        doc = self.call("init", timeout_ms=timeout_ms)
        self.pid, self.epoch = doc["producer_id"], doc["producer_epoch"]
        self.sequences: dict[tuple[str, int], int] = {}

    def call(self, leaf: str, **body: Any) -> dict[str, Any]:
        answer = self.client.post(f"/v1/transactions/{self.tid}/{leaf}", json=body)
        assert answer.status_code == 200, answer.text
        return answer.json()  # type: ignore[no-any-return]

    def ids(self) -> dict[str, int]:
        return {"producer_id": self.pid, "producer_epoch": self.epoch}

    def add(self, topic: str, *partitions: int) -> None:
        self.call("partitions", partitions=[{"topic": topic, "partition": p} for p in partitions], **self.ids())

    def send(self, topic: str, partition: int, *values: bytes) -> httpx.Response:
        sequence = self.sequences.get((topic, partition), 0)
        batch = encode_batch(
            [RecordData(v, b"k") for v in values],
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=sequence,
            attributes=TRANSACTIONAL,
        )
        answer = self.client.post(
            f"/v1/topics/{topic}/partitions/{partition}/messages",
            content=batch,
            headers={"content-type": BATCH},
            params={"transactional_id": self.tid},
        )
        if answer.status_code == 200:
            self.sequences[(topic, partition)] = sequence + len(values)
        return answer

    def end(self, *, commit: bool) -> None:
        doc = self.call("end", commit=commit, **self.ids())
        self.pid, self.epoch = doc["producer_id"], doc["producer_epoch"]  # the next transaction's epoch
        self.sequences.clear()


def values(client: httpx.Client, topic: str, partition: int = 0, *, committed: bool = True) -> list[str]:
    out: list[str] = []
    offset = 0
    params = {"isolation": "read_committed"} if committed else {}
    while True:
        doc = client.get(f"/v1/topics/{topic}/partitions/{partition}/messages", params={"offset": offset, **params})
        doc.raise_for_status()
        page = doc.json()
        out += [m["value"] for m in page["messages"]]
        if page["next_offset"] == offset:
            return out
        offset = page["next_offset"]


def offsets(client: httpx.Client, topic: str, partition: int = 0) -> dict[str, int]:
    answer = client.get(f"/v1/topics/{topic}/partitions/{partition}/offsets")
    answer.raise_for_status()
    return answer.json()  # type: ignore[no-any-return]


def make_topic(client: httpx.Client, name: str, partitions: int = 2) -> str:
    client.post("/v1/topics", json={"name": name, "partitions": partitions}).raise_for_status()
    return name


def test_committed_and_aborted_transactions_across_partitions(server: StandaloneServer) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        topic = make_topic(client, "txn-basic")
        txn = Txn(client, "writer-1")
        txn.add(topic, 0, 1)
        assert txn.send(topic, 0, b"a1", b"a2").status_code == 200
        assert txn.send(topic, 1, b"b1").status_code == 200
        client.post(f"/v1/topics/{topic}/partitions/0/messages", json={"messages": [{"value": "plain"}]})
        # Open: read-committed readers see nothing of it, nor anything after it; read-uncommitted see all
        assert values(client, topic, 0) == []
        assert values(client, topic, 0, committed=False) == ["a1", "a2", "plain"]
        assert offsets(client, topic, 0)["last_stable"] == 0 and offsets(client, topic, 0)["latest"] == 3
        epoch = txn.epoch
        txn.end(commit=True)
        assert txn.epoch == epoch + 1  # a bump per transaction: the late messages of this one are fenced
        assert values(client, topic, 0) == ["a1", "a2", "plain"]
        assert values(client, topic, 1) == ["b1"]
        # An aborted transaction: never seen, its marker's offset counted
        txn.add(topic, 0)
        assert txn.send(topic, 0, b"gone").status_code == 200
        txn.end(commit=False)
        assert values(client, topic, 0) == ["a1", "a2", "plain"]
        assert offsets(client, topic, 0)["last_stable"] == offsets(client, topic, 0)["latest"] == 6
        described = client.get(f"/v1/transactions/{txn.tid}").json()
        assert described["state"] == "CompleteAbort" and described["producer_epoch"] == txn.epoch


def test_a_batch_to_a_partition_outside_the_transaction_is_refused(server: StandaloneServer) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        topic = make_topic(client, "txn-outside")
        txn = Txn(client, "writer-outside")
        txn.add(topic, 0)
        refused = txn.send(topic, 1, b"x")
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "INVALID_TXN_STATE"
        no_id = client.post(
            f"/v1/topics/{topic}/partitions/0/messages",
            content=encode_batch(
                [RecordData(b"y")],
                producer_id=txn.pid,
                producer_epoch=txn.epoch,
                base_sequence=0,
                attributes=TRANSACTIONAL,
            ),
            headers={"content-type": BATCH},
        )
        assert no_id.status_code == 409
        txn.end(commit=True)
        assert offsets(client, topic, 1)["latest"] == 0  # never in the transaction: nothing written there
        assert values(client, topic, 0) == [] and offsets(client, topic, 0)["latest"] == 1  # the marker only


def test_a_new_instance_fences_the_old_one_and_aborts_its_open_transaction(server: StandaloneServer) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        topic = make_topic(client, "txn-fence")
        old = Txn(client, "writer-fenced")
        old.add(topic, 0)
        assert old.send(topic, 0, b"zombie").status_code == 200
        new = Txn(client, "writer-fenced")
        assert (new.pid, new.epoch) != (old.pid, old.epoch)
        assert values(client, topic, 0) == []  # aborted, and the partition is stable again
        assert offsets(client, topic, 0)["last_stable"] == offsets(client, topic, 0)["latest"]
        late = old.send(topic, 0, b"late")
        assert late.status_code == 409
        ended = client.post(f"/v1/transactions/{old.tid}/end", json={"commit": True, **old.ids()})
        assert ended.status_code == 409 and ended.json()["error"]["code"] == "PRODUCER_FENCED"
        new.add(topic, 0)
        assert new.send(topic, 0, b"fresh").status_code == 200
        new.end(commit=True)
        assert values(client, topic, 0) == ["fresh"]


def test_a_transaction_open_past_its_timeout_is_aborted(server: StandaloneServer) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        topic = make_topic(client, "txn-timeout")
        txn = Txn(client, "writer-slow", timeout_ms=500)
        txn.add(topic, 0)
        assert txn.send(topic, 0, b"slow").status_code == 200
        deadline = time.monotonic() + 20
        while offsets(client, topic, 0)["last_stable"] == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert offsets(client, topic, 0)["last_stable"] == 2  # the abort marker at 1
        assert values(client, topic, 0) == []
        ended = client.post(f"/v1/transactions/{txn.tid}/end", json={"commit": True, **txn.ids()})
        assert ended.json()["error"]["code"] == "PRODUCER_FENCED"


def committed_offsets(client: httpx.Client, group: str) -> dict[tuple[str, int], int]:
    answer = client.get(f"/v1/groups/{group}/offsets")
    answer.raise_for_status()
    return {(o["topic"], o["partition"]): o["offset"] for o in answer.json()["offsets"]}


def commit_in(txn: Txn, group: str, topic: str, partition: int, offset: int) -> None:
    txn.call("groups", group=group, **txn.ids())
    answer = txn.client.post(
        f"/v1/groups/{group}/offsets",
        json={
            "offsets": [{"topic": topic, "partition": partition, "offset": offset}],
            "transaction": {"transactional_id": txn.tid, **txn.ids()},
        },
    )
    assert answer.status_code == 200, answer.text


def test_offsets_committed_in_a_transaction_take_effect_with_it_and_survive_a_restart(tmp_path: Any) -> None:
    with running_standalone(tmp_path / "data") as server, httpx.Client(base_url=server.url, timeout=30) as client:
        source, sink = make_topic(client, "txn-source", 1), make_topic(client, "txn-sink", 1)
        client.post("/v1/groups/etl/offsets", json={"offsets": [{"topic": source, "partition": 0, "offset": 1}]})
        txn = Txn(client, "etl-1")
        txn.add(sink, 0)
        assert txn.send(sink, 0, b"out-1").status_code == 200
        commit_in(txn, "etl", source, 0, 5)
        assert committed_offsets(client, "etl") == {(source, 0): 1}  # pending: not yet
        unstable = client.get("/v1/groups/etl/offsets", params={"require_stable": "true"})
        assert unstable.status_code == 409 and unstable.json()["error"]["code"] == "UNSTABLE_OFFSET_COMMIT"
        txn.end(commit=True)
        assert committed_offsets(client, "etl") == {(source, 0): 5}
        # Aborted: the offsets are dropped with the output
        txn.add(sink, 0)
        assert txn.send(sink, 0, b"out-2").status_code == 200
        commit_in(txn, "etl", source, 0, 9)
        txn.end(commit=False)
        assert committed_offsets(client, "etl") == {(source, 0): 5}
        assert values(client, sink) == ["out-1"]
        # One left open at the restart: its offsets stay pending, and take effect when it commits after
        txn.add(sink, 0)
        assert txn.send(sink, 0, b"out-3").status_code == 200
        commit_in(txn, "etl", source, 0, 12)
        pid, epoch, sequences = txn.pid, txn.epoch, dict(txn.sequences)
        server.stop()
        server.start()
        assert committed_offsets(client, "etl") == {(source, 0): 5}
        txn.pid, txn.epoch, txn.sequences = pid, epoch, sequences
        txn.end(commit=True)
        assert committed_offsets(client, "etl") == {(source, 0): 12}
        assert values(client, sink) == ["out-1", "out-3"]


def test_a_late_commit_of_the_previous_transaction_cannot_decide_the_next(server: StandaloneServer) -> None:
    """Jepsen's Bufstream scenario: the commit of transaction N is sent, its answer is lost, the client goes on
    with N+1, and the first request (or a retry of it) arrives while N+1 is open. Each end moves the producer
    to a new epoch, so the late one names an epoch N+1 is not at: it is answered as the retry it is, and N+1
    stays open (its records invisible) until its own commit."""
    with httpx.Client(base_url=server.url, timeout=30) as client:
        topic = make_topic(client, "txn-late-commit", 1)
        txn = Txn(client, "writer-late")
        txn.add(topic, 0)
        assert txn.send(topic, 0, b"n").status_code == 200
        late_commit = {"commit": True, **txn.ids()}
        txn.end(commit=True)
        txn.add(topic, 0)
        assert txn.send(topic, 0, b"n+1").status_code == 200
        for _ in range(2):  # the delayed request, and a client retry of it
            replay = client.post(f"/v1/transactions/{txn.tid}/end", json=late_commit)
            assert replay.status_code in (200, 409), replay.text
            if replay.status_code == 200:  # a retry of N's commit: answered with the epoch N+1 already has
                assert (replay.json()["producer_id"], replay.json()["producer_epoch"]) == (txn.pid, txn.epoch)
        assert values(client, topic) == ["n"]  # N+1 still open: not committed by the late request
        assert client.get(f"/v1/transactions/{txn.tid}").json()["state"] == "Ongoing"
        late_abort = client.post(f"/v1/transactions/{txn.tid}/end", json={**late_commit, "commit": False})
        assert late_abort.status_code == 409  # nor aborted by one
        txn.end(commit=True)
        assert values(client, topic) == ["n", "n+1"]


def test_the_cli_lists_and_describes_transactional_ids(server: StandaloneServer) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        topic = make_topic(client, "txn-cli", 1)
        txn = Txn(client, "cli-writer")
        txn.add(topic, 0)
        assert txn.send(topic, 0, b"x").status_code == 200

    def talos(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "talos.cli", *args, "--url", server.url],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout

    listed = talos("transactions", "list")
    assert "cli-writer" in listed and "Ongoing" in listed and f"{topic}/0" in listed
    described = json.loads(talos("transactions", "describe", "cli-writer", "--json"))
    assert described["state"] == "Ongoing" and described["partitions"] == [{"topic": topic, "partition": 0}]
    assert described["producer_id"] == txn.pid
    gone = subprocess.run(
        [sys.executable, "-m", "talos.cli", "transactions", "describe", "nobody", "--url", server.url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert gone.returncode != 0 and "nobody" in gone.stderr


def test_an_idle_transactional_id_expires_and_a_timeout_past_the_servers_bound_is_refused(tmp_path: Any) -> None:
    env = {
        "TALOS_MAINTENANCE_INTERVAL_S": "0.2",
        "TALOS_TRANSACTIONAL_ID_EXPIRATION_MS": "1000",
        "TALOS_TRANSACTION_MAX_TIMEOUT_MS": "5000",
    }
    with running_standalone(tmp_path / "data", env=env) as server, httpx.Client(base_url=server.url) as client:
        topic = make_topic(client, "txn-expiry", 1)
        txn = Txn(client, "short-lived", timeout_ms=4000)
        txn.add(topic, 0)
        assert txn.send(topic, 0, b"x").status_code == 200
        txn.end(commit=True)
        deadline = time.monotonic() + 20
        while client.get(f"/v1/transactions/{txn.tid}").status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        gone = client.get(f"/v1/transactions/{txn.tid}")
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "TRANSACTIONAL_ID_NOT_FOUND"
        too_long = client.post(f"/v1/transactions/{txn.tid}/init", json={"timeout_ms": 6000})
        assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "INVALID_TRANSACTION_TIMEOUT"
        assert values(client, topic) == ["x"]


def test_a_transaction_left_open_by_a_producer_gone_times_out_after_a_restart(tmp_path: Any) -> None:
    """Nobody asks the coordinator after the restart: it takes its shards up by itself, and aborts."""
    env = {"TALOS_MAINTENANCE_INTERVAL_S": "0.2"}
    with running_standalone(tmp_path / "data", env=env) as server, httpx.Client(base_url=server.url) as client:
        topic = make_topic(client, "txn-orphan", 1)
        txn = Txn(client, "orphan", timeout_ms=3000)
        txn.add(topic, 0)
        assert txn.send(topic, 0, b"orphaned").status_code == 200
        server.stop()
        server.start()
        deadline = time.monotonic() + 30
        while offsets(client, topic)["last_stable"] == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert offsets(client, topic)["last_stable"] == offsets(client, topic)["latest"] == 2
        assert values(client, topic) == []
