"""Issue 20, point 5: the binary produce path refuses batches whose records do not decode (or whose count
lies), stores nothing of such a request, and a fetch never fails on a corrupt batch already stored."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fencing import DirectoryEpochSource, PartitionLog, open_storage
from server.devservices import StandaloneServer
from server.topics import partition_dir
from talos import HEADER_SIZE, Admin, Consumer, RecordData, crc32c, encode_batch
from talos._compression import codec_named

ADMIN_TOKEN = "batch-validation-admin-token"
BATCH = {"content-type": "application/vnd.talos.batch"}
ACKED = 40


def recrc(data: bytearray) -> bytes:
    """A forger's last step: length and CRC made right again."""
    struct.pack_into(">i", data, 8, len(data))
    struct.pack_into(">I", data, 13, crc32c(memoryview(data)[17:]))
    return bytes(data)


def valid(n: int = 3) -> bytearray:
    return bytearray(encode_batch([RecordData(f"v{i}".encode(), key=b"k") for i in range(n)]))


def garbage_records() -> bytes:
    data = valid()
    data[HEADER_SIZE:] = bytes(range(200, 200 + len(data) - HEADER_SIZE))
    return recrc(data)


def with_count(count: int) -> bytes:
    data = valid()
    struct.pack_into(">i", data, 19, count)
    return recrc(data)


def truncated_last_record() -> bytes:
    return recrc(valid()[:-2])


def varint_off_the_end() -> bytes:
    data = valid()
    struct.pack_into(">i", data, 19, 4)
    return recrc(data + b"\xff\xff\xff\xff\xff\xff")  # a fourth record whose length never ends


def huge_key_length() -> bytes:
    data = valid(1)
    body = b"\x00" + b"\x80\x80\x80\x80\x80\x02" + b"\x02v\x00"  # key length 2**34 (zigzag)
    data[HEADER_SIZE:] = bytes([len(body)]) + body
    return recrc(data)


ATTACKS = {
    "garbage records": garbage_records,
    "record_count 2**31-1": lambda: with_count(2**31 - 1),
    "count smaller than the records": lambda: with_count(2),
    "truncated last record": truncated_last_record,
    "varint running off the end": varint_off_the_end,
    "a good batch then a bad one": lambda: bytes(valid()) + garbage_records(),
}


class Server:
    def __init__(self, data: Path) -> None:
        self.instance = StandaloneServer(data, env={"TALOS_ADMIN_TOKEN": ADMIN_TOKEN, "TALOS_AUTH": "on"})
        self.token = ""

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.instance.url, headers={"authorization": f"Bearer {self.token}"}, timeout=30)

    def start_with_orders(self) -> None:
        """Start the server, make tenant acme with a token and its topic ``orders`` with ACKED messages."""
        self.instance.start()
        with Admin(self.instance.url, token=ADMIN_TOKEN) as admin:
            admin.create_tenant("acme")
            self.token = admin.create_token("acme")["token"]
        with Admin(self.instance.url, token=self.token) as tenant:
            tenant.create_topic("orders", partitions=1)
        with self.client() as http:
            messages = [{"value": f"m{i}", "partition": 0} for i in range(ACKED)]
            assert http.post("/v1/topics/orders/messages", json={"messages": messages}).status_code == 200

    def restart(self) -> None:
        self.instance.stop()
        self.instance.start()

    def latest(self) -> int:
        with self.client() as http:
            return int(http.get("/v1/topics/orders/partitions/0/offsets").json()["latest"])

    def fetch_json(self, offset: int) -> dict[str, object]:
        with self.client() as http:
            response = http.get("/v1/topics/orders/partitions/0/messages", params={"offset": offset})
        assert response.status_code == 200, response.text
        answer: dict[str, object] = response.json()
        return answer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = Server(tmp_path_factory.mktemp("validation") / "data")
    try:
        running.start_with_orders()
        yield running
    finally:
        running.instance.stop()


def consumed_until_after(server: Server, topic: str) -> list[bytes | None]:
    """The values the SDK consumer reads from the start of ``topic`` until the one ``after``."""
    values: list[bytes | None] = []
    with Consumer(server.instance.url, topics=[topic], token=server.token, start="earliest") as consumer:
        for _ in range(20):
            values += [m.value for m in consumer.poll(timeout=1)]
            if b"after" in values:
                break
    return values


def assert_first_messages_readable(server: Server) -> None:
    answer = server.fetch_json(0)
    assert [m["value"] for m in answer["messages"]] == [f"m{i}" for i in range(ACKED)]  # type: ignore[attr-defined]
    assert answer["next_offset"] == ACKED


