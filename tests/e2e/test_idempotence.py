"""Idempotent producers against a real server: resends are stored once, also after a restart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from server.devservices import StandaloneServer
from talos import Admin, Consumer, Producer, RecordData, Urllib3Transport, encode_batch
from talos._transport import check

pytestmark = pytest.mark.slow


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[StandaloneServer]:
    server = StandaloneServer(tmp_path / "data").start()
    try:
        yield server
    finally:
        server.stop()


def post(url: str, path: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    import orjson

    transport = Urllib3Transport()
    try:
        answer = transport.request(
            "POST", url + path, body=orjson.dumps(body), headers={"content-type": "application/json"}
        )
    finally:
        transport.close()
    return answer.status, answer.json()  # type: ignore[return-value]


def values(url: str, topic: str, partition: int = 0) -> list[bytes | None]:
    with Consumer(url, partitions=[(topic, partition)], wait_ms=0) as consumer:
        out = []
        while True:
            got = consumer.poll(1.0)
            if not got:
                return out
            out += [m.value for m in got]


def test_rest_resend_is_answered_with_the_original_offsets_even_after_a_restart(standalone: StandaloneServer) -> None:
    url = standalone.url
    Admin(url).create_topic("idem", partitions=1)
    status, producer = post(url, "/v1/producers", {})
    assert status == 200 and producer["producer_epoch"] == 0
    pid = producer["producer_id"]
    path = "/v1/topics/idem/partitions/0/messages"
    first = {"producer_id": pid, "producer_epoch": 0, "sequence": 0, "messages": [{"value": "a"}, {"value": "b"}]}
    status, stored = post(url, path, first)
    assert status == 200
    assert [r["offset"] for r in stored["results"]] == [0, 1]  # type: ignore[attr-defined]
    status, again = post(url, path, first)
    assert status == 200
    assert [(r["offset"], r["duplicate"]) for r in again["results"]] == [(0, True), (1, True)]  # type: ignore[attr-defined]

    status, gap = post(url, path, {**first, "sequence": 5})
    assert status == 409 and gap["error"]["code"] == "OUT_OF_ORDER_SEQUENCE"  # type: ignore[index]

    standalone.stop()
    standalone.start()  # the producer state comes back from the log
    status, after = post(url, path, first)
    assert status == 200 and after["results"][0]["duplicate"] is True  # type: ignore[index]
    status, nxt = post(url, path, {**first, "sequence": 2, "messages": [{"value": "c"}]})
    assert status == 200 and nxt["results"][0]["offset"] == 2  # type: ignore[index]
    assert values(url, "idem") == [b"a", b"b", b"c"]

    # A new epoch for the same id fences the old instance.
    status, bumped = post(url, "/v1/producers", {"producer_id": pid})
    assert status == 200 and bumped == {"producer_id": pid, "producer_epoch": 1}
    status, _ = post(url, path, {"producer_id": pid, "producer_epoch": 1, "sequence": 0, "messages": [{"value": "d"}]})
    assert status == 200
    status, fenced = post(url, path, {**first, "sequence": 3, "messages": [{"value": "late"}]})
    assert status == 409 and fenced["error"]["code"] == "PRODUCER_FENCED"  # type: ignore[index]
    assert values(url, "idem") == [b"a", b"b", b"c", b"d"]


def test_binary_resend_from_the_sdk_codec_is_stored_once(standalone: StandaloneServer) -> None:
    url = standalone.url
    Admin(url).create_topic("raw", partitions=1)
    transport = Urllib3Transport()
    try:
        init = check(transport.request("POST", f"{url}/v1/producers", body=b"{}")).json()
        batch = encode_batch(
            [RecordData(b"x"), RecordData(b"y")],
            producer_id=init["producer_id"],  # type: ignore[index]
            producer_epoch=0,
            base_sequence=0,
        )
        headers = {"content-type": "application/vnd.talos.batch"}
        path = f"{url}/v1/topics/raw/partitions/0/messages"
        answers = [check(transport.request("POST", path, body=batch, headers=headers)).json() for _ in range(3)]
    finally:
        transport.close()
    assert [a["results"][0]["offset"] for a in answers] == [0, 0, 0]  # type: ignore[index]
    assert [a["results"][0]["duplicate"] for a in answers] == [False, True, True]  # type: ignore[index]
    assert values(url, "raw") == [b"x", b"y"]


def test_idempotent_sdk_producer_stores_in_order(standalone: StandaloneServer) -> None:
    url = standalone.url
    Admin(url).create_topic("sdk", partitions=2)
    with Producer(url, idempotent=True, linger_ms=1) as producer:
        futures = [producer.send("sdk", f"{i}".encode(), partition=i % 2) for i in range(100)]
        producer.flush()
    assert [f.result().offset for f in futures[::2]] == list(range(50))
    assert values(url, "sdk", 0) == [f"{i}".encode() for i in range(0, 100, 2)]


def test_cli_produces_idempotently_and_can_continue_as_a_producer_id(standalone: StandaloneServer) -> None:
    import subprocess
    import sys

    url = standalone.url
    Admin(url).create_topic("cli", partitions=1)
    status, producer = post(url, "/v1/producers", {})
    assert status == 200

    def produce(*flags: str, lines: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "talos.cli", "produce", "cli", "--url", url, "--partition", "0", *flags],
            input=lines,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    first = produce("--idempotent", lines="a\nb\n")
    assert first.returncode == 0, first.stderr
    second = produce("--producer-id", str(producer["producer_id"]), lines="c\n")
    assert second.returncode == 0, second.stderr
    assert values(url, "cli") == [b"a", b"b", b"c"]
    # Continuing as the producer id took a new epoch: the next one is 2.
    status, bumped = post(url, "/v1/producers", {"producer_id": producer["producer_id"]})
    assert bumped["producer_epoch"] == 2
    unknown = produce("--producer-id", "999999", lines="x\n")
    assert unknown.returncode != 0 and "999999" in unknown.stderr


def test_a_write_naming_an_old_load_session_is_refused_with_where_that_session_ended(
    standalone: StandaloneServer,
) -> None:
    url = standalone.url
    Admin(url).create_topic("swift", partitions=1)
    path = f"{url}/v1/topics/swift/partitions/0/messages"
    headers = {"content-type": "application/vnd.talos.batch"}
    transport = Urllib3Transport()
    try:
        batch = encode_batch([RecordData(b"a"), RecordData(b"b")])
        first = check(transport.request("POST", path, params={"acks": "accepted"}, body=batch, headers=headers))
        session = first.json()["results"][0]["session"]  # type: ignore[index]
        standalone.stop()  # graceful: what was accepted is flushed and sealed
        standalone.start()
        stale = transport.request(
            "POST", path, params={"acks": "accepted", "session": session}, body=batch, headers=headers
        )
        assert stale.status == 409
        error = stale.json()["error"]  # type: ignore[index]
        assert error["code"] == "SESSION_CHANGED" and error["session"] > session and error["session_end"] == 2
        offsets = check(
            transport.request("GET", f"{url}/v1/topics/swift/partitions/0/offsets", params={"session": session})
        )
        assert offsets.json()["session_end"] == 2  # type: ignore[index]
    finally:
        transport.close()
    with Producer(url, acks="accepted") as producer:  # the SDK keeps what is accepted until it is durable
        futures = [producer.send("swift", f"{i}".encode(), partition=0) for i in range(20)]
        producer.wait_durable(timeout=30)
    assert [f.result().offset for f in futures] == list(range(2, 22))
    assert values(url, "swift") == [b"a", b"b"] + [f"{i}".encode() for i in range(20)]