@pytest.mark.slow
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_forged_batch_is_refused_and_nothing_is_stored(server: Server, attack: str) -> None:
    with server.client() as http:
        response = http.post("/v1/topics/orders/partitions/0/messages", content=ATTACKS[attack](), headers=BATCH)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "CORRUPT_BATCH"
    assert server.latest() == ACKED
    assert_first_messages_readable(server)


def test_garbage_inside_well_framed_records_is_stored_and_stepped_over(server: Server) -> None:
    """The validator checks framing and count, not the fields inside a record (that would cost ~9x as much on
    every produce): such a batch keeps its offsets, and both fetch paths step over it whole and say so."""
    with Admin(server.instance.url, token=server.token) as tenant:
        tenant.create_topic("inner", partitions=1)
    body = (
        bytes(encode_batch([RecordData(b"before")])) + huge_key_length() + bytes(encode_batch([RecordData(b"after")]))
    )
    with server.client() as http:
        response = http.post("/v1/topics/inner/partitions/0/messages", content=body, headers=BATCH)
        assert response.status_code == 200, response.text
        answer = http.get("/v1/topics/inner/partitions/0/messages", params={"offset": 0}).json()
    assert [(m["offset"], m["value"]) for m in answer["messages"]] == [(0, "before"), (2, "after")]
    [skipped] = answer["skipped"]
    assert (skipped["base_offset"], skipped["next_offset"]) == (1, 2)
    assert answer["next_offset"] == 3
    values = consumed_until_after(server, "inner")
    assert values == [b"before", b"after"]


def test_a_decompression_bomb_is_stored_but_the_server_decompresses_only_so_much(server: Server) -> None:
    """A zstd batch of a few KiB holding a 20 MiB record is stored as it came (the server checks a compressed
    batch's header and CRC only). The server's own JSON answer decompresses no more than twice its request
    limit (16 MiB) and steps over it, saying why; the SDK consumer, which decompresses on its own CPU (up to
    64 MiB), reads it whole."""
    with Admin(server.instance.url, token=server.token) as tenant:
        tenant.create_topic("bombs", partitions=1)
    bomb = bytes(encode_batch([RecordData(bytes(20 << 20))], compression=codec_named("zstd")))
    assert len(bomb) < 8192
    body = bomb + bytes(encode_batch([RecordData(b"after")]))
    with server.client() as http:
        response = http.post("/v1/topics/bombs/partitions/0/messages", content=body, headers=BATCH)
        assert response.status_code == 200, response.text
        answer = http.get("/v1/topics/bombs/partitions/0/messages", params={"offset": 0}).json()
    assert [(m["offset"], m["value"]) for m in answer["messages"]] == [(1, "after")]
    [skipped] = answer["skipped"]
    assert (skipped["base_offset"], skipped["next_offset"]) == (0, 1)
    assert str(16 << 20) in skipped["error"]
    values = consumed_until_after(server, "bombs")
    assert [len(v or b"") for v in values] == [20 << 20, 5]


@pytest.mark.slow
def test_still_readable_after_a_restart(server: Server) -> None:
    server.restart()
    assert server.latest() == ACKED
    assert_first_messages_readable(server)


@pytest.mark.slow
def test_a_corrupt_stored_batch_is_stepped_over_by_both_fetch_paths(tmp_path: Path) -> None:
    """A batch an older server stored without checking its records: JSON fetch answers what is readable and
    moves past it (no 500), the SDK consumer skips it and reads on."""
    data = tmp_path / "data"
    server = Server(data)
    try:
        server.start_with_orders()
        server.instance.stop()
        fs, root = open_storage(str(data))  # as the server before this change did: append unchecked
        directory = partition_dir(root, "orders", 0)
        plog = PartitionLog.open(fs, directory, DirectoryEpochSource(fs, directory))
        plog.append(encode_batch([RecordData(b"before")]))
        plog.append(with_count(2**31 - 1), verify=False)
        plog.append(encode_batch([RecordData(b"after")]))
        plog.flush()
        plog.close()
        server.instance.start()
        assert_first_messages_readable(server)
        answer = server.fetch_json(ACKED)
        skipped_end = ACKED + 1 + 2**31 - 1
        assert [(m["offset"], m["value"]) for m in answer["messages"]] == [  # type: ignore[attr-defined]
            (ACKED, "before"),
            (skipped_end, "after"),
        ]
        [skipped] = answer["skipped"]  # type: ignore[misc]
        assert (skipped["base_offset"], skipped["next_offset"]) == (ACKED + 1, skipped_end)
        assert "records" in skipped["error"]
        assert answer["next_offset"] == skipped_end + 1
        values = consumed_until_after(server, "orders")
        assert values == [f"m{i}".encode() for i in range(ACKED)] + [b"before", b"after"]
    finally:
        server.instance.stop()
